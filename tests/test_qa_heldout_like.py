"""QA of `tuner replay` / `tuner simulate` on runs like the held-out ones (vLLM 0.6.x API server
bursts, FP8 / MoE / large checkpoints named by their Hugging Face ids): vLLM 0.6.3+'s token
budget under multi-step chunked prefill, and a bench result's model_id tuner cannot read."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_bad_inputs import main_in_process
from tuner.core.engine_defaults import vllm_defaults


def _per_request(path: Path, n: int = 40) -> Path:
    rows = ["input_len,output_len,start_s,finish_s"]
    rows += [f"{200 + 7 * i},{200 + 3 * i},0.0,{20.0 + i * 0.1:.1f}" for i in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return path


# ---- vLLM 0.6.3+: multi-step chunked prefill budgets the whole context ------------------------
def test_v0_multi_step_chunked_prefill_budget_is_the_context():
    """vLLM 0.6.3-0.7 SchedulerConfig: with chunked prefill on (a context over 32K) and
    --num-scheduler-steps > 1, max_num_batched_tokens defaults to max(max_model_len, 2048)
    ("Multi-step Chunked-Prefill doesn't allow prompt-chunking"); single-step keeps 512."""
    multi = vllm_defaults("H100", 79.18, "serve", "0.6.3", 131072, num_scheduler_steps=10)
    assert multi.max_num_batched_tokens == 131072
    assert multi.scheduler == "sarathi"  # chunked prefill still on
    for steps in (None, 1):
        single = vllm_defaults("H100", 79.18, "serve", "0.6.3", 131072, num_scheduler_steps=steps)
        assert single.max_num_batched_tokens == 512
    # without chunked prefill the budget was the context already, multi-step or not
    short = vllm_defaults("A100-80G", 79.25, "serve", "0.6.3", 2000, num_scheduler_steps=10)
    assert short.max_num_batched_tokens == 2048


def test_replay_of_a_long_context_model_under_multi_step_takes_that_budget(tmp_path, capsys):
    """An FP8 Llama-3.1 (131,072-token context) replayed as a 0.6.3 server with
    --num-scheduler-steps 10 ran with a 131,072-token budget (and its start-up profile at that
    many tokens), not the single-step 512."""
    run = _per_request(tmp_path / "run.csv")
    code = main_in_process(["replay", str(run), "-m", "llama-3.1-8b", "-g", "H100",
                            "--engine-version", "0.6.3", "--num-scheduler-steps", "10",
                            "--json"], tmp_path)
    got = capsys.readouterr()
    assert code == 0, got.err
    doc = json.loads(got.out)
    assert doc["config"]["chunk_size"] == 131072
    assert doc["vllm_defaults"]["max_num_batched_tokens"] == 131072


# ---- a bench result's model_id that names nothing tuner can read ------------------------------
def test_a_model_id_tuner_cannot_read_says_it_came_from_the_file(tmp_path, capsys):
    """vllm bench serve records --model as given: often a folder on the run's machine. Where
    it names nothing here, the one line says the name is the file's model_id and to pass
    --model."""
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"duration": 30.0, "model_id": "/models/Meta-Llama-3.1-8B-FP8",
                             "input_lens": [300, 400], "output_lens": [200, 250]}))
    code = main_in_process(["replay", str(f), "-g", "H100", "--json"], tmp_path)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    line = " ".join(err.split())
    assert "model_id '/models/Meta-Llama-3.1-8B-FP8'" in line and "pass --model" in line, line


def test_v0_chunked_prefill_budget_is_2048_from_0_6_5():
    """vLLM PR #10544 (first in 0.6.5) raised V0's chunked-prefill default from 512 to 2,048."""
    from tuner.core.engine_defaults import vllm_defaults

    def budget(version):
        return vllm_defaults("H100", 79.1, "serve", version, 131072).max_num_batched_tokens

    assert budget("0.6.3") == 512
    assert budget("0.6.4") == 512
    assert budget("0.6.5") == 2048
    assert budget("0.7.3") == 2048
    # without chunked prefill (short context) the whole context, as before
    assert vllm_defaults("H100", 79.1, "serve", "0.7.3", 8192).max_num_batched_tokens == 8192


def test_the_searchs_v0_defaults_take_the_multi_step_budget_too():
    """The search's preset and its defaults-beside-the-winner take --num-scheduler-steps as
    simulate does: a long-context model under V0 multi-step budgets its whole context."""
    from tuner.core.catalog import get_model, load_gpus
    from tuner.search.baseline import engine_presets

    gpus = {"H100": load_gpus()["H100"]}
    model = get_model("llama-3.1-8b")
    meta = {"entry_point": "serve", "engine_version": "0.6.3",
            "model_spec": {"max_position": model.max_position}}
    single = engine_presets(gpus, meta, model)["H100"]
    multi = engine_presets(gpus, meta | {"num_scheduler_steps": 10}, model)["H100"]
    assert single["chunk_size"] == 512
    assert multi["chunk_size"] == 131072
