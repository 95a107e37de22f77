"""QA of the search's output (stop 51): the best table's physical-limit column says what it is,
the "vs defaults" cells use the words of the line above them, a knob with one value is not
listed as searched, an engine's defaults outside the space are named, never "trial #-1", and
vLLM's argument check crashing does not stop `tuner export`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.cli.tables import Column, fitted_tables
from tuner.core.errors import TunerError
from tuner.search.constraints import trial_ref, trial_tag
from tuner.search.records import TrialRecord

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "arxiv.jsonl"

# a space without vLLM's defaults (chunk 8192, R 256): they enter the answer as labelled
# candidates numbered -1, -2, ... (tuner.search.records.OUTSIDE_SPACE_ATTR)
TINY = """knobs:
  chunk_size: [512, 1024]
  max_running: [4, 8]
  tp: [1]
  dp: [1]
fixed:
  scheduler: vllm
  weight_bits: 16
  kv_bits: 16
  block_size: 16
"""


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[Path, object]:
    d = tmp_path_factory.mktemp("so51")
    space = d / "tiny.yaml"
    space.write_text(TINY)
    out = d / "out"
    r = runner.invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus", "A10,A40",
                            "--engines", "vllm", "--space", str(space), "--n-trials", "12",
                            "--price", "A40=30", "--out", str(out)],
                      env={"COLUMNS": "200"})  # A40 jobs above $1, A10 ones below
    assert r.exit_code == 0, (r.output, r.exception)
    return out, r


# ---- 2: one rounding per $ column, the terminal's and the report's ---------------------------
def test_usd_column_has_one_number_of_decimals():
    from tuner.reports.views import fmt_usd_column

    assert fmt_usd_column([1.0461, 0.19934]) == ["$1.0461", "$0.1993"]
    assert fmt_usd_column([1.0461, 1234.5]) == ["$1.05", "$1,234.50"]  # fmt_usd's own
    assert fmt_usd_column([None, 0.5]) == ["—", "$0.5000"]


def test_dollar_columns_of_terminal_and_report_read_the_same(searched):
    out, r = searched
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("│")]  # every table's rows
    cells = [c.strip() for ln in rows for c in ln.split("│") if c.strip().startswith("$")]
    assert any(c.startswith("$1") or c[1:2] > "0" for c in cells), cells  # above $1 too
    assert cells and all(re.fullmatch(r"\$[\d,]+\.\d{4}", c) for c in cells), cells
    html = (out / "report.html").read_text()
    best = html[html.index('id="best"'):html.index("</table>", html.index('id="best"'))]
    report_cells = set(re.findall(r'class="num">(\$[\d,.]+)<', best))
    assert report_cells and report_cells <= set(cells), (report_cells, cells)


# ---- 3: the header lists only the knobs the search varies ------------------------------------
def test_header_lists_only_knobs_with_more_than_one_value(searched):
    _, r = searched
    head = " ".join(r.stderr.split("(", 1)[0].split())
    assert head.endswith("A10, A40 x chunk_size, max_running"), head
    assert "engine" not in head and "tp" not in head.split(" x ")[1], head


# ---- 1: the physical-limit column -------------------------------------------------------------
def test_limit_column_is_named_and_explained(searched):
    _, r = searched
    text = " ".join(r.stdout.split())
    assert "% of limit" not in text
    assert "of physical limit" in text
    assert "of physical limit = the physical lower bound on the makespan" in text
    assert text.count("of physical limit =") == 1  # explained once


def test_column_note_is_the_caption_of_the_table_holding_it():
    cols = [Column("a", ["1"]), Column("b", ["2"], level=2, note="b = what b is")]
    group = fitted_tables("T", [Column("k", ["x"])], cols, [["cfg"]], 200)
    console = Console(width=200, record=True)
    console.print(group)
    text = console.export_text()
    assert text.count("b = what b is") == 1
    narrow = fitted_tables("T", [Column("k", ["x"])], cols, [["cfg"] * 12], 30)
    tables = list(narrow.renderables)
    assert len(tables) == 2 and tables[0].caption is None and tables[1].caption == "b = what b is"


# ---- 2: "vs defaults" in the words of the sentence --------------------------------------------
def _record(number: int, **extra) -> TrialRecord:
    return TrialRecord(number=number, config={"gpu": "A40", "tp": 1, "dp": 1}, feasible=True,
                       metrics={"makespan_s": 100.0, "cost_usd": 1.0}, **extra)


def test_gain_cell_uses_the_sentences_words_and_sign():
    from tuner.cli.search import _gain_cell
    from tuner.search.baseline import describe_gain

    base = {"engine": "vllm", "gain": {"speedup": 1.0123, "cost_ratio": 0.99,
                                       "saving_fraction": 0.01, "makespan_ratio": 0.988}}
    r = _record(3, baseline=base)
    assert _gain_cell(r) == "1.01x faster, 1 % cheaper"
    assert describe_gain(base).startswith(_gain_cell(r))  # the line above the table
    dear = {"engine": "vllm", "gain": {"speedup": 0.8, "cost_ratio": 1.2,
                                       "saving_fraction": -0.2, "makespan_ratio": 1.25}}
    assert _gain_cell(_record(4, baseline=dear)) == "1.25x slower, 20 % dearer"
    assert _gain_cell(_record(5, baseline={"engine": "vllm", "gain": None})) == \
        "defaults can't run"
    assert _gain_cell(_record(6)) == "—"


def test_defaults_row_is_not_compared_with_itself(searched):
    _, r = searched
    assert "1.00x, +0% $" not in r.stdout and "so the plan is 1.00x faster" not in r.stdout
    assert "the plan is vLLM's defaults" in " ".join(r.stdout.split())


# ---- 4: an engine's defaults outside the space are named, not numbered ------------------------
def test_trial_tag_and_ref():
    assert trial_tag(_record(12)) == "#12" and trial_ref(_record(12)) == "trial #12"
    d = _record(-1, engine_defaults="vLLM's defaults, which the space searched does not hold")
    assert trial_tag(d) == trial_ref(d) == "vLLM's defaults"
    s = TrialRecord(number=-2, config={"gpu": "A40", "engine": "sglang"}, feasible=True,
                    engine_defaults="SGLang's defaults")
    assert trial_ref(s) == "SGLang's defaults"


def test_report_and_exports_name_the_defaults(searched):
    out, _ = searched
    html = (out / "report.html").read_text()
    assert not re.search(r"#-\d", html), re.search(r".{80}#-\d.{40}", html).group(0)
    assert "vLLM&#39;s defaults" in html or "vLLM's defaults" in html
    for f in ("fastest.vllm.yaml", "cheapest.vllm.yaml", "fastest.run-batch.sh"):
        assert "trial #-" not in (out / f).read_text(), f


def test_export_and_results_messages_name_the_defaults(searched, tmp_path):
    out, _ = searched
    r = runner.invoke(app, ["export", "--out", str(out), "-o", str(tmp_path / "f.yaml")],
                      env={"TUNER_VLLM_PYTHON": "/nonexistent/python"})
    assert r.exit_code == 0, (r.output, r.exception)
    assert "#-" not in r.stderr
    assert "wrote" in r.stderr and "vLLM's defaults (fastest, A40)" in r.stderr, r.stderr
    r = runner.invoke(app, ["results", "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    assert not re.search(r"#-\d", r.output)


# ---- 5: vLLM's argument check crashing ----------------------------------------------------------
def _fake_vllm(root: Path, from_cli_args: str) -> None:
    pkg = root / "vllm"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '9.9.9'\n")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "utils.py").write_text(
        "import argparse\n"
        "class FlexibleArgumentParser(argparse.ArgumentParser):\n"
        "    def parse_args(self, args=None, namespace=None):\n"
        "        return self.parse_known_args(args, namespace)[0]\n")
    (pkg / "engine" / "arg_utils.py").write_text(
        "class EngineArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(p):\n"
        "        return p\n"
        "    @classmethod\n"
        "    def from_cli_args(cls, ns):\n"
        f"        {from_cli_args}\n")


def test_export_is_written_when_the_argument_check_crashes(searched, tmp_path, monkeypatch):
    _fake_vllm(tmp_path, "raise RuntimeError('platform detection blew up')")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("TUNER_VLLM_PYTHON", sys.executable)
    out, _ = searched
    target = tmp_path / "x.yaml"
    r = runner.invoke(app, ["export", "--out", str(out), "-o", str(target)])
    assert r.exit_code == 0, (r.output, r.exception)
    assert target.is_file() and "max-num-seqs" in target.read_text()
    line = next(x for x in r.stderr.splitlines() if "not checked" in x)
    assert "could not run" in line and "RuntimeError: platform detection blew up" in line
    assert "Traceback" not in r.output


def test_export_refused_by_the_argument_check_still_stops(searched, tmp_path, monkeypatch):
    _fake_vllm(tmp_path, "raise ValueError('max_num_seqs must be positive')")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("TUNER_VLLM_PYTHON", sys.executable)
    out, _ = searched
    target = tmp_path / "x.yaml"
    r = runner.invoke(app, ["export", "--out", str(out), "-o", str(target)])
    assert r.exit_code != 0 and not target.exists()
    assert isinstance(r.exception, TunerError), r.exception  # one line, exit 2 (tuner.cli.main)
    assert "vLLM refuses" in str(r.exception)
    assert "max_num_seqs must be positive" in str(r.exception)


# ---- more of the kind: one figure, one rounding; no trial number for the defaults --------------
def test_simulate_rounds_per_request_and_per_token_dollars_as_search_does():
    import json

    from tuner.core.units import fmt_usd

    wl = EXAMPLE
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A40"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    r2 = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A40",
                             "--json"])
    d = json.loads(r2.stdout)
    k = next(k for k in d if "1k" in k and "usd" in k)
    line = next(x for x in r.stdout.splitlines() if "$ per 1k requests" in x)
    assert fmt_usd(d[k]) in line, (line, d[k])
    line = next(x for x in r.stdout.splitlines() if "$ per 1M tokens" in x)
    assert fmt_usd(d["usd_per_million_tokens"]) in line, (line, d["usd_per_million_tokens"])


def test_validation_tables_name_the_defaults():
    from tuner.cli.validation import _trial_cell

    assert _trial_cell(None, {}) == "—" and _trial_cell(7, {}) == "7"
    assert _trial_cell(-1, {"engine": "vllm"}) == "vLLM's defaults"
    assert _trial_cell(-2, {"engine": "sglang"}) == "SGLang's defaults"


def test_a_gain_that_rounds_to_nothing_reads_as_a_tie():
    """'1.00x slower, 0 % dearer than vLLM's defaults' said nothing: a tie reads as one."""
    from tuner.cli.search import _gain_cell
    from tuner.search.baseline import describe_gain

    def base(speedup, saving):
        return {"engine": "sglang", "gain": {"speedup": speedup, "saving_fraction": saving}}
    assert describe_gain(base(0.998, -0.002)) == "as fast and as cheap as SGLang's defaults"
    assert describe_gain(base(1.004, 0.03)) == "as fast, 3 % cheaper than SGLang's defaults"
    assert describe_gain(base(1.2, 0.001)) == "1.20x faster, as cheap as SGLang's defaults"
    assert _gain_cell(_record(7, baseline=base(0.998, -0.002))) == "as fast and as cheap"
    assert _gain_cell(_record(8, baseline=base(1.2, 0.001))) == "1.20x faster, as cheap"
