"""SGLang exports of a plan over several machines: SGLang's --dp-size runs replicas inside one
server on one machine, so each machine gets its own server (its replicas as --dp-size) and its
share of the job, split by tokens as the simulator splits it; the offline script does the split
(MACHINE=K) and the merge (MERGE=1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.exports.formats import parse_export, render_export

GPUS = load_gpus()
LLAMA = get_model("llama-3-8b")


def _plan(tp: int, dp: int) -> ServingConfig:
    return ServingConfig(gpu="A40", engine="sglang", tp=tp, dp=dp, chunk_size=4096,
                         max_running=128, schedule_policy="fcfs", block_size=1)


def _launch(config: ServingConfig) -> str:
    return render_export("sglang", config, LLAMA, GPUS["A40"], max_model_len=4096)


def _option(text: str, name: str) -> str | None:
    words = text.split("sglang.launch_server", 1)[1].split()  # the command, not its notes
    return words[words.index(name) + 1] if name in words else None


def test_one_machine_plan_is_one_server_with_every_replica():
    text = _launch(_plan(2, 4))
    assert _option(text, "--dp-size") == "4"
    assert "ONE machine's server" not in text
    assert parse_export("sglang", text) == _plan(2, 4)


@pytest.mark.parametrize(("tp", "dp", "per", "last"), [(8, 4, None, None), (2, 16, "4", None),
                                                       (2, 10, "4", 2)])
def test_a_plan_over_machines_launches_one_server_per_machine(tp, dp, per, last):
    text = _launch(_plan(tp, dp))
    assert "ONE machine's server" in text
    assert _option(text, "--dp-size") == per  # that machine's replicas (none: one replica)
    assert ("on the last one with --dp-size 2" in text) == (last is not None)
    assert "--nnodes" not in text  # independent servers, not one server over machines
    assert parse_export("sglang", text) == _plan(tp, dp)  # the plan's DP from its config line


def test_pipeline_stages_over_machines_say_how_sglang_joins_them():
    config = ServingConfig(gpu="A40", engine="sglang", tp=8, pp=2, chunk_size=4096,
                           max_running=128, schedule_policy="fcfs", block_size=1)
    text = render_export("sglang", config, get_model("llama-3-70b"), GPUS["A40"],
                         max_model_len=4096)
    assert "--nnodes 2 --node-rank K" in text and "Ray" not in text


_FAKE_SGLANG = '''
import json, os
class Engine:
    def __init__(self, **kwargs):
        with open(os.environ["ENGINE_LOG"], "a") as f:
            f.write(json.dumps(kwargs.get("dp_size")) + "\\n")
    async def async_generate(self, prompt, sampling_params):
        return {"text": "answer to " + prompt}
    def shutdown(self):
        pass
'''
_FAKE_TRANSFORMERS = '''
class AutoTokenizer:
    chat_template = None
    @classmethod
    def from_pretrained(cls, name):
        return cls()
'''


def _run(script: Path, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), "in.jsonl", "out.jsonl"], cwd=cwd,
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60)


def test_offline_script_splits_the_job_over_machines_and_merges_it(tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "sglang.py").write_text(_FAKE_SGLANG)
    (fake / "transformers.py").write_text(_FAKE_TRANSFORMERS)
    lines = [{"custom_id": f"r{i}", "body": {"prompt": "x" * (40 * (i % 7 + 1)),
                                            "max_tokens": 10 + i}} for i in range(30)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    script = tmp_path / "job.py"
    config = _plan(2, 10)  # 3 machines of 8 A40s: 4 + 4 + 2 replicas
    script.write_text(render_export("sglang-offline", config, LLAMA, GPUS["A40"],
                                    max_model_len=4096))
    env = {"PYTHONPATH": str(fake), "ENGINE_LOG": str(tmp_path / "engines.log")}

    refused = _run(script, env, tmp_path)
    assert refused.returncode != 0 and "MACHINE=K" in refused.stderr
    seen: list[str] = []
    for k in range(3):
        done = _run(script, {**env, "MACHINE": str(k)}, tmp_path)
        assert done.returncode == 0, done.stderr
        part = (tmp_path / f"out.machine-{k}.jsonl").read_text().splitlines()
        assert part  # every machine has work
        seen += [json.loads(x)["custom_id"] for x in part]
    assert sorted(seen) == sorted(x["custom_id"] for x in lines)  # each request exactly once
    assert len(set(seen)) == len(seen)
    # each machine's engine ran that machine's replicas
    assert [json.loads(x) for x in (tmp_path / "engines.log").read_text().split()] == [4, 4, 2]

    merged = _run(script, {**env, "MERGE": "1"}, tmp_path)
    assert merged.returncode == 0, merged.stderr
    out = [json.loads(x)["custom_id"] for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert out == [x["custom_id"] for x in lines]  # the input's order

    (tmp_path / "out.machine-1.jsonl").unlink()  # a machine's results missing: no merge
    assert _run(script, {**env, "MERGE": "1"}, tmp_path).returncode != 0
