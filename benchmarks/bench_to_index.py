"""Turn a `vllm bench serve --save-result` JSON into the run-index form the fidelity suite reads.

    python benchmarks/bench_to_index.py RESULT.json --out DIR --gpu H100 --model llama-3-8b \
        [--hf-model ID] [--tp 1] [--max-num-seqs 256] [--max-num-batched-tokens 8192] \
        [--gpu-memory-utilization 0.9] [--vllm-version 0.11.0] [--num-scheduler-steps 1]

Appends one row to DIR/index.csv and writes the run's per-request lengths beside it
(num_prefill_tokens, num_decode_tokens), the layout of ../shared/fidelity/lambda-a100, so that
`python benchmarks/fidelity.py --data PARENT_OF_DIR` re-simulates it (benchmarks/on_gpu.sh uses
it to keep a GPU session's API-server runs). The engine settings are not in the result file:
they are the ones the server was started with, given here.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

COLUMNS = ("file", "source_path", "gpu", "model", "hf_model", "tp", "num_prompts", "completed",
           "measured_duration_s", "total_input_tokens", "total_output_tokens", "vllm_version",
           "scheduler", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
           "num_scheduler_steps", "measured_median_itl_ms", "notes")


def convert(result: Path, out: Path, *, gpu: str, model: str, hf_model: str = "", tp: int = 1,
            max_num_seqs: int = 256, max_num_batched_tokens: int = 8192,
            gpu_memory_utilization: float = 0.9, vllm_version: str = "",
            num_scheduler_steps: int | None = None) -> Path:
    from tuner.cli.replay import read_bench_result
    from tuner.core.errors import TunerError

    doc = json.loads(result.read_text())
    try:  # `tuner replay`'s reading: failed requests out, an empty answer is its EOS token
        m = read_bench_result(result, doc)
    except TunerError as exc:
        raise SystemExit(str(exc)) from None
    pairs = [(int(p), int(o)) for p, o in zip(m.prompt, m.output, strict=True)]
    out.mkdir(parents=True, exist_ok=True)
    name = f"{gpu}_{model}_tp{tp}_n{len(pairs)}_{result.stem}.csv"
    with (out / name).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("num_prefill_tokens", "num_decode_tokens"))
        w.writerows(pairs)
    index = out / "index.csv"
    new = not index.is_file()
    version = vllm_version or str(doc.get("vllm_version") or "")
    scheduler = "vllm-v0" if version.startswith(("0.5", "0.6", "0.7")) else "vllm"
    row = {"file": name, "source_path": str(result), "gpu": gpu, "model": model,
           "hf_model": hf_model or doc.get("model_id", ""), "tp": tp,
           "num_prompts": doc.get("num_prompts", len(pairs)), "completed": len(pairs),
           "measured_duration_s": float(doc["duration"]),
           "total_input_tokens": sum(p for p, _ in pairs),
           "total_output_tokens": sum(o for _, o in pairs), "vllm_version": version,
           "scheduler": scheduler, "max_num_seqs": max_num_seqs,
           "max_num_batched_tokens": max_num_batched_tokens,
           "gpu_memory_utilization": gpu_memory_utilization,
           "num_scheduler_steps": "" if num_scheduler_steps is None else num_scheduler_steps,
           # the client's median gap between streamed chunks: the suite checks the decode step
           "measured_median_itl_ms": "" if m.median_itl_s is None else 1e3 * m.median_itl_s,
           "notes": f"vllm bench serve, request rate {doc.get('request_rate', 'inf')}"
                    + (f"; {m.note}" if m.note else "")}
    # an index written before a column was added keeps its header (the new column left out)
    fields = COLUMNS if new else next(csv.reader(index.open(newline="")))
    with index.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow(row)
    return out / name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gpu", required=True, help="catalog GPU name")
    ap.add_argument("--model", required=True, help="catalog model name")
    ap.add_argument("--hf-model", default="")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--vllm-version", default="")
    ap.add_argument("--num-scheduler-steps", type=int, default=None,
                    help="V0 servers only: the --num-scheduler-steps the server ran")
    a = ap.parse_args(argv)
    path = convert(a.result, a.out, gpu=a.gpu, model=a.model, hf_model=a.hf_model, tp=a.tp,
                   max_num_seqs=a.max_num_seqs, max_num_batched_tokens=a.max_num_batched_tokens,
                   gpu_memory_utilization=a.gpu_memory_utilization,
                   vllm_version=a.vllm_version, num_scheduler_steps=a.num_scheduler_steps)
    print(f"wrote {path} and a row of {a.out / 'index.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
