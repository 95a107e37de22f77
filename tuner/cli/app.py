"""The `tuner` command line (typer). Every user error is one line on stderr and exit code 2."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tuner.core.units import fmt_duration as fmt_s  # noqa: F401 - the CLI's name for it

app = typer.Typer(
    help="Pick the GPU type and serving settings that finish an offline LLM batch job fastest "
    "or cheapest, before renting GPUs.\n\nExample:\n\n  tuner search --workload "
    "examples/arxiv.jsonl --model llama-3-8b --gpus A10,A40",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
workload_app = typer.Typer(help="Inspect workload files.", no_args_is_help=True)
app.add_typer(workload_app, name="workload")

# Piped output gets a fixed, wide layout so tables stay readable in logs and CI.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


def tool_version() -> str:
    try:
        return version("tuner")
    except PackageNotFoundError:
        return "0+unknown"


# ---- shared option types --------------------------------------------------------------------
WorkloadOpt = Annotated[Path, typer.Option("--workload", "-w", help="JSONL (OpenAI batch, "
                        "{prompt,max_tokens} or {prompt_tokens,output_tokens}) or CSV trace.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name (`tuner models`) or "
                     "path to a Hugging Face config.json.")]
PriceOpt = Annotated[list[str] | None, typer.Option("--price", help="Override a GPU's $/h, "
                     "e.g. --price A10=0.75 (repeatable).")]
GpuFileOpt = Annotated[Path | None, typer.Option("--gpu-file", help="YAML with more GPUs or "
                       "overrides (same fields as `tuner gpus --json`).")]
SkipOpt = Annotated[bool, typer.Option("--skip-invalid", help="Skip malformed workload lines "
                    "(counted) instead of stopping at the first.")]
DistOpt = Annotated[str | None, typer.Option("--output-dist", help="Output lengths for requests "
                    "without max_tokens: fixed:256, uniform:64:512, normal:MEAN:SD, lognormal:MEDIAN:SIGMA, "
                    "trace:FILE.csv.")]
EngineVersionOpt = Annotated[str | None, typer.Option(
    "--engine-version", help="vLLM version to price kernels for (the closest measured kernel-table "
    "version, e.g. 0.19.0; default the newest).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
# a stored study (`tuner export`, `report`, `results`, `validate`)
StoredStudyOpt = Annotated[str | None, typer.Option("--study", help="Study name (default: the "
                           "only study in the storage).")]
StorageOpt = Annotated[str | None, typer.Option("--storage", help="Optuna storage URL of the "
                       "study (default: the journal OUT/study.journal, or the OUT/study.db of "
                       "an earlier version).")]
StoredWorkloadOpt = Annotated[Path | None, typer.Option("--workload", help="Read the workload "
                              "from this file (it is no longer where the search read it).")]
StoredProfileOpt = Annotated[Path | None, typer.Option("--profile", help="A copy of the "
                             "profile/fit folder the search used (default: the path stored in "
                             "the study).")]


def load_gpu_catalog(gpu_file: Path | None, prices: list[str] | None):
    from tuner.core.catalog import apply_prices, load_gpus, parse_price_overrides

    return apply_prices(load_gpus(gpu_file), parse_price_overrides(prices))


def read_workload(path: Path, model, skip_invalid: bool, output_dist: str | None):
    from tuner.core.workload import load_workload

    w = load_workload(path, model=model, skip_invalid=skip_invalid, output_dist=output_dist)
    if w.skipped:
        err.print(f"[yellow]skipped {w.skipped} invalid line(s) in {escape(str(path))}[/]",
                  soft_wrap=True)
    return w




def fmt_gib(b: float) -> str:
    return f"{b / 1024**3:.1f} GiB"


