"""Run by tests/test_validation_e2e.py with the Python that has vLLM (not collected by pytest).

vLLM turns asynchronous scheduling off on a CPU, so the CPU loop never exercises the step
recorder over vLLM's AsyncScheduler (its default on a GPU). This script turns it back on (the
CPU platform's config hook is wrapped; the engine core runs in-process so the wrap applies),
runs a small job through runners._vllm_sched.RecordingScheduler and prints one JSON line:
the scheduler class vLLM built and the recorded totals next to what the job implies.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    sys.path.insert(0, str(REPO))
    work = Path(tempfile.mkdtemp(prefix="tuner-async-"))
    steps_file = work / "steps.jsonl"
    os.environ["TUNER_VLLM_STEPS_FILE"] = str(steps_file)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm.platforms import cpu as cpu_platform

    hook = cpu_platform.CpuPlatform.check_and_update_config.__func__

    def with_async(cls, vllm_config):
        hook(cls, vllm_config)
        vllm_config.scheduler_config.async_scheduling = True

    cpu_platform.CpuPlatform.check_and_update_config = classmethod(with_async)
    from vllm import LLM, SamplingParams

    from tuner.core.catalog import get_model
    from tuner.runners.tiny_model import create_random_model, shape_of

    path = create_random_model({"name": "tiny-llama", **shape_of(get_model("tiny-llama"))},
                               work / "model", weights=True)
    llm = LLM(model=str(path), max_num_batched_tokens=128, max_num_seqs=8, block_size=32,
              max_model_len=600, scheduler_cls="tuner.runners._vllm_sched.RecordingScheduler",
              kv_cache_memory_bytes=64 << 20)
    rng = random.Random(0)
    prompts = [rng.randrange(20, 300) for _ in range(16)]
    outputs = [rng.randrange(5, 60) for _ in range(16)]
    outs = llm.generate(
        [{"prompt_token_ids": [rng.randrange(4, 1000) for _ in range(p)]} for p in prompts],
        [SamplingParams(max_tokens=o, ignore_eos=True, temperature=0) for o in outputs],
        use_tqdm=False)
    rows = [json.loads(line) for line in steps_file.read_text().splitlines()]
    steps = [r for r in rows if isinstance(r, list)]
    core = getattr(llm.llm_engine.engine_core, "engine_core", None)
    print(json.dumps({
        "async_scheduling": bool(llm.llm_engine.vllm_config.scheduler_config.async_scheduling),
        "scheduler_mro": [c.__name__ for c in type(getattr(core, "scheduler", None)).__mro__],
        "outputs": sum(len(o.outputs[0].token_ids) for o in outs), "want_outputs": sum(outputs),
        "decode_tokens": sum(r[4] for r in steps), "want_decode_tokens": sum(outputs) - len(outputs),
        "prefill_tokens": sum(r[1] for r in steps), "want_prefill_tokens": sum(prompts),
        "sampled": sum(r[6] for r in steps), "want_sampled": sum(outputs),
        "idle_marks": sum(1 for r in rows if isinstance(r, dict)),
    }), flush=True)
    os._exit(0)  # skip vLLM's slow shutdown; the line is out


if __name__ == "__main__":
    main()
