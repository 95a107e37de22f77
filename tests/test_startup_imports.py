"""Start-up (issue #29 item 3): `tuner simulate` of the README example imports none of the heavy
modules only other commands use (pandas, plotly, scikit-learn, Optuna, SciPy, jinja2, and
tuner.search with the layers above it), and `tuner --help` not even numpy or pydantic. A check
of sys.modules after the command ran in its own process, not a timing (benchmarks/cli_speed.py
times them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "arxiv.jsonl"
SIMULATE = ["simulate", "-w", str(EXAMPLE), "-m", "llama-3-8b", "-g", "A10"]
#: what `tuner simulate` has no use for (search, exports, reports, runners import them)
HEAVY = ("pandas", "plotly", "sklearn", "optuna", "scipy", "jinja2", "tqdm", "tuner.search",
         "tuner.exports", "tuner.reports", "tuner.runners")


def _run(argv: list[str], watch: tuple[str, ...]) -> tuple[subprocess.CompletedProcess, list]:
    """`tuner ARGV` in a fresh interpreter (as the console script runs it), and which of
    `watch` were imported by its end (the probe's last stderr line)."""
    probe = ("import json, sys\n"
             f"sys.argv = ['tuner', *{argv!r}]\n"
             "from tuner.cli.main import main\n"
             "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\nelse:\n"
             "    code = 0\n"
             f"print(json.dumps([m for m in {watch!r} if m in sys.modules]), file=sys.stderr)\n"
             "sys.exit(code)\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr[-2000:]
    return r, json.loads(r.stderr.strip().splitlines()[-1])


def test_simulate_imports_no_heavy_module():
    r, loaded = _run(SIMULATE, HEAVY)
    assert "makespan" in r.stdout and "Memory plan" in r.stdout  # it did simulate and print
    assert loaded == []


def test_simulate_json_imports_no_heavy_module_nor_rich_tables():
    r, loaded = _run([*SIMULATE, "--json"], (*HEAVY, "rich.table", "rich.console"))
    assert json.loads(r.stdout)["makespan_s"] > 0
    assert loaded == []


def test_help_imports_neither_numpy_nor_pydantic():
    r, loaded = _run(["--help"], (*HEAVY, "numpy", "pydantic", "yaml", "tuner.sim", "tuner.predictors",
                            "rich.console"))
    assert "simulate" in r.stdout
    assert loaded == []
