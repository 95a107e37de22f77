"""Bad inputs and changed files after a search: one error line, nothing half-written."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import get_model
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


LLAMA = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}


@pytest.mark.parametrize("config, needle", [
    (LLAMA | {"num_attention_heads": 0}, "num_attention_heads must be a positive integer, got 0"),
    (LLAMA | {"hidden_size": "big"}, "hidden_size must be a positive integer, got 'big'"),
    (LLAMA | {"num_hidden_layers": -4}, "num_hidden_layers must be a positive integer, got -4"),
    (LLAMA | {"num_key_value_heads": 5}, "multiple of num_key_value_heads (5)"),
    ({k: v for k, v in LLAMA.items() if k != "vocab_size"}, "missing 'vocab_size'"),
    ([1, 2], "holds a JSON object, got list"),
])
def test_bad_hf_config_is_one_clear_error(tmp_path: Path, config, needle) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(TunerError) as exc:
        get_model(str(tmp_path))
    assert needle in str(exc.value)


def test_a_good_hf_config_loads(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA | {"head_dim": None}))
    spec = get_model(str(tmp_path))
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim) == (32, 8, 128)


def _main_with(monkeypatch, capsys, exc: BaseException) -> tuple[int, str]:
    import tuner.cli.main as cli_main

    def app(**_kw):
        raise exc

    monkeypatch.setattr(cli_main, "load_commands", lambda names=None: app)
    with pytest.raises(SystemExit) as done:
        cli_main.main()
    return done.value.code, capsys.readouterr().err


def test_a_refusing_machine_is_one_error_line(monkeypatch, capsys) -> None:
    code, err = _main_with(monkeypatch, capsys,
                           OSError(28, "No space left on device", "/full/report.html"))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1
    assert "No space left on device (/full/report.html)" in lines[0]


def test_an_error_that_swallowed_a_ctrl_c_is_the_interrupt(monkeypatch, capsys) -> None:
    """numpy turns a KeyboardInterrupt raised inside a structured-array comparison (Optuna's
    Pareto ranking) into an unchained TypeError: after a Ctrl-C, any failure is the interrupt."""
    import tuner.cli.main as cli_main

    def app(**_kw):
        try:
            cli_main._on_sigint(signal.SIGINT, None)  # what the Ctrl-C ran
        except KeyboardInterrupt:
            pass  # ... swallowed by C code, which then fails its own way
        raise TypeError("Cannot compare structured arrays unless they have a common dtype.")

    monkeypatch.setattr(cli_main, "load_commands", lambda names=None: app)
    with pytest.raises(SystemExit) as done:
        cli_main.main()
    err = capsys.readouterr().err
    assert done.value.code == 130 and "interrupted" in err and "Traceback" not in err
    # without a Ctrl-C the same error is a bug, and stays visible as one
    with pytest.raises(TypeError):
        _main_with(monkeypatch, capsys, TypeError("a bug"))
