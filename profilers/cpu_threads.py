"""CPU matmul and CPU decode attention vs intra-op and inter-op threads (LM-Offload §4.1).

torch fixes the inter-op pool size once per process (`set_num_interop_threads` must come before
any parallel work), so each inter-op count is measured in a fresh subprocess:

    python -m profilers.cpu_threads '{"inter": 2, "intra": [1, 2], "model": {...}, ...}'

which prints one JSON line per case. In each case THREAD_TASKS independent ops are forked from
a TorchScript function (eager-mode forks run inline, so inter-op threads would idle) and joined;
each op uses `intra` threads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace


def run_subprocess(inter: int, intra: list[int], model, timing, timeout_s: float = 300.0) -> dict:
    """{(operation, intra): Timing-like dict or {'error': ...}} for one inter-op thread count."""
    from tuner.predictors.opmath import shape_dict

    spec = {"inter": inter, "intra": intra,
            "model": shape_dict(model) | {"max_position": int(getattr(model, "max_position", 4096))},
            "timing": vars(timing) if not hasattr(timing, "__dataclass_fields__")
            else {k: getattr(timing, k) for k in timing.__dataclass_fields__}}
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    try:
        r = subprocess.run([sys.executable, "-m", "tuner.profilers.cpu_threads", json.dumps(spec)],
                           capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            out[(d["operation"], d["intra"])] = d
    if not out:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"subprocess failed: {tail}"}
    return out


def _main(spec: dict) -> None:
    import torch

    from tuner.profilers.plan import THREAD_TASKS
    from tuner.profilers.timing import TimingSettings, time_cpu

    torch.set_num_interop_threads(int(spec["inter"]))
    m = SimpleNamespace(**spec["model"])
    settings = TimingSettings(**spec["timing"])
    h, ffn = m.hidden_size, m.intermediate_size
    d, nh, nkv = m.head_dim, m.num_heads, m.num_kv_heads
    t, bt, kv = 64, 8, min(1024, m.max_position)

    from tuner.profilers._forked import scripted

    fork_mm, fork_attn, _how = scripted()
    x, w = torch.randn(t, h), torch.randn(2 * ffn, h)
    q, k, v = torch.randn(bt, nh, 1, d), torch.randn(bt, nkv, kv, d), torch.randn(bt, nkv, kv, d)
    for intra in spec["intra"]:
        torch.set_num_threads(int(intra))
        for op, fn in (("cpu.matmul", lambda: fork_mm(x, w, THREAD_TASKS)),
                       ("cpu.attn.decode", lambda: fork_attn(q, k, v, THREAD_TASKS))):
            tm = time_cpu(fn, settings)
            print(json.dumps({"operation": op, "intra": int(intra), "median_s": tm.median_s,
                              "p10_s": tm.p10_s, "p90_s": tm.p90_s, "repeats": tm.repeats,
                              "calls_per_sample": tm.calls_per_sample}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: torch's inter-op pool can abort on exit


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
