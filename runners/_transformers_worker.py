"""Worker run by a Python with transformers (>= 5): one continuous-batching run, JSON in/out.

    python -m runners._transformers_worker REQUEST.json RESULT.json

Same request and result protocol as runners/_vllm_worker.py (see runners/transformers.py for
the knob mapping). transformers' continuous batching exposes no per-step schedule, so the
result has no ``steps``.
"""

from __future__ import annotations

import sys
import time

from tuner.runners._vllm_worker import device_description, make_prompts, model_checkpoint, serve


def _start(req: dict, res: dict, cuda: bool):
    """Load (or randomly initialise) the model and start transformers' continuous batching
    manager; its start-up is reported apart from the makespan."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    res["stage"] = "create-model"
    path, dummy = model_checkpoint(req)
    res["model_path"] = path
    a = req["engine_args"]
    res["stage"] = "startup"
    t0 = time.monotonic()
    dtype = torch.bfloat16
    dev = "cuda" if cuda else "cpu"
    if dummy:  # a large shape without weights on disk: random init in place
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(path)
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(dev)
    model.eval()
    gen = GenerationConfig(max_new_tokens=max(int(x) for x in req["output_tokens"]),
                           do_sample=False, eos_token_id=-1, pad_token_id=0)
    a = config_args(a, ContinuousBatchingConfig)
    cbc = ContinuousBatchingConfig(**a)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cbc)
    try:
        if req.get("warmup", True) and cuda:
            manager.warmup()  # builds the paged cache in this thread (and captures graphs)
        manager.start()
        cache = _wait_for_cache(manager, float(req.get("timeout_s") or 3600))
    except MemoryError as exc:
        raise MemoryError(footprint_message(str(exc), a, model.config, res["device"])) from None
    res["startup_s"] = time.monotonic() - t0
    res["engine_args"] = dict(a)
    page = int(a.get("page_size") or a.get("block_size") or 0)
    if cache is not None and page and getattr(cache, "num_blocks", None):
        # what transformers made of num_blocks (whole sectors), to set beside the plan's
        res["kv_capacity_tokens"] = int(cache.num_blocks) * page
        res["block_size"] = page
    return manager


def config_args(args: dict, config_cls) -> dict:
    """`args` in the names this transformers' ContinuousBatchingConfig takes: before 5.17 the
    page size was `block_size` (tokens a block holds; num_blocks counted those blocks, so the
    capacity in tokens is num_blocks x the size either way)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(config_cls)} if dataclasses.is_dataclass(
        config_cls) else set()
    out = dict(args)
    if names and "page_size" not in names and "page_size" in out:
        out["block_size"] = out.pop("page_size")
    return out


