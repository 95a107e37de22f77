"""Writes examples/shared_system_prompt.jsonl: a synthetic offline job whose prompts share a
system prompt (the case SGLang's radix cache and lpm schedule are built for).

800 requests in token-count form ({"prompt_tokens", "output_tokens", "prefix_id",
"prefix_tokens"}): three system prompts of 1,200, 1,600 and 2,000 tokens (instructions plus
few-shot examples), shared by 50 %, 30 % and 20 % of the requests and interleaved in the file
as requests arrive from three tasks; each request adds its own 50-400 tokens of user text and
asks for 40-300 output tokens. Seeded: the file is the same on every run.

    python examples/make_shared_system_prompt.py [--out FILE] [--requests N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SYSTEM_PROMPT_TOKENS = (1200, 1600, 2000)
SHARES = (0.5, 0.3, 0.2)


def make(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    task = rng.choice(len(SHARES), size=n, p=SHARES)
    user = rng.integers(50, 401, size=n)
    out = rng.integers(40, 301, size=n)
    return [{"prompt_tokens": int(SYSTEM_PROMPT_TOKENS[t] + u), "output_tokens": int(o),
             "prefix_id": f"system-{t}", "prefix_tokens": int(SYSTEM_PROMPT_TOKENS[t])}
            for t, u, o in zip(task, user, out, strict=True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent / "shared_system_prompt.jsonl")
    ap.add_argument("--requests", type=int, default=800)
    ap.add_argument("--seed", type=int, default=28)
    a = ap.parse_args()
    rows = make(a.requests, a.seed)
    a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} requests to {a.out}")


if __name__ == "__main__":
    main()
