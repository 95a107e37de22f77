"""Studies remember what their figures depend on: --resume refuses after the GPU specs changed
(trials priced with the old ones would mix into the new front), and export / report / results
refuse after the workload file changed since the search. Each through the real entry point
(tests.test_bad_inputs.main_in_process): exit 2, one line, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.test_hardening2 import _one_error, _run

N = 20


def _workload(path: Path) -> None:
    path.write_text("".join(json.dumps({"prompt_tokens": 200 + 7 * i, "output_tokens": 20 + i})
                            + "\n" for i in range(N)))


def _setup(tmp: Path) -> None:
    _workload(tmp / "w.jsonl")
    (tmp / "space.yaml").write_text(yaml.safe_dump({
        "knobs": {"chunk_size": [512, 2048]},
        "fixed": {"tp": 1, "dp": 1, "max_running": 64, "scheduler": "vllm", "weight_bits": 16,
                  "kv_bits": 16, "gpu_memory_utilization": 0.9, "block_size": 16,
                  "ordering": "fcfs"}}))
    (tmp / "g.yaml").write_text(yaml.safe_dump({"A40": {"hbm_gbps": 696.0}}))


SEARCH = ["search", "--engines", "vllm", "--engines", "vllm", "-w", "w.jsonl", "-m", "llama-3-8b", "--gpus", "A40", "--space",
          "space.yaml", "--gpu-file", "g.yaml", "--n-trials", "4", "--out", "out"]


@pytest.fixture
def searched(tmp_path: Path, capfd) -> Path:
    _setup(tmp_path)
    code, out, err = _run(SEARCH, tmp_path, capfd)
    assert code == 0, err[-3000:]
    return tmp_path


# ---- 2. --resume after the GPU file changed -----------------------------------------------------
@pytest.mark.parametrize("field, old, new", [("hbm_gbps", 696, 900), ("nvlink_gbps", None, 300)])
def test_resume_refuses_other_gpu_specs(searched: Path, capfd, field, old, new) -> None:
    g = yaml.safe_load((searched / "g.yaml").read_text())
    g["A40"][field] = float(new)
    (searched / "g.yaml").write_text(yaml.safe_dump(g))
    before = (searched / "out" / "study.journal").read_bytes()
    line = _one_error(*_run([*SEARCH, "--resume"], searched, capfd))
    assert "other GPU specs for A40" in line and field in line and str(new) in line, line
    assert "without --resume" in line, line
    assert (searched / "out" / "study.journal").read_bytes() == before  # no trial mixed in


def test_resume_with_the_same_gpu_file_continues(searched: Path, capfd) -> None:
    code, out, err = _run([*SEARCH, "--resume", "--n-trials", "5"], searched, capfd)
    assert code == 0, err[-3000:]


def test_resume_after_only_a_price_change_is_refused_as_before(searched: Path, capfd) -> None:
    g = yaml.safe_load((searched / "g.yaml").read_text())
    g["A40"]["price_usd_per_h"] = 9.99
    (searched / "g.yaml").write_text(yaml.safe_dump(g))
    line = _one_error(*_run([*SEARCH, "--resume"], searched, capfd))
    assert "GPU prices" in line and "GPU specs" not in line, line


def test_a_study_without_digests_resumes_as_before(searched: Path, capfd) -> None:
    """An older study (no digests stored): today's checks only, no refusal for specs."""
    from tuner.search.storage import load_study

    st = load_study(None, out_dir=searched / "out")
    meta = dict(st.user_attrs["metadata"])
    meta.pop("digests")
    meta.pop("workload_file_sha256")
    st.set_user_attr("metadata", meta)
    g = yaml.safe_load((searched / "g.yaml").read_text())
    g["A40"]["hbm_gbps"] = 900.0
    (searched / "g.yaml").write_text(yaml.safe_dump(g))
    code, out, err = _run([*SEARCH, "--resume", "--n-trials", "5"], searched, capfd)
    assert code == 0, err[-3000:]


# ---- 3. the workload file changed after the search ----------------------------------------------
READERS = [["export", "--out", "out", "-o", "x.yaml"],
           ["export", "--out", "out", "-f", "run-batch", "-o", "x.sh"],
           ["report", "--out", "out", "--output", "r.html"],
           ["results", "--out", "out"]]
IDS = ["export", "export-run-batch", "report", "results"]


@pytest.mark.parametrize("argv", READERS, ids=IDS)
def test_readers_refuse_a_workload_file_changed_since_the_search(searched: Path, capfd,
                                                                 argv) -> None:
    with (searched / "w.jsonl").open("a") as fh:
        fh.write(json.dumps({"prompt_tokens": 6000, "output_tokens": 20}) + "\n")
    line = _one_error(*_run(argv, searched, capfd))
    assert "w.jsonl has changed since the search" in line, line
    assert f"{N} requests then, {N + 1} now" in line, line
    assert not any((searched / n).exists() for n in ("x.yaml", "x.sh", "r.html"))


@pytest.mark.parametrize("argv", READERS, ids=IDS)
def test_readers_of_an_unchanged_workload_file_succeed(searched: Path, capfd, argv) -> None:
    code, out, err = _run(argv, searched, capfd)
    assert code == 0, err[-3000:]


def test_same_tokens_in_other_bytes_are_no_change(searched: Path, capfd) -> None:
    text = (searched / "w.jsonl").read_text()
    (searched / "w.jsonl").write_text(text.replace('"output_tokens"', ' "output_tokens"'))
    code, out, err = _run(READERS[0], searched, capfd)
    assert code == 0, err[-3000:]


def test_a_gone_workload_file_uses_the_stored_tokens(searched: Path, capfd) -> None:
    (searched / "w.jsonl").unlink()
    code, out, err = _run(READERS[0], searched, capfd)
    assert code == 0, err[-3000:]


def test_an_explicit_other_workload_keeps_its_message(searched: Path, capfd) -> None:
    _workload(searched / "w2.jsonl")
    with (searched / "w2.jsonl").open("a") as fh:
        fh.write(json.dumps({"prompt_tokens": 300, "output_tokens": 20}) + "\n")
    line = _one_error(*_run([*READERS[0], "--workload", "w2.jsonl"], searched, capfd))
    assert "w2.jsonl" in line and "does not match" in line, line


def test_resume_refuses_other_engine_settings(tmp_path: Path, capfd) -> None:
    """Under vLLM 0.6.3 (multi-step with the space's chunked prefill: 0.6.3 on) the engine
    profile follows --num-scheduler-steps and --entry-point: a resume with others would mix
    trials priced under two profiles."""
    _setup(tmp_path)
    v0 = [*SEARCH, "--engine-version", "0.6.3", "--num-scheduler-steps", "10"]
    code, _out, err = _run(v0, tmp_path, capfd)
    assert code == 0, err[-3000:]
    line = _one_error(*_run([*SEARCH, "--engine-version", "0.6.3", "--resume"], tmp_path,
                            capfd))
    assert "another cost model" in line and "num_scheduler_steps" in line, line
    line = _one_error(*_run([*v0, "--entry-point", "serve", "--resume"], tmp_path, capfd))
    assert "--entry-point (llm vs now serve)" in line, line
    code, _out, err = _run([*v0, "--resume", "--n-trials", "5"], tmp_path, capfd)
    assert code == 0, err[-3000:]