def _wait_for_cache(manager, timeout_s: float):
    """The manager's paged cache once its generation thread has made it (None where this
    transformers does not show it); the thread's own error when it stopped first (a cache
    that does not fit is found there, before any request)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        bp = getattr(manager, "batch_processor", "absent")
        if bp == "absent":
            return None
        if bp is not None:
            return getattr(bp, "cache", None)
        if not manager.is_running():
            raise thread_error(manager)
        time.sleep(0.01)
    raise TimeoutError("transformers' generation thread did not make its cache in time")


def thread_error(manager) -> BaseException:
    """Why transformers' generation thread stopped: its recorded fatal error (re-raised as
    itself, so a MemoryError stays one), else a plain RuntimeError."""
    err = getattr(getattr(manager, "background_thread_status", None), "fatal_error", None)
    if isinstance(err, BaseException):
        return err
    return RuntimeError("transformers' generation thread stopped (see the log)")


def footprint_message(text: str, args: dict, model_config, device: str) -> str:
    """transformers' "Memory footprint X is more than available memory Y" in words: the plan's
    KV cache (num_blocks x page_size tokens) and the buffers transformers sizes with it (under
    SDPA/eager attention a [max_batch_tokens, cache tokens + max_batch_tokens] mask) do not
    fit this device."""
    import re

    m = re.search(r"footprint (\d+) is more than available memory (\d+)", text)
    if not m:
        return text
    need, avail = (int(x) / 1024**3 for x in m.groups())
    page = int(args.get("page_size") or args.get("block_size") or 0)
    tokens = int(args.get("num_blocks") or 0) * page
    cfg = model_config.get_text_config() if hasattr(model_config, "get_text_config") \
        else model_config
    heads = getattr(cfg, "num_key_value_heads", None) or getattr(cfg, "num_attention_heads", 0)
    head_dim = getattr(cfg, "head_dim", None) or (
        cfg.hidden_size // max(int(getattr(cfg, "num_attention_heads", 1)), 1))
    kv_gib = tokens * 2 * heads * head_dim * 2 * cfg.num_hidden_layers / 1024**3  # K+V, bf16
    return (f"transformers' paged cache for the plan's {tokens:,} KV tokens "
            f"({kv_gib:.1f} GiB of KV at 16 bits) with max_batch_tokens "
            f"{args.get('max_batch_tokens')} needs {need:.1f} GiB with the buffers it sizes "
            f"to them (under SDPA/eager attention a max_batch_tokens x cache-tokens mask), "
            f"more than the {avail:.1f} GiB free on {device}: validate on the device the plan "
            "is for, or a plan with a smaller KV cache (gpu_memory_utilization) or chunk_size")


def _generate(manager, req: dict, res: dict, prompts: list, outs_len: list[int]):
    """(request ids, results, t_start, t_end) of the timed job, after a short warm-up request."""
    try:
        if req.get("warmup", True):
            res["stage"] = "warmup"
            t0 = time.monotonic()
            manager.add_request(prompts[0][:32], request_id="warmup", max_new_tokens=4,
                                eos_token_id=-1)
            _collect(manager, {"warmup"}, timeout_s=float(req.get("timeout_s") or 3600))
            res["warmup_s"] = time.monotonic() - t0
        res["stage"] = "run"
        ids = [f"r{i}" for i in range(len(prompts))]
        t_start = time.monotonic()
        for rid, p, o in zip(ids, prompts, outs_len, strict=True):
            manager.add_request(p, request_id=rid, max_new_tokens=o, eos_token_id=-1)
        got = _collect(manager, set(ids), timeout_s=float(req.get("timeout_s") or 36000))
        t_end = time.monotonic()
    finally:
        manager.stop(block=True, timeout=30)
    return ids, got, t_start, t_end


def run(req: dict, res: dict) -> dict:
    res.update({"ok": False, "stage": "import", "runner": "transformers"})
    t_import = time.monotonic()
    import torch
    import transformers

    res["import_s"] = time.monotonic() - t_import
    res["engine_version"] = f"transformers {transformers.__version__} (continuous batching)"
    res["device"] = device_description()
    cuda = torch.cuda.is_available()
    res["device_kind"] = "gpu" if cuda else "cpu"
    manager = _start(req, res, cuda)

    prompts = make_prompts(req["prompt_tokens"], req.get("prefix_ids"), req.get("prefix_tokens"),
                           int(req.get("vocab_size") or 1000), int(req.get("seed", 0)))
    outs_len = [int(x) for x in req["output_tokens"]]
    ids, got, t_start, t_end = _generate(manager, req, res, prompts, outs_len)
    n_out = [len(got[r].generated_tokens) for r in ids]
    res.update({
        "makespan_s": t_end - t_start, "t_start": t_start, "t_end": t_end,
        "requests": len(ids), "prompt_tokens": int(sum(len(p) for p in prompts)),
        "output_tokens": int(sum(n_out)),
        "throughput_tok_s": sum(n_out) / max(t_end - t_start, 1e-9),
        "mismatched_lengths": sum(1 for g, o in zip(n_out, outs_len, strict=True) if g != o),
        "preemptions": None, "iterations": None,
        "notes": ["transformers' continuous batching exposes no per-step schedule"],
    })
    res["ok"] = True
    res["stage"] = "done"
    return res


def _collect(manager, want: set[str], timeout_s: float) -> dict:
    got: dict = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < len(want):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(want) - len(got)} request(s) unfinished")
        r = manager.get_result(timeout=1)
        if r is None:
            if not manager.is_running():
                raise thread_error(manager)
            continue
        if r.request_id in want and r.is_finished():
            if getattr(r, "error", None):
                raise RuntimeError(f"request {r.request_id} failed: {r.error}")
            got[r.request_id] = r
    return got


def main(argv: list[str]) -> int:
    return serve(run, argv, "_transformers_worker")


if __name__ == "__main__":
    main(sys.argv[1:])
