"""Worker run inside the vLLM virtualenv: one real vLLM offline run, JSON in, JSON out.

    python -m runners._vllm_worker REQUEST.json RESULT.json

``runners.vllm`` writes REQUEST.json (engine arguments, token lengths, options) and starts
this module with the Python that has vLLM; the main process never imports vLLM. The result
is always written (``{"ok": false, "stage", "error"}`` on failure, error on one line) unless
the process is killed. The protocol is documented in runners/vllm.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path


def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:2000]


def make_prompts(prompt_tokens, prefix_ids, prefix_tokens, vocab_size: int, seed: int):
    """Token-id prompts of the given lengths; requests of one prefix group share their first
    prefix_tokens ids (so prefix caching sees what the workload describes)."""
    import random

    rng = random.Random(seed)
    lo, hi = 4, max(vocab_size, 5)  # skip <unk> <s> </s> <pad>
    prefixes: dict = {}
    prompts = []
    for i, n in enumerate(prompt_tokens):
        ids: list[int] = []
        if prefix_ids is not None and prefix_ids[i] is not None and prefix_ids[i] >= 0:
            g = prefix_ids[i]
            k = min(int(prefix_tokens[i]), int(n))
            if g not in prefixes:
                prefixes[g] = [rng.randrange(lo, hi) for _ in range(int(prefix_tokens[i]))]
            ids = prefixes[g][:k]
        ids += [rng.randrange(lo, hi) for _ in range(int(n) - len(ids))]
        prompts.append(ids)
    return prompts


def job_inputs(req: dict, vocab_size: int, pass_index: int) -> list[dict]:
    """The job's prompts for one pass (fresh random ids per pass, prefix groups kept)."""
    prompts = make_prompts(req["prompt_tokens"], req.get("prefix_ids"), req.get("prefix_tokens"),
                           vocab_size, int(req.get("seed", 0)) + pass_index)
    return [{"prompt_token_ids": p} for p in prompts]


def reset_prefix_cache(llm) -> None:
    """Start a pass with an empty prefix cache (best effort: the prompts differ anyway)."""
    try:
        llm.reset_prefix_cache()
    except Exception:  # noqa: BLE001
        pass


def device_description() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"cuda: {torch.cuda.get_device_name(0)}"
    except Exception:  # noqa: BLE001
        pass
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu: {name or 'unknown'} ({os.cpu_count()} cores)"


def read_steps(path: Path, skip_lines: int) -> tuple[list[list], float | None, int]:
    """Step rows after the first `skip_lines` lines, the last idle time, and the line count."""
    if not path.is_file():
        return [], None, 0
    lines = path.read_text().splitlines()
    rows, idle = [], None
    for line in lines[skip_lines:]:
        try:
            v = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(v, dict):
            idle = v.get("idle", idle)
        else:
            rows.append(v)
    return rows, idle, len(lines)


def counters(llm) -> dict[str, float]:
    """Sum of each vLLM Prometheus counter over its labels (empty if stats are off)."""
    out: dict[str, float] = {}
    try:
        for m in llm.get_metrics():
            if type(m).__name__ == "Counter":
                out[m.name] = out.get(m.name, 0.0) + float(m.value)
    except Exception:  # noqa: BLE001 - metrics are a bonus
        pass
    return out


