"""Timing callables: warm-up, then repeated samples; median and spread per call.

On CUDA a sample is bracketed by CUDA events (device time, no host sync inside the sample);
on CPU by time.perf_counter; host<->device copies by perf_counter with a device sync after each
call (a pageable copy's host staging is part of its cost). A sample runs the callable `calls`
times so that even a 5 µs op is timed over at least `min_sample_s`.

`measure_interleaved` times a group of cases in several rounds (round-robin over the cases)
instead of one burst per case, so a burst of load from another process on a shared machine
spoils a few samples of many cases rather than all samples of a few; the median then ignores it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TimingSettings:
    warmup: int = 2
    repeats: int = 10
    min_sample_s: float = 1e-3
    max_case_s: float = 1.0
    max_calls: int = 200
    rounds: int = 3


@dataclass(frozen=True)
class Timing:
    median_s: float
    p10_s: float
    p90_s: float
    repeats: int
    calls_per_sample: int


def summarize(per_call: list[float], calls: int) -> Timing:
    a = np.asarray(per_call, dtype=np.float64)
    p10, med, p90 = np.percentile(a, [10, 50, 90])
    return Timing(float(med), float(p10), float(p90), len(a), calls)


class Sampler:
    """Times one callable with a given clock: 'cpu', 'cuda' (events) or 'host_sync'."""

    def __init__(self, fn: Callable[[], object], clock: str, sync: Callable[[], object] | None = None):
        self.fn, self.clock, self.sync = fn, clock, sync or (lambda: None)
        self.calls = 1

    def _call_once_s(self) -> float:
        t0 = time.perf_counter()
        self.fn()
        if self.clock != "cpu":
            self.sync()
        return time.perf_counter() - t0

    def calibrate(self, s: TimingSettings) -> None:
        """First calls (lazy init), then pick calls per sample from the fastest of three."""
        if self.clock == "cuda":  # pragma: no cover - GPU
            self.sync()
        est = min(self._call_once_s() for _ in range(3))
        if self.clock == "host_sync":
            self.calls = 1 if est > s.min_sample_s else int(min(s.max_calls, math.ceil(s.min_sample_s / max(est, 1e-9))))
        else:
            self.calls = int(min(s.max_calls, max(1, math.ceil(s.min_sample_s / max(est, 1e-9)))))
        for _ in range(max(0, s.warmup - 1) * self.calls):
            self.fn()
        if self.clock != "cpu":
            self.sync()

    def sample(self) -> float:
        """Seconds per call over one sample of `calls` calls."""
        n = self.calls
        if self.clock == "cuda":  # pragma: no cover - GPU
            import torch

            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(n):
                self.fn()
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1) / 1e3 / n
        t0 = time.perf_counter()
        if self.clock == "host_sync":
            for _ in range(n):
                self.fn()
                self.sync()
        else:
            for _ in range(n):
                self.fn()
        return (time.perf_counter() - t0) / n

    def run(self, s: TimingSettings) -> Timing:
        """Calibrate, then up to `repeats` samples within `max_case_s` (at least 3)."""
        self.calibrate(s)
        per_call: list[float] = []
        start = time.perf_counter()
        for _ in range(s.repeats):
            per_call.append(self.sample())
            if len(per_call) >= 3 and time.perf_counter() - start > s.max_case_s:
                break
        return summarize(per_call, self.calls)


def time_cpu(fn: Callable[[], object], s: TimingSettings) -> Timing:
    return Sampler(fn, "cpu").run(s)


def measure_interleaved(samplers: list[Sampler], s: TimingSettings,
                        on_round: Callable[[int], object] | None = None) -> list[Timing | Exception]:
    """Round-robin over already-calibrated samplers: `rounds` rounds of repeats/rounds samples
    each; a case stops early once it has used max_case_s (keeping >= 3 samples)."""
    rounds = max(1, min(s.rounds, s.repeats))
    per_round = [s.repeats // rounds + (1 if r < s.repeats % rounds else 0) for r in range(rounds)]
    samples: list[list[float]] = [[] for _ in samplers]
    spent = [0.0] * len(samplers)
    errors: list[Exception | None] = [None] * len(samplers)
    for r in range(rounds):
        for i, sm in enumerate(samplers):
            if errors[i] is not None:
                continue
            if len(samples[i]) >= 3 and spent[i] > s.max_case_s:
                continue
            t0 = time.perf_counter()
            try:
                for _ in range(per_round[r]):
                    samples[i].append(sm.sample())
            except Exception as exc:  # noqa: BLE001 - recorded per case by the caller
                errors[i] = exc
            spent[i] += time.perf_counter() - t0
        if on_round is not None:
            on_round(r)
    return [errors[i] if errors[i] is not None else summarize(samples[i], sm.calls)
            for i, sm in enumerate(samplers)]
