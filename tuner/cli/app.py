"""The `tuner` command line (typer). Every user error is one line on stderr and exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from tuner.core.engine_defaults import ENTRY_POINT_HELP
from tuner.core.errors import TunerError
from tuner.core.units import fmt_duration as fmt_s  # noqa: F401 - the CLI's name for it
from tuner.core.units import plural


class _RootGroup(TyperGroup):
    """The `tuner` group: its own help (the command list) in click's plain layout, which needs
    no rich import (~0.1 s of typer.rich_utils + markdown); every command's help keeps rich's
    panels."""

    def format_help(self, ctx, formatter) -> None:
        return super(TyperGroup, self).format_help(ctx, formatter)


app = typer.Typer(
    cls=_RootGroup,
    help="Pick the GPU type and serving settings that finish an offline LLM batch job fastest "
    "or cheapest, before renting GPUs.\n\nExample:\n\n\b\n  tuner search --workload "
    "examples/arxiv.jsonl --model llama-3-8b --gpus A10,A40",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
workload_app = typer.Typer(help="Inspect workload files.", no_args_is_help=True)
app.add_typer(workload_app, name="workload")

# Piped output gets a fixed, wide layout so tables stay readable in logs and CI.
# emoji=False: user values print verbatim ("--output-dist lognormal:-1:0" is no "lognormal👎0")
class _LazyConsole:
    """A rich Console made on first use: `tuner --help` prints nothing through one and skips
    importing rich.console (issue #29 item 3)."""

    def __init__(self, **options) -> None:
        self._options = options
        self._console = None

    @property
    def rich(self):
        """The rich Console itself (for rich objects that take one: Progress, Live)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str):
        return getattr(self.rich, name)


out = _LazyConsole(width=None if sys.stdout.isatty() else 160, emoji=False)
err = _LazyConsole(stderr=True, emoji=False)


def tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tuner")
    except PackageNotFoundError:
        return "0+unknown"


# ---- shared option types --------------------------------------------------------------------
WorkloadOpt = Annotated[Path, typer.Option("--workload", "-w", help="JSONL (OpenAI batch, "
                        "{prompt,max_tokens} or {prompt_tokens,output_tokens}) or CSV trace; "
                        "- reads standard input.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name (`tuner models`), a "
                     "Hugging Face model id (its config.json: the local cache, else the Hub), "
                     "or the path to a config.json.")]
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
    "--engine-version", help="vLLM release the job runs on, 0.5.0 or later (default the "
    "newest): its generation sets the batching, the defaults and the host cost per step "
    "(0.5-0.7 V0: prefill-first, synchronous; 0.8-0.13 V1 synchronous; 0.14+ V1 asynchronous "
    "scheduling); kernels are priced from the closest measured kernel-table version. A "
    "release tuner has not seen gets its generation's behaviour, and the output says so; one "
    "older than the first release that runs the model's architecture (DeepSeek-V3: 0.6.6, "
    "Qwen3: 0.8.4) is refused.")]
SchedulerStepsOpt = Annotated[int | None, typer.Option(
    "--num-scheduler-steps", help="V0 multi-step scheduling (vLLM 0.5.5-0.7 "
    "--num-scheduler-steps): decode steps per scheduler call, simulated as the engine runs "
    "them (a request that stops mid-run is computed to the run's end; waiting requests start "
    "only then). Not given: V0 is priced with the host cost fitted on public multi-step (10) "
    "runs, and the output says so (0.5.0-0.5.4 have no multi-step: single-step); 1 (vLLM's "
    "own default) is single-step, whose host cost is an estimate.", show_default=False)]
DisableLogRequestsOpt = Annotated[bool, typer.Option(
    "--disable-log-requests", help="The API server ran with --disable-log-requests. vLLM before "
    "0.10.1 logs every request it receives unless told not to (from 0.10.1 logging is opt-in); "
    "for V0 releases the fit on public runs with and without it sets that log's host time per "
    "request (the shipped fit: none; the engine line says so). Recorded, and passed on to the "
    "`vllm serve` export.")]
MaxModelLenOpt = Annotated[int | None, typer.Option(
    "--max-model-len", help="vLLM's --max-model-len: the longest request (prompt + output "
    "tokens) the engine takes; longer ones fail (where the command has --on-too-long, it "
    "says what to do with them). Default the model's context. "
    "V0 releases take max(it, 2,048) as their default token budget.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
StartupOpt = Annotated[float | None, typer.Option(
    "--startup-s", help="Engine start-up per replica in seconds, instead of tuner's estimate "
    "(weights from local NVMe, torch.compile and CUDA-graph capture of --engine-version: "
    "tuner/core/startup.py); 0 prices the schedule alone. Replicas start at once: the "
    "makespan and every GPU's $ include it.")]
ProviderOpt = Annotated[str | None, typer.Option("--provider", help="Price by this provider's "
                        "instances and billing (aws, gcp, lambda, runpod; `tuner gpus --provider "
                        "NAME`): whole instances, run time rounded up to its billing granularity. "
                        "Default: the catalog's per-GPU prices.")]
SpotOpt = Annotated[bool, typer.Option("--spot", help="With --provider: spot / interruptible "
                    "prices (where the price table has them), and the expected makespan and $ "
                    "under interruptions beside the simulated ones (each loses the in-flight "
                    "requests and restarts the engine on the unfinished ones; "
                    "tuner.search.spot).")]
InterruptionRateOpt = Annotated[float | None, typer.Option(
    "--interruption-rate", help="With --spot: interruptions per machine-hour of every spot "
    "machine (0.05 = one every 20 machine-hours), instead of the provider's published rate; "
    "needed where none is published (GCP). AWS's Spot Instance Advisor buckets are used "
    "otherwise, converted to a rate per hour (tuner/core/data/providers.yaml).")]
EntryPointOpt = Annotated[str, typer.Option("--entry-point", help="llm | serve | run-batch. "
                          f"{ENTRY_POINT_HELP}")]
OnTooLongOpt = Annotated[str, typer.Option("--on-too-long", help="Requests longer than the "
                         "model's context (prompt + output): fail (default: stop before "
                         "simulating, naming them), skip (they are reported as failed, with their "
                         "ids, and left out, as vLLM's OpenAI server refused them before it "
                         "capped them) or cap (their outputs end at the context, as "
                         "LLM.generate and vLLM's current server do).")]
PROFILE_MODE_HELP = ("Where kernel times come from: auto | measured | transfer | roofline "
                     "(roofline: the spec sheet even where kernel tables exist).")
ProfileModeOpt = Annotated[str, typer.Option("--profile-mode", help=PROFILE_MODE_HELP)]
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
StoredProfileModeOpt = Annotated[str | None, typer.Option(
    "--profile-mode", help=f"{PROFILE_MODE_HELP} Default: the study's.")]


def load_gpu_catalog(gpu_file: Path | None, prices: list[str] | None,
                     provider: str | None = None, spot: bool = False):
    """The GPU catalog with --gpu-file, --provider (its instances and billing) and --price."""
    from tuner.core.catalog import apply_prices, load_gpus, parse_price_overrides

    cat = load_gpus(gpu_file)
    overrides = parse_price_overrides(prices)
    if provider is None:
        if spot:
            raise TunerError("--spot needs --provider (spot prices are per provider).")
        return apply_prices(cat, overrides)
    from tuner.core.pricing import apply_provider, get_provider, load_providers

    # --price reprices the provider's instances too (apply_prices)
    return apply_prices(apply_provider(cat, get_provider(provider, load_providers(gpu_file)),
                                       spot=spot), overrides)


def spot_rates_for(provider: str | None, gpu_file: Path | None, spot: bool,
                   interruption_rate: float | None):
    """The interruption rates of --spot machines (tuner.search.spot.SpotRates; None without
    --spot); one TunerError for --interruption-rate without --spot or a bad rate."""
    if not spot and interruption_rate is None:
        return None  # no spot plan: tuner.search (Optuna, ~0.15 s) stays unimported
    from tuner.search.spot import spot_rates

    if not spot or provider is None:
        return spot_rates(None, spot, interruption_rate)
    from tuner.core.pricing import get_provider, load_providers

    return spot_rates(get_provider(provider, load_providers(gpu_file)), spot, interruption_rate)


def catalog_gpu(name: str, cat: dict, provider: str | None, spot: bool = False):
    """A GPU of the catalog; with --provider, one the provider offers (else one error line)."""
    from tuner.core.catalog import get_gpu
    from tuner.core.pricing import instance_hint, require_offered

    try:
        g = get_gpu(name, cat)
    except TunerError:  # an instance shape's name (a3-highgpu-1g): say which GPU to name
        hint = instance_hint(name, provider)
        if hint:
            raise TunerError(hint) from None
        raise
    require_offered(g, provider, spot)
    return g


def workload_ref(path: Path) -> str:
    """What a study stores as its workload: the resolved file, or for a stream (``-``,
    /dev/stdin, a FIFO, ``<(cmd)``) its name (tuner.core.workload.STDIN_NAME for stdin): it
    cannot be read again, so later commands ask for --workload."""
    from tuner.core.workload import is_stream, stream_name

    return stream_name(path) if is_stream(path) else str(path.resolve())


def workload_stem(path: Path) -> str:
    """The workload's name in a default study name ("stdin" for standard input)."""
    from tuner.core.workload import STDIN_NAME, stream_name

    return "stdin" if stream_name(path) == STDIN_NAME else path.stem


def read_workload(path: Path, model, skip_invalid: bool, output_dist: str | None):
    from tuner.core.workload import load_workload

    w = load_workload(path, model=model, skip_invalid=skip_invalid, output_dist=output_dist)
    if w.skipped:
        from rich.markup import escape

        err.print(f"[yellow]skipped {plural(w.skipped, 'invalid line')} in {escape(str(path))}[/]",
                  soft_wrap=True)
    return w




def fmt_gib(b: float) -> str:
    return f"{b / 1024**3:.1f} GiB"




def check_store(store: Path | None) -> None:
    """One clear line, before anything runs, where the calibration store (--store, else
    $TUNER_CALIBRATION_DIR or the default) is not a folder nor can become one: the store is
    otherwise written at the end (a 'File exists' after validate's engine runs)."""
    import os

    from tuner.predictors.calibration import default_store

    path = Path(store) if store is not None else default_store()
    what = ("--store" if store is not None else "$TUNER_CALIBRATION_DIR"
            if os.environ.get("TUNER_CALIBRATION_DIR") else "the calibration store")
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                why = ("is a file, not a folder" if p == path
                       else f"cannot be made: {p} is a file, not a folder")
                raise TunerError(f"{what} {path} {why}; the calibration store is a folder "
                                 "(runs.jsonl and one fit per device and model): give a "
                                 "folder's path.")
            return
