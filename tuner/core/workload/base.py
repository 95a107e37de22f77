"""The `Workload` value: token lengths of an offline batch job (all requests known at t=0)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Columns of a CSV trace (the Vidur / Splitwise traces): prompt and output token counts.
CSV_PROMPT_COLUMN = "num_prefill_tokens"
CSV_OUTPUT_COLUMN = "num_decode_tokens"


@dataclass(frozen=True)
class Workload:
    """Prompt and output lengths as int64 arrays of equal length (one entry per request)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    # Shared-prefix groups: prefix_ids[i] = group id (-1: none), prefix_tokens[i] = its length.
    prefix_ids: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    source: str = ""
    tokenizer: str = ""  # how prompt lengths were obtained (model tokenizer / documented estimate)
    output_source: str = ""  # where output lengths came from (max_tokens / output_tokens / dist)
    skipped: int = 0  # invalid input lines skipped by load_workload(skip_invalid=True)
    # Seconds after the job starts at which each request reaches the engine (replaying a real
    # run); None for an offline job, where every request is there at t = 0.
    arrival_s: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])

    def take(self, idx: np.ndarray) -> Workload:
        """The sub-workload of the requests at `idx` (in that order)."""
        return Workload(
            prompt_tokens=self.prompt_tokens[idx],
            output_tokens=self.output_tokens[idx],
            prefix_ids=None if self.prefix_ids is None else self.prefix_ids[idx],
            prefix_tokens=None if self.prefix_tokens is None else self.prefix_tokens[idx],
            source=self.source,
            tokenizer=self.tokenizer,
            output_source=self.output_source,
            skipped=self.skipped,
            arrival_s=None if self.arrival_s is None else self.arrival_s[idx],
        )


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (for a TunerError)."""
    return " ".join(str(exc).split()) or type(exc).__name__
