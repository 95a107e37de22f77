"""Bad inputs and changed files after a search: one error line, nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.errors import TunerError

runner = CliRunner()


def test_export_refuses_a_workload_file_changed_since_the_search(tmp_path: Path) -> None:
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": 200 + i, "output_tokens": 20}) + "\n"
                          for i in range(20)))
    out = tmp_path / "out"
    r = runner.invoke(app, ["search", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "A10",
                            "--n-trials", "6", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    with wl.open("a") as fh:  # the file grows a request far longer than any searched
        fh.write(json.dumps({"prompt_tokens": 6000, "output_tokens": 20}) + "\n")
    # --gpu-file makes export read the workload file again (instead of the study's own copy)
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(yaml.safe_dump({"A10": {"price_usd_per_h": 1.0}}))
    target = tmp_path / "fastest.yaml"
    r = runner.invoke(app, ["export", "--out", str(out), "--format", "vllm", "--gpu-file",
                            str(gpus), "--output", str(target)])
    # (main() prints a TunerError as one line with exit code 2; the app raises it)
    assert isinstance(r.exception, TunerError), r.output
    assert "has changed since the search" in str(r.exception) and not target.exists()
