"""A vLLM V1 scheduler that records what it schedules, one JSON line per engine step.

Loaded by vLLM itself through the engine argument ``scheduler_cls=
"tuner.runners._vllm_sched.RecordingScheduler"`` (vLLM's documented extension point), so it runs in
the engine-core process whatever the multiprocessing mode; the lines go to the file named by
the environment variable ``TUNER_VLLM_STEPS_FILE`` (inherited by the engine-core process).

vLLM V1 schedules asynchronously by default (``AsyncScheduler``: step k+1 is scheduled while
step k runs). A custom class that subclasses the plain ``Scheduler`` silently turns that off
and the engine runs slower than it would for a user, so ``RecordingScheduler`` becomes the
recording subclass of whichever scheduler vLLM itself chose (``scheduler_config.
async_scheduling``): the measured engine is the engine users get.

Each line is ``[t, prefill_tokens, prefill_sq, prefill_ctx, decodes, decode_kv, sampled,
running, waiting, preempted, kv_usage, admitted]`` with the same meaning as the simulator's
per-step record (tuner/sim/scheduler.py, predictors/features.py): a request's scheduled tokens are
a decode when they are one token after its whole prompt, otherwise a prefill chunk (a request
resumed after preemption recomputes prompt + output as prefill); a request is sampled when the
step completes its scheduled input (vLLM's ``is_prefill_chunk`` is false); ``t`` is
``time.monotonic()`` at the start of ``schedule()`` (one clock for all processes of the
machine), so the time of step k is ``t[k+1] - t[k]``. A line ``{"idle": t}`` marks the moment
the scheduler ran out of requests (the end of one ``LLM.generate`` call).

Only imported inside the vLLM virtualenv; nothing in tuner imports it.
"""

from __future__ import annotations

import json
import os
import time

from vllm.v1.core.sched.scheduler import Scheduler

try:  # vLLM >= 0.10
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
except ImportError:  # pragma: no cover - older vLLM: no asynchronous scheduling
    AsyncScheduler = None

STEP_FIELDS = ("t", "prefill_tokens", "prefill_sq", "prefill_ctx", "decodes", "decode_kv",
               "sampled", "running", "waiting", "preempted", "kv_usage", "admitted")


def _wants_async(args, kwargs) -> bool:
    cfg = kwargs.get("vllm_config", args[0] if args else None)
    return bool(getattr(getattr(cfg, "scheduler_config", None), "async_scheduling", False))


class RecordingScheduler(Scheduler):
    _tuner_fh = None

    def __new__(cls, *args, **kwargs):
        if cls is RecordingScheduler and AsyncScheduler is not None and _wants_async(args, kwargs):
            cls = RecordingAsyncScheduler
        return super().__new__(cls)

    def _tuner_file(self):
        if self._tuner_fh is None:
            path = os.environ.get("TUNER_VLLM_STEPS_FILE")
            # Buffered: flushed when the scheduler runs out of work (end of a generate call).
            self._tuner_fh = open(path, "a", buffering=1 << 20) if path else False  # noqa: SIM115
        return self._tuner_fh

    def schedule(self, *args, **kwargs):
        t = time.monotonic()
        out = super().schedule(*args, **kwargs)
        fh = self._tuner_file()
        if not fh or out.total_num_scheduled_tokens == 0:
            return out
        pf_tok = pf_sq = pf_ctx = dec = dec_kv = sampled = 0
        for rid, n in out.num_scheduled_tokens.items():
            req = self.requests[rid]
            before = req.num_computed_tokens - n  # _update_after_schedule advanced it by n
            if n == 1 and before >= req.num_prompt_tokens:
                dec += 1
                dec_kv += before + 1
            else:
                pf_tok += n
                pf_sq += n * n
                pf_ctx += n * before
            if not getattr(req, "is_prefill_chunk", False):
                sampled += 1
        preempted = len(out.preempted_req_ids or ())
        try:
            kv_usage = float(self.kv_cache_manager.usage)
        except Exception:  # noqa: BLE001 - a stat, never worth failing a step for
            kv_usage = -1.0
        fh.write(json.dumps([t, pf_tok, pf_sq, pf_ctx, dec, dec_kv, sampled, len(self.running),
                             len(self.waiting), preempted, round(kv_usage, 6),
                             len(out.scheduled_new_reqs)]) + "\n")
        return out

    def update_from_output(self, *args, **kwargs):
        res = super().update_from_output(*args, **kwargs)
        fh = self._tuner_file()
        if fh and not self.has_unfinished_requests():
            fh.write(json.dumps({"idle": time.monotonic()}) + "\n")
            fh.flush()
        return res


if AsyncScheduler is not None:
    class RecordingAsyncScheduler(RecordingScheduler, AsyncScheduler):
        """The recorder over vLLM's asynchronous scheduler (its default)."""