def _set_env(req: dict) -> Path | None:
    """The step recorder's file (None: steps not recorded) and the request's environment."""
    steps_file = Path(req["steps_file"]) if req.get("steps_file") else None
    if steps_file is not None:
        steps_file.unlink(missing_ok=True)
        os.environ["TUNER_VLLM_STEPS_FILE"] = str(steps_file)
    for k, v in (req.get("env") or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = str(v)
    return steps_file


def model_checkpoint(req: dict) -> tuple[str, bool]:
    """(checkpoint to load, whether it has no weights on disk): the user's, or a random-weight
    one of the request's shape made locally (large shapes: config only, random init)."""
    if req.get("model_path"):
        return req["model_path"], False
    from tuner.runners.tiny_model import create_random_model, shape_hash

    cm = req["create_model"]
    out = None
    if cm.get("cache_dir"):  # one folder per shape under the cache folder
        key = shape_hash(cm["shape"], 0, bool(cm.get("weights", True)))
        out = Path(cm["cache_dir"]) / f"{cm.get('name') or 'llama'}-{key}"
    path = create_random_model({"name": cm.get("name"), **cm["shape"]}, out,
                               weights=cm.get("weights"))
    return str(path), not cm.get("weights", True)


def _engine_args(req: dict, res: dict, is_cpu: bool, steps_file: Path | None) -> dict:
    args = dict(req["engine_args"])
    res["stage"] = "create-model"
    args["model"], no_weights = model_checkpoint(req)
    if no_weights:
        args["load_format"] = "dummy"
    res["model_path"] = args["model"]
    if is_cpu and req.get("cpu_kv_cache_bytes"):
        # The CPU's "device memory" for the KV cache is what the memory plan gives it: vLLM's
        # kv_cache_memory_bytes (exact bytes); the legacy VLLM_CPU_KVCACHE_SPACE (whole GiB)
        # would override it, so it is removed.
        args["kv_cache_memory_bytes"] = int(req["cpu_kv_cache_bytes"])
        os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    if not is_cpu:
        args.update(req.get("gpu_only_args") or {})
    elif not req.get("model_path") and "dtype" not in args:
        # run what tuner profiles a CPU in; the random model's config says bfloat16, which a
        # CPU without AVX512-BF16 runs through a slow fallback (~7x float32 on 500-token
        # prefills, measured on an AVX2 EPYC)
        from tuner.profilers.profile import CPU_DTYPE

        args["dtype"] = CPU_DTYPE
        note = (f"dtype {CPU_DTYPE} on the CPU, as tuner profiles a CPU (the random model's "
                "config says bfloat16)")
        if args.get("kv_cache_dtype", "auto") == "auto" and "kv_cache_memory_bytes" in args:
            # the KV cache follows the model's dtype: twice the bytes a 16-bit plan gave it,
            # so it holds the tokens the plan counted
            args["kv_cache_memory_bytes"] *= 2
            note += f"; its {CPU_DTYPE} KV cache given twice the plan's 16-bit bytes (same tokens)"
        res.setdefault("notes", []).append(note)
    if req.get("record_steps", True) and steps_file is not None:
        args["scheduler_cls"] = "tuner.runners._vllm_sched.RecordingScheduler"
    args.setdefault("disable_log_stats", False)  # preemption counters via llm.get_metrics()
    args.setdefault("seed", int(req.get("seed", 0)))
    res["engine_args"] = {k: v for k, v in args.items() if k != "scheduler_cls"}
    return args


def _start_engine(llm_cls, args: dict, res: dict):
    """Engine start-up, reported separately from the makespan, and its KV cache size."""
    res["stage"] = "startup"
    t0 = time.monotonic()
    llm = llm_cls(**args)
    res["startup_s"] = time.monotonic() - t0
    try:
        res["async_scheduling"] = bool(
            llm.llm_engine.vllm_config.scheduler_config.async_scheduling)
    except Exception:  # noqa: BLE001 - a detail for the record
        pass
    try:
        cc = llm.llm_engine.vllm_config.cache_config
        res["kv_blocks"] = int(cc.num_gpu_blocks or 0)
        res["block_size"] = int(cc.block_size)
        res["kv_capacity_tokens"] = res["kv_blocks"] * res["block_size"]
    except Exception:  # noqa: BLE001
        pass
    return llm


def _warm_up(llm, sampling_cls, req: dict, res: dict, params: list, vocab: int,
             steps_file: Path | None) -> int:
    """The untimed part: one short request, then `warmup_passes` full passes of the job (the
    engine's caches -- compiled graphs, kernel primitives per shape, allocator pools -- fill on
    first sight of each batch shape, so the first passes of a job run slower than the steady
    state a long offline job sees). Returns the step-file lines to skip."""
    skip = 0
    temp = float(req.get("temperature", 0.0))
    if req.get("warmup", True):
        res["stage"] = "warmup"
        t0 = time.monotonic()
        warm = make_prompts([min(32, int(max(req["prompt_tokens"])))], None, None, vocab, 1)
        llm.generate([{"prompt_token_ids": warm[0]}],
                     sampling_cls(max_tokens=4, ignore_eos=True, temperature=temp),
                     use_tqdm=False)
        res["warmup_s"] = time.monotonic() - t0
    passes = max(int(req.get("warmup_passes", 0)), 0)
    if passes:
        res["stage"] = "warmup-passes"
        t0 = time.monotonic()
        for k in range(passes):
            llm.generate(job_inputs(req, vocab, 1000 + k), params, use_tqdm=False)
            reset_prefix_cache(llm)
        res["warmup_passes_s"] = time.monotonic() - t0
    res["warmup_passes"] = passes
    if steps_file is not None and (req.get("warmup", True) or passes):
        _, _, skip = read_steps(steps_file, 0)
    return skip


def _measure(llm, inputs: list[dict], params: list, outs_len: list[int]) -> dict:
    """One timed pass of the whole job, with vLLM's counters around it."""
    before = counters(llm)
    t_start = time.monotonic()
    outs = llm.generate(inputs, params, use_tqdm=False)
    t_end = time.monotonic()
    after = counters(llm)
    got = [len(o.outputs[0].token_ids) for o in outs]
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    one = {
        "makespan_s": t_end - t_start,
        "t_start": t_start,
        "t_end": t_end,
        "requests": len(outs),
        "prompt_tokens": int(sum(len(x["prompt_token_ids"]) for x in inputs)),
        "output_tokens": int(sum(got)),
        "throughput_tok_s": sum(got) / max(t_end - t_start, 1e-9),
        "mismatched_lengths": sum(1 for g, o in zip(got, outs_len, strict=True) if g != o),
        "metrics": delta,
    }
    if "vllm:num_preemptions" in delta:
        one["preemptions"] = int(delta["vllm:num_preemptions"])
    if "vllm:prefix_cache_hits" in delta:
        one["prefix_cache_hit_tokens"] = int(delta["vllm:prefix_cache_hits"])
    return one


def run(req: dict, res: dict) -> dict:
    """Fill `res` as the run goes (so a failure still reports its stage and timings)."""
    res.update({"ok": False, "stage": "import", "runner": "vllm"})
    steps_file = _set_env(req)

    t_import = time.monotonic()
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    res["import_s"] = time.monotonic() - t_import
    res["engine_version"] = f"vllm {vllm.__version__}"
    is_cpu = bool(current_platform.is_cpu())
    res["device"] = device_description()
    res["device_kind"] = "cpu" if is_cpu else "gpu"

    llm = _start_engine(LLM, _engine_args(req, res, is_cpu, steps_file), res)
    vocab = int(req.get("vocab_size") or 1000)
    temp = float(req.get("temperature", 0.0))
    outs_len = [int(x) for x in req["output_tokens"]]
    params = [SamplingParams(max_tokens=o, ignore_eos=True, temperature=temp,
                             detokenize=bool(req.get("detokenize", True))) for o in outs_len]
    skip = _warm_up(llm, SamplingParams, req, res, params, vocab, steps_file)

    # The measured job: `repeats` times (fresh random prompts each time, prefix cache reset),
    # the fastest kept: on a shared machine the minimum is the least disturbed run.
    res["stage"] = "run"
    repeats = max(int(req.get("repeats", 1)), 1)
    tries = []
    for k in range(repeats):
        if k:
            reset_prefix_cache(llm)
        one = _measure(llm, job_inputs(req, vocab, k), params, outs_len)
        if steps_file is not None:
            rows, idle, skip = read_steps(steps_file, skip)
            one["steps"] = rows
            one["steps_end_t"] = idle
            one["iterations"] = len(rows)
            if "preemptions" not in one:
                one["preemptions"] = int(sum(r[9] for r in rows))
        tries.append(one)
    best = min(tries, key=lambda t: t["makespan_s"])
    res.update(best)
    res["makespans_s"] = [t["makespan_s"] for t in tries]
    res["repeats"] = repeats
    res["ok"] = True
    res["stage"] = "done"
    return res


def serve(run_fn, argv: list[str], name: str) -> int:
    """The worker protocol shared by the engine workers: read REQUEST.json, run, write
    RESULT.json atomically (errors become one JSON line), then leave at once."""
    if len(argv) != 2:
        print(f"usage: python -m runners.{name} REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    req_path, res_path = Path(argv[0]), Path(argv[1])
    res: dict = {"ok": False, "stage": "read-request"}
    try:
        run_fn(json.loads(req_path.read_text()), res)
    except BaseException as exc:  # noqa: BLE001 - everything becomes a one-line JSON error
        traceback.print_exc()
        res.update({"ok": False, "error": one_line(exc)})
    tmp = res_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(res))
    os.replace(tmp, res_path)
    sys.stdout.flush()
    sys.stderr.flush()
    # vLLM's shutdown of its engine-core processes can take several seconds; the result is
    # written, so leave now (the engine core exits when its parent does).
    os._exit(0 if res.get("ok") else 1)


def main(argv: list[str]) -> int:
    return serve(run, argv, "_vllm_worker")


if __name__ == "__main__":
    main(sys.argv[1:])
