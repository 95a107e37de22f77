"""The runners, by name (``tuner validate --runner NAME``): a plain dict, so adding an engine is
one module (its ``ENGINE`` and run function) and one entry here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuner.core.errors import TunerError
from tuner.runners import base, transformers, vllm
from tuner.runners.base import Engine, RunResult


@dataclass(frozen=True)
class Runner:
    engine: Engine
    #: run(workload, model_spec, gpu, config, **options) -> RunResult
    run: Callable[..., RunResult]
    #: keyword options only this runner takes (the CLI passes them to it alone)
    options: frozenset[str] = frozenset()


RUNNERS: dict[str, Runner] = {
    "vllm": Runner(vllm.ENGINE, vllm.run_vllm, frozenset({"warmup_passes"})),
    "transformers": Runner(transformers.ENGINE, transformers.run_transformers),
}


def get_runner(name: str) -> Runner:
    if name not in RUNNERS:
        raise TunerError(f"Unknown runner {name!r}; choose one of {', '.join(RUNNERS)}.")
    return RUNNERS[name]


def find_python(runner: str, python: str | Path | None = None) -> str:
    """The Python to run `runner`'s worker with; RunnerNotInstalled (one line) if none has it."""
    return base.engine_python(get_runner(runner).engine, python)
