"""`tuner simulate`: one serving config on a workload, with its memory plan.

Its ServingConfig options are generated from the config's field metadata (like vLLM's CLI from
``EngineArgs``): the primary flag is vLLM's name where vLLM has one (``--max-num-batched-tokens``),
tuner's older names stay as aliases (``--chunk-size``).
"""

from __future__ import annotations

import csv
import functools
import inspect
import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tuner.cli.app import (
    DisableLogRequestsOpt,
    DistOpt,
    EngineVersionOpt,
    EntryPointOpt,
    GpuFileOpt,
    InterruptionRateOpt,
    JsonOpt,
    MaxModelLenOpt,
    ModelOpt,
    OnTooLongOpt,
    PriceOpt,
    ProfileModeOpt,
    ProviderOpt,
    SchedulerStepsOpt,
    SkipOpt,
    SpotOpt,
    StartupOpt,
    WorkloadOpt,
    app,
    catalog_gpu,
    fmt_gib,
    fmt_s,
    load_gpu_catalog,
    out,
    read_workload,
    spot_rates_for,
)
from tuner.core.config import DEFAULTS, ENGINES, KNOBS, Knob, ServingConfig, prefill_budget_refusal
from tuner.core.engines import WEIGHT_OFFLOAD_SCHEMES, cpu_threads_priced, engine_refusal
from tuner.core.errors import TunerError
from tuner.core.pricing import price_caveat, price_provenance
from tuner.core.sglang import (
    DEFAULT_CONSERVATIVENESS,
    MAX_PREFILL_TOKENS,
    PAGE_SIZE,
    SGLangSettings,
    default_config,
)
from tuner.core.units import fmt_rate, fmt_usd, plural

if TYPE_CHECKING:
    from rich.table import Table

CONFIG_PANEL = "Serving config (vLLM's names; older tuner names still accepted)"
ENGINE_PANEL = "Engine: vLLM (default) or SGLang, and the options only one of them has"


# ---- ServingConfig fields as options ------------------------------------------------------------
def _option_help(knob: Knob, name: str = "") -> str:
    """The field's help, its allowed values and unit, and the engine arguments it becomes."""
    parts = [knob.help]
    rule = knob.rule()
    if knob.choices:
        parts.append("One of " + " | ".join(str(c) for c in knob.choices) + ".")
    elif rule:
        parts.append(f"{knob.unit.capitalize()}, {rule}." if knob.unit else f"{rule}.")
    own = _SGLANG_OWN_OPTION.get(name)  # the CLI takes SGLang's value another way
    engines = [f"{label} {prefix}{arg.name}" for label, prefix, arg in
               (("vLLM", "", knob.vllm), ("SGLang", "--", None if own else knob.sglang))
               if arg is not None]
    if engines:  # no square brackets: rich would read them as markup
        parts.append(f"Engines: {', '.join(engines)}.")
    if own:
        parts.append(own)
    return " ".join(parts)


#: knobs the CLI takes for vLLM only, whose SGLang value it takes another way (simulate's
#: check_sglang_options refuses them with --engine sglang)
_SGLANG_OWN_OPTION = {
    "gpu_memory_utilization": "SGLang's counterpart is an option of its own, "
                              "--mem-fraction-static (simulate --engine sglang refuses this one).",
    "block_size": "SGLang runs its default page for the GPU (simulate --engine sglang refuses "
                  "another value).",
}


#: knobs whose default is vLLM's own for the GPU, entry point and engine version
#: (tuner.core.engine_defaults): the batch limits, and the scheduler (V0 batches differently)
ENGINE_DEFAULTED = ("chunk_size", "max_running", "scheduler")
#: knobs whose default the model sets (tuner.core.engine_defaults.model_defaults): a quantized
#: checkpoint's precision, MLA's block size, sparse MLA's cache on sm_120
MODEL_DEFAULTED = {"weight_bits": " Default: the checkpoint's (its quantization_config; 16 "
                                  "without one).",
                   "block_size": " Default: 64 for an MLA model (vLLM's MLA backends), else 16.",
                   "kv_bits": " Default: 16; 8 for DeepSeek's sparse MLA on an sm_120 GPU "
                              "(RTX PRO 6000), as vLLM's backend there serves it."}
DEFAULTED = (*ENGINE_DEFAULTED, *MODEL_DEFAULTED)  # knobs left to vLLM when not given


def _knob_parameter(name: str, knob: Knob, kind: type) -> inspect.Parameter:
    required = name not in DEFAULTS
    engine = name in DEFAULTED
    option = typer.Option(*(knob.flags or (f"--{name.replace('_', '-')}",)),
                          help=_option_help(knob, name) + (" Default: vLLM's for the GPU, "
                                                     "--entry-point and --engine-version."
                                                     if name in ENGINE_DEFAULTED else
                                                     MODEL_DEFAULTED.get(name, "")),
                          rich_help_panel=None if required else CONFIG_PANEL,
                          show_default=not engine)
    default = inspect.Parameter.empty if required else None if engine else DEFAULTS[name]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                             annotation=Annotated[kind | None if engine else kind, option],
                             default=default)


#: fields a command that simulates both engines declares itself (simulate: in the engine panel,
#: each checked against the other engine's options); the vLLM-only commands (replay) lack them
ENGINE_FIELDS = ("engine", "schedule_policy")


def config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``command`` one CLI option per ServingConfig field in place of its ``knobs``
    parameter; the command receives them as ``knobs``, a dict of field -> value (the signature
    typer reads is built from the field metadata, so a field added there is an option here)."""
    sig = inspect.signature(command, eval_str=True)
    kinds = typing.get_type_hints(ServingConfig)
    generated = [n for n in KNOBS if n not in ENGINE_FIELDS]
    params = []
    for p in sig.parameters.values():
        if p.name == "knobs":
            params += [_knob_parameter(n, KNOBS[n], kinds[n]) for n in generated]
        else:
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(command)
    def with_knobs(**kwargs: Any) -> Any:
        knobs = {name: kwargs.pop(name) for name in generated}
        return command(**kwargs, knobs=knobs)

    with_knobs.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    with_knobs.__annotations__ = {p.name: p.annotation for p in params}
    return with_knobs


def context_tokens(model, max_model_len: int | None) -> int:
    """The engine's --max-model-len: the one given (checked against the model's context, as
    vLLM checks it), else the model's context."""
    if max_model_len is None:
        return model.max_position
    if not 1 <= max_model_len <= model.max_position:
        raise TunerError(f"--max-model-len {max_model_len} must be between 1 and "
                         f"{model.name}'s context of {model.max_position:,} tokens.")
    return max_model_len


def engine_config(knobs: dict[str, Any], gpu, entry_point: str, engine_version: str | None,
                  model, max_model_len: int | None = None,
                  num_scheduler_steps: int | None = None):
    """(ServingConfig, EngineDefaults): the knobs given, the rest (ENGINE_DEFAULTED,
    MODEL_DEFAULTED) vLLM's defaults for the GPU, entry point, engine version and model (and
    --max-model-len and --num-scheduler-steps, which set V0's default token budget)."""
    from tuner.core.arch_support import check_engine_runs
    from tuner.core.engine_defaults import vllm_defaults

    defaults = vllm_defaults(gpu.name, gpu.memory_gib, entry_point, engine_version,
                             context_tokens(model, max_model_len), model, num_scheduler_steps)
    # a release that cannot load the model's architecture is refused (a guessed one warns)
    if note := check_engine_runs(model, engine_version):
        typer.echo(f"warning: {note}", err=True)
    engine = {k: defaults.knobs()[k] for k in DEFAULTED}
    config = ServingConfig(**(knobs | {"gpu": gpu.name} | {
        k: v for k, v in engine.items() if knobs.get(k) is None}))
    if defaults.kv_cache and config.kv_bits > defaults.kv_bits:
        raise TunerError(f"--kv-bits {config.kv_bits}: vLLM does not serve {model.name}'s cache "
                         f"so on {gpu.name} ({defaults.kv_cache}; a bfloat16 request is turned "
                         f"into auto); drop --kv-bits or pass {defaults.kv_bits}.")
    return config, defaults


EngineOpt = Annotated[str, typer.Option(
    "--engine", rich_help_panel=ENGINE_PANEL, help="Engine simulated: vllm (default) | sglang (SGLang's scheduler, radix "
    "cache and memory plan, priced with AIConfigurator's SGLang kernel tables where the GPU has them, else vLLM's, and SGLang's engine profile).")]
#: the SGLang line the simulator reads (tuner.core.sglang names the source files)
SGLANG_RELEASE = "SGLang v0.5 (scheduler, defaults and memory plan read from its source)"
#: knobs whose default is SGLang's own under --engine sglang (gpu_memory_utilization is
#: --mem-fraction-static)
SGLANG_DEFAULTED = ("chunk_size", "max_running", "gpu_memory_utilization")
#: ServingConfig fields that are vLLM's (or tuner's offloading) and mean nothing to SGLang
_VLLM_ONLY_KNOBS = {"scheduler": "--scheduler (a vLLM scheduler preset)",
                    "kv_offload_layers": "--kv-offload-layers",
                    "weight_offload_fraction": "--weight-offload-fraction",
                    "attention_on_cpu": "--attention-on-cpu",
                    "cpu_threads_intra": "--cpu-threads-intra",
                    "cpu_threads_inter": "--cpu-threads-inter"}


def check_sglang_options(knobs: dict[str, Any], *, engine_version: str | None,
                         num_scheduler_steps: int | None, prefix_caching: bool | None) -> None:
    """TunerError (one line) for an option SGLang has no counterpart of."""
    if engine_version is not None or num_scheduler_steps is not None:
        raise TunerError("--engine-version and --num-scheduler-steps are vLLM's; with --engine "
                         "sglang drop them (tuner simulates SGLang v0.5).")
    if prefix_caching is not None:
        raise TunerError("--enable-prefix-caching/--no-enable-prefix-caching is vLLM's; "
                         "SGLang's counterpart is --disable-radix-cache.")
    for name, flag in _VLLM_ONLY_KNOBS.items():
        if name == "scheduler" and knobs.get(name) is not None:
            raise TunerError(f"{flag} is vLLM's; with --engine sglang use --schedule-policy "
                             "fcfs|lpm.")
        if name != "scheduler" and knobs.get(name) != DEFAULTS[name]:
            raise TunerError(f"{flag} is simulated for vLLM only; drop it with --engine sglang.")
    if knobs.get("gpu_memory_utilization") != DEFAULTS["gpu_memory_utilization"]:
        raise TunerError("--gpu-memory-utilization is vLLM's; SGLang's is "
                         "--mem-fraction-static.")
    if knobs.get("block_size") not in (None, PAGE_SIZE):
        raise TunerError(f"--block-size {knobs['block_size']}: tuner simulates SGLang at the "
                         "page size its default attention backend picks on the GPU (64 on "
                         "B200/GB200/B300, else 1); drop --block-size.")


def check_vllm_options(**sglang_only: Any) -> None:
    """TunerError (one line) for an SGLang-only option given without --engine sglang."""
    given = [f"--{k.replace('_', '-')}" for k, v in sglang_only.items()
             if v not in (None, False)]
    if given:
        raise TunerError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} SGLang's: "
                         "add --engine sglang (the default engine is vllm).")


def sglang_config(knobs: dict[str, Any], gpu, model, mem_fraction_static: float | None,
                  schedule_policy: str | None, radix_cache: bool = True):
    """(ServingConfig, SGLangDefaults) for --engine sglang: the knobs given, the rest SGLang's
    defaults for the GPU (tuner.core.sglang.default_config)."""
    given = {k: v for k, v in knobs.items()
             if k not in _VLLM_ONLY_KNOBS and k not in ("gpu_memory_utilization", "block_size")}
    if mem_fraction_static is not None and not 0 < mem_fraction_static <= 1:
        raise TunerError(f"--mem-fraction-static must be in (0, 1], got {mem_fraction_static:g}: "
                         "the share of GPU memory for weights and the KV pool.")
    return default_config(model, gpu, given | {"gpu_memory_utilization": mem_fraction_static,
                                               "schedule_policy": schedule_policy},
                          radix_cache=radix_cache)


def _overhead(cm) -> str | None:
    """The engine-overhead profile pricing `cm` (a stored calibration wraps it as `base`);
    None where the cost source carries its own step overhead (profile, roofline)."""
    engine = getattr(getattr(cm, "base", cm), "engine", None)
    return None if engine is None else engine.summary()


def engine_line(defaults, entry_point: str, num_scheduler_steps: int | None,
                disable_log_requests: bool = False, decode_run_steps: int = 1,
                prefix_caching: bool | None = None) -> str:
    """'engine: vLLM 0.6.0: vLLM V0 (...), entry point serve, 10 scheduler steps';
    `decode_run_steps`: the simulation's (SimResult.decode_run_steps); `prefix_caching`: as
    given (None: the release's default, said where it is off)."""
    from tuner.predictors.engine_overhead import PROFILES, logs_requests_by_default

    steps = (f", {plural(num_scheduler_steps, 'scheduler step')}" if num_scheduler_steps else "")
    if num_scheduler_steps is None and defaults.release.multi_step:
        steps = (", --num-scheduler-steps not given: priced as multi-step (10), the V0 host "
                 "cost fitted on public runs (vLLM's own default is 1: pass "
                 "--num-scheduler-steps 1 for single-step)")
    elif num_scheduler_steps is None and defaults.release.generation.multi_step:
        from tuner.core.engines import MULTI_STEP_SINCE, dotted

        steps = f", single-step (multi-step scheduling arrived in vLLM {dotted(MULTI_STEP_SINCE)})"
    if decode_run_steps > 1:
        steps += (f"; simulated in decode runs of {decode_run_steps} steps (a request that "
                  "stops mid-run is computed to the run's end, and waiting requests start "
                  "only then)")
    logs = ""
    if defaults.release.generation.key == "v0" and entry_point == "serve":
        priced = ("priced" if PROFILES["vllm-v0-multistep"].per_logged_request_s else
                  "the V0 fit prices no cost per logged request")
        logs = (", requests not logged (--disable-log-requests)" if disable_log_requests else
                ", every request logged, as this release's API server does by default "
                f"({priced}; --disable-log-requests if the server ran with it)"
                if logs_requests_by_default(defaults.engine_version, entry_point) else "")
    elif disable_log_requests:
        logs = (", --disable-log-requests changes nothing here (the request log is priced only "
                "for a V0 release's API server)")
    cache = ""
    if prefix_caching is None and not defaults.release.generation.prefix_caching:
        cache = (", prefix caching off (this generation's default; --enable-prefix-caching "
                 "turns it on)")
    return (f"engine: {defaults.release.describe()}, entry point {entry_point}{steps}{logs}"
            f"{cache}")


# ---- simulate ---------------------------------------------------------------------------------
def _memory_table(plan, gpu_name: str, title: str, reserve_note: str = "",
                  page_tokens: int | None = None, block_given: int | None = None,
                  engine: str = "vllm") -> Table:
    """The plan per GPU under `engine`; `reserve_note` (vLLM's:
    tuner.core.memory.describe_reserve) under it;
    `page_tokens`: SGLang's KV page (the plan's kv_page_tokens), named with the capacity (its
    ServingConfig holds block_size 1, which is not the page it runs); `block_given`: the
    config's block_size, which vLLM raises for a hybrid (the plan's block_size_tokens)."""
    from rich.table import Table

    from tuner.core.memory import gpu_memory_items

    t = Table(title=title, caption=reserve_note or None, caption_justify="left")
    t.add_column("per GPU")
    t.add_column(gpu_name, justify="right")
    t.add_row("usable (memory x utilisation)", fmt_gib(plan.usable_bytes))
    # the rows the report's memory table shows too
    for key, label, nbytes in gpu_memory_items(plan, engine):
        t.add_row(label, fmt_gib(nbytes) + (f" ({plan.state_slots:,} request states + 1 "
                                              "padding)" if key == "state" else ""))
    state = getattr(plan, "state_blocks_per_request", 0) or 0
    block = getattr(plan, "block_size_tokens", 0) or 0
    raised = (f", block {block:,} tokens: vLLM raised it from {block_given}"
              if block and block_given and block != block_given
              else f", block {block:,} tokens" if block else "")
    t.add_row("KV capacity", f"{plan.kv_capacity_tokens:,} tokens"
              + (f" (page {page_tokens})" if page_tokens else "")
              # a hybrid's pool: its attention tokens before any state block is taken
              + (f" (attention{raised}; + {state} state blocks a request)" if state else ""))
    t.add_row("max concurrent requests (mean length)", _max_concurrent(plan))
    return t


def _max_concurrent(plan) -> str:
    """The KV pool's concurrent requests at the mean length, or, where a hybrid's SGLang Mamba
    state slots allow fewer (SGLang caps --max-running-requests at them:
    kv_cache_configurator.py resolve_max_num_reqs), that cap and what sets it."""
    by_kv = plan.max_concurrent_requests
    cap = getattr(plan, "max_running_by_slots", 0) or 0
    if cap and cap < by_kv:
        return (f"{cap:,}: the Mamba state pool's cap ({plan.state_slots:,} states); the KV "
                f"pool alone {by_kv:.1f}")
    return f"{by_kv:.1f}"


@app.command()
@config_options
def simulate(
    workload: WorkloadOpt,
    model: ModelOpt,
    knobs: dict[str, Any],  # one option per ServingConfig field (config_options)
    profile: Annotated[Path | None, typer.Option(help="Profile or fit folder (`tuner profile`, "
                       "`tuner fit`): your own measured cost model instead of the shipped kernel "
                       "tables (or their transfer to an unmeasured GPU, or the roofline).")] = None,
    profile_mode: ProfileModeOpt = "auto",
    engine_version: EngineVersionOpt = None,
    num_scheduler_steps: SchedulerStepsOpt = None,
    disable_log_requests: DisableLogRequestsOpt = False,
    max_model_len: MaxModelLenOpt = None,
    exact: Annotated[bool, typer.Option(help="Step-by-step scheduler (no skip-ahead); same "
                     "result, slower.")] = False,
    timeline: Annotated[Path | None, typer.Option(help="Write a per-iteration timeline CSV.")] = None,
    price: PriceOpt = None, gpu_file: GpuFileOpt = None, provider: ProviderOpt = None,
    spot: SpotOpt = False, interruption_rate: InterruptionRateOpt = None,
    entry_point: EntryPointOpt = "llm",
    on_too_long: OnTooLongOpt = "fail", skip_invalid: SkipOpt = False,
    output_dist: DistOpt = None, as_json: JsonOpt = False, startup_s: StartupOpt = None,
    engine: EngineOpt = "vllm",
    prefix_caching: Annotated[bool | None, typer.Option(
        "--enable-prefix-caching/--no-enable-prefix-caching", rich_help_panel=ENGINE_PANEL, help="vLLM only: automatic "
        "prefix caching (on by default from 0.8, V1; off before, as V0 had it): requests of a "
        "shared-prefix group skip the cached prefix.", show_default=False)] = None,
    disable_radix_cache: Annotated[bool, typer.Option(
        "--disable-radix-cache", rich_help_panel=ENGINE_PANEL, help="SGLang only: no radix cache (every request computes its "
        "whole prompt; lpm and dfs-weight then run as fcfs, as SGLang does).")] = False,
    schedule_policy: Annotated[str | None, typer.Option(
        "--schedule-policy", rich_help_panel=ENGINE_PANEL, help="SGLang only: fcfs (SGLang's default) | lpm "
        "(longest cached prefix first; SGLang falls back to fcfs above 128 waiting "
        "requests) | dfs-weight (the waiting requests of the cached prefix most of them share "
        "first, then the next; uncached ones last).", show_default=False)] = None,
    schedule_conservativeness: Annotated[float | None, typer.Option(
        "--schedule-conservativeness", rich_help_panel=ENGINE_PANEL, help="SGLang only: scales the initial new-token ratio "
        "of its admission estimate (default 1.0: 0.7).", show_default=False)] = None,
    max_prefill_tokens: Annotated[int | None, typer.Option(
        "--max-prefill-tokens", rich_help_panel=ENGINE_PANEL, help="SGLang only: tokens of one prefill batch (default "
        "16,384).", show_default=False)] = None,
    mem_fraction_static: Annotated[float | None, typer.Option(
        "--mem-fraction-static", rich_help_panel=ENGINE_PANEL, help="SGLang only: share of GPU memory for weights + KV pool "
        "(default: SGLang's by GPU memory, chunk size and TP).", show_default=False)] = None,
    ignore_arrivals: Annotated[bool, typer.Option(
        "--ignore-arrivals", help="A workload with arrival times (CSV `arrived_at` or "
        "`arrival_s`) is replayed by default (makespan: first arrival to last token); this "
        "runs it as an offline job instead, every request at t = 0.")] = False,
    max_concurrency: Annotated[int | None, typer.Option(
        "--max-concurrency", min=1, help="vLLM only: a client that keeps at most N requests "
        "in flight (vllm bench serve --max-concurrency): it sends them in order (with arrival "
        "times, each once it has arrived), the next when one finishes, so the engine never "
        "holds more than N (unlike --max-num-seqs, whose engine queues the rest). Over DP "
        "replicas N is split evenly. Default: no cap.", show_default=False)] = None,
) -> None:
    """Simulate one serving config on a workload: makespan, $, memory plan, physical limit.
    Knobs not given take vLLM's defaults for the GPU and --entry-point (--engine sglang:
    SGLang's). The makespan and $ include the engines' start-up (weights, torch.compile, CUDA
    graphs; --startup-s S sets it).

    Example: tuner simulate -w examples/arxiv.jsonl -m llama-3-8b -g A10 --max-num-batched-tokens 2048

    SGLang: tuner simulate -w examples/shared_system_prompt.jsonl -m llama-3-8b -g A10 --engine sglang --schedule-policy lpm
    """
    from tuner.core.catalog import get_model, shape_note
    from tuner.core.workload import apply_on_too_long
    from tuner.predictors.sources import cost_model_for
    from tuner.sim.simulator import simulate as run_sim

    g = catalog_gpu(knobs["gpu"], load_gpu_catalog(gpu_file, price, provider, spot), provider,
                    spot)
    rates = spot_rates_for(provider, gpu_file, spot, interruption_rate)
    if rates is not None:  # no rate for the GPU's spot instances: one line, before simulating
        rates.for_gpu(g)
    spec = get_model(model)
    if engine not in ENGINES:
        raise TunerError(f"--engine {engine!r} is not one of {' | '.join(ENGINES)}.")
    sg_settings = sg_defaults = None
    single_step_note = ""
    if engine == "sglang":
        if disable_log_requests:
            raise TunerError("--disable-log-requests is vLLM's; SGLang logs no requests unless "
                             "started with --log-requests.")
        if entry_point != "llm":  # the option's default: not given
            raise TunerError("--entry-point selects vLLM's defaults (LLM.generate, vllm serve, "
                             "run-batch); SGLang's defaults do not depend on it: drop it with "
                             "--engine sglang.")
        check_sglang_options(knobs, engine_version=engine_version,
                             num_scheduler_steps=num_scheduler_steps,
                             prefix_caching=prefix_caching)
        config, sg_defaults = sglang_config(knobs, g, spec, mem_fraction_static,
                                            schedule_policy, not disable_radix_cache)
        sg_settings = SGLangSettings(
            schedule_policy=config.schedule_policy,
            schedule_conservativeness=(DEFAULT_CONSERVATIVENESS if schedule_conservativeness
                                       is None else schedule_conservativeness),
            max_prefill_tokens=max_prefill_tokens or MAX_PREFILL_TOKENS,
            radix_cache=not disable_radix_cache)
        defaults = None
    else:
        check_vllm_options(schedule_policy=schedule_policy,
                           schedule_conservativeness=schedule_conservativeness,
                           max_prefill_tokens=max_prefill_tokens,
                           mem_fraction_static=mem_fraction_static,
                           disable_radix_cache=disable_radix_cache)
        config, defaults = engine_config(knobs, g, entry_point, engine_version, spec,
                                         max_model_len, num_scheduler_steps)
        rel = defaults.release
        if (num_scheduler_steps is None and rel.multi_step and not rel.multi_step_chunked
                and config.chunked_prefill):
            # tuner prices V0 as multi-step by default (its fitted profile), but this release
            # runs chunked prefill (on by default above a 32K context) only single-step, as
            # vLLM itself does by default (--num-scheduler-steps 1)
            num_scheduler_steps = 1
            single_step_note = (f"--num-scheduler-steps not given: single-step, as vLLM "
                                f"{rel.version} runs chunked prefill (scheduler "
                                f"{config.scheduler}) only so")
    ctx = context_tokens(spec, max_model_len)
    refusal = prefill_budget_refusal(config, ctx)
    if refusal:
        raise TunerError(f"{refusal}; raise --max-num-batched-tokens to {ctx} or pass "
                         f"--max-model-len {config.chunk_size} or less.")
    w = read_workload(workload, spec, skip_invalid, output_dist)
    if ignore_arrivals:
        w = w.offline()
    if max_concurrency is not None and engine == "sglang":
        raise TunerError("--max-concurrency (a client's cap on requests in flight) is "
                         "simulated for vLLM only; drop it with --engine sglang.")
    w, too_long = apply_on_too_long(w, ctx, spec.name, on_too_long,
                                    None if max_model_len is None else "--max-model-len")
    # the cost source (own profile -> measured tables -> transfer -> roofline), resolved once
    cm = cost_model_for(spec, profile, profile_mode, engine_version, entry_point=entry_point,
                        num_scheduler_steps=num_scheduler_steps, engine=engine,
                        log_requests=False if disable_log_requests else None)(g, config)
    made = None  # the outermost folder --timeline creates (removed if the plan cannot run)
    if timeline is not None:  # a bad --timeline fails before the simulation, not after it
        from tuner.core.errors import ensure_writable_dir

        parent = timeline.parent.absolute()
        made = next((p for p in [*reversed(parent.parents), parent] if not p.exists()), None)
        ensure_writable_dir(timeline.parent, "the timeline")
    try:
        res = run_sim(w, spec, g, config, cm, timeline=timeline is not None, exact=exact,
                      startup_s=startup_s, engine_version=engine_version, engine=engine,
                      num_scheduler_steps=num_scheduler_steps, max_concurrency=max_concurrency,
                      sglang=sg_settings, prefix_caching=(
                          not disable_radix_cache if engine == "sglang" else prefix_caching))
    except BaseException:  # a plan that cannot run leaves no empty --timeline folder behind
        if made is not None:
            import shutil

            if not any(f.is_file() for f in made.rglob("*")):
                shutil.rmtree(made, ignore_errors=True)
        raise
    if timeline is not None:
        _write_timeline(timeline, res.timeline)
    summary = res.summary()
    if engine == "sglang":
        summary["sglang_defaults"] = sg_defaults.to_dict()
        summary["engine"] = {"name": "sglang", "release": SGLANG_RELEASE,
                             "settings": sg_settings.to_dict(),
                             "overhead": _overhead(cm)}
        summary["defaulted"] = [k for k in SGLANG_DEFAULTED
                                if (mem_fraction_static if k == "gpu_memory_utilization"
                                    else knobs.get(k)) is None]
    else:
        summary["vllm_defaults"] = defaults.to_dict()
        summary["engine"] = {"name": "vllm", "release": defaults.release.describe(),
                             "generation": defaults.release.generation.key,
                             "entry_point": entry_point,
                             "num_scheduler_steps": num_scheduler_steps,
                             # decode steps per scheduler call, as simulated
                             "decode_run_steps": res.decode_run_steps,
                             "disable_log_requests": disable_log_requests,
                             "max_model_len": ctx,
                             "overhead": _overhead(cm)}
        summary["defaulted"] = [k for k in DEFAULTED if knobs.get(k) is None]
    summary["failed_too_long"] = too_long
    cap = res.memory.kv_capacity_tokens
    summary["start_refused"] = None
    if engine == "vllm" and not spec.num_window_layers and cap < ctx:
        # vLLM checks at start-up that one sequence of max_model_len fits the KV cache
        summary["start_refused"] = (
            f"vLLM would refuse to start: max_model_len {ctx:,} needs {ctx:,} KV tokens for one "
            f"sequence and the cache holds {cap:,}; pass --max-model-len {cap:,} or less (as "
            "tuner's exports set it: the longest request). The figures assume the engine "
            "starts.")
    summary["arrivals"] = None if w.arrival_s is None else {
        "replayed": True, "requests": len(w), "span_s": w.arrival_span_s}
    summary["max_concurrency"] = max_concurrency
    # the $ rest on the GPU's price: say where it is no current list price ("" where it is)
    summary["price_caveat"] = price_caveat(g)
    summary["price_source"] = price_provenance(g, res.rental)  # the $ figure's source and date
    summary["ordering_note"] = ordering_note(config.ordering, w)
    # below 16 bits: the checkpoint (or online quantization) the prediction assumes, the FP8 KV
    # cache's backend, and that output quality is not simulated (the exports' own rules)
    summary["precision_notes"] = []
    if config.weight_bits < 16 or config.kv_bits < 16:  # a 16-bit plan has none (no import)
        from tuner.exports.common import Deployment, precision_notes

        summary["precision_notes"] = precision_notes(
            Deployment(config, spec, g, ctx, engine_version=engine_version), engine)
    if rates is not None:
        from tuner.search.spot import plan_spot

        summary["spot"] = plan_spot(rates, summary, f"{config.num_gpus} x {g.name}")
    if as_json:
        from tuner.core.io import jsonable

        print(json.dumps(jsonable(summary), indent=2))
        return
    from rich.markup import escape
    from rich.table import Table  # here: --json prints no table (rich.table ~20 ms)

    t = Table(title=f"{spec.name} on {g.name} x{config.num_gpus}: {len(w)} requests")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("makespan", f"{fmt_s(res.makespan_s)}  ({res.makespan_s:,.0f} s)")
    t.add_row("start-up (included)", _startup_text(res.startup))
    t.add_row("schedule", f"{fmt_s(res.schedule_s)}  (engines up to the last token)")
    if w.arrival_s is not None:
        t.add_row("arrivals", f"replayed from the file: {len(w):,} requests over "
                  f"{fmt_s(w.arrival_span_s)} (schedule from the first arrival; "
                  "--ignore-arrivals: all at t = 0)")
    if max_concurrency is not None:
        t.add_row("client", f"at most {max_concurrency:,} requests in flight (closed loop: the "
                  "next sent when one finishes" + (f"; split over the {config.dp} DP replicas"
                                                   if config.dp > 1 else "") + ")")
    # the schedule against its own bound: start-up, which has none, would read as nearness
    t.add_row("physical limit T_o", f"{fmt_s(res.schedule_lower_bound_s)} schedule + "
              f"{fmt_s(res.startup_s)} start-up  (schedule at "
              f"{100 * res.schedule_limit_fraction:.0f} % of its limit's speed, start-up left "
              f"out of both; with it in both, "
              f"{100 * res.lower_bound_s / res.makespan_s:.0f} %)")
    t.add_row("job cost", f"{fmt_usd(res.cost_usd)}  at " + (
        f"${res.rental.usd_per_h:,.2f}/h for {res.rental.count} x "
        f"{res.rental.instance}" if res.rental else f"${res.price_usd_per_h:.2f}/GPU-h")
        + (f"  (that price is {summary['price_caveat']}: --price {g.name}=USD sets yours)"
           if summary["price_caveat"] else ""))
    t.add_row("price source", escape(summary["price_source"]))
    if res.machines:
        t.add_row("machines", res.machines["description"])
    # rounded as `tuner search` and the report round the same figures (fmt_usd)
    t.add_row("$ per 1k requests", fmt_usd(res.usd_per_1k_requests))
    t.add_row("$ per 1M tokens (input + output)", fmt_usd(res.usd_per_million_tokens))
    if res.rental:
        t.add_row("billing", res.rental.note)
    sp = summary.get("spot")
    if sp:
        t.add_row("expected makespan on spot", f"{fmt_s(sp['expected_makespan_s'])}  "
                  f"({sp['expected_interruptions']:.3g} interruptions expected)")
        t.add_row("expected job cost on spot", f"{fmt_usd(sp['expected_cost_usd'])}")
    t.add_row("throughput",
              f"{fmt_rate(res.throughput_tok_s)} output tok/s, {fmt_rate(res.qps)} req/s")
    t.add_row("QPS per $/h", f"{res.qps_per_usd_per_h:.3f}")
    if res.vasuki_cost_metric is not None:
        t.add_row("Vasuki cost metric (QPS / $ per FP32 GFLOP/W)", f"{res.vasuki_cost_metric:.4f}")
    t.add_row("iterations", f"{res.iterations:,}")
    t.add_row("preemptions (recompute)", f"{res.preemptions:,}")
    t.add_row("peak / mean KV use", f"{100 * res.peak_kv_fraction:.0f} % / {100 * res.mean_kv_fraction:.0f} %")
    out.print(t)
    from tuner.core.memory import describe_reserve

    out.print(_memory_table(res.memory, g.name, "Memory plan" if engine == "vllm" else
                            "Memory plan (SGLang: memory x --mem-fraction-static; activations "
                            "and CUDA graphs outside it)",
                            describe_reserve(spec, res.config, engine_version)
                            if engine == "vllm" else "",
                            page_tokens=res.memory.kv_page_tokens if engine == "sglang"
                            else None, block_given=config.block_size, engine=engine))
    if summary.get("offload"):
        out.print(_offload_table(summary["offload"], g.name))
    out.print(f"cost model: {res.provenance}", style="dim", markup=False)
    if engine == "sglang":
        st = sg_settings
        out.print(f"engine: {SGLANG_RELEASE}, --schedule-policy {st.schedule_policy}, radix "
                  f"cache {'on' if st.radix_cache else 'off'}, --schedule-conservativeness "
                  f"{st.schedule_conservativeness:g}, --chunked-prefill-size "
                  f"{config.chunk_size:,}, --max-running-requests {config.max_running:,}, "
                  f"--mem-fraction-static {config.gpu_memory_utilization:g}", style="dim",
                  markup=False)
        if summary["defaulted"]:
            out.print(f"not given ({', '.join(summary['defaulted'])}): "
                      f"{sg_defaults.describe(summary['defaulted'])}", style="dim", markup=False)
        if m := res.memory.state_slots:  # a hybrid: tuner.core.sglang._hybrid_state_pool
            sized = ("--mamba-full-memory-ratio 0.9 of the memory after the weights; 5 a "
                     "running request with the radix cache" if st.radix_cache else
                     "--disable-radix-cache: one a running request")
            out.print(f"Mamba state pool: {m:,} request states of "
                      f"{res.memory.state_bytes_per_request / 2**20:,.1f} MiB per GPU "
                      f"({sized}), --max-running-requests at most "
                      f"{res.memory.max_running_by_slots:,}; prefix hits off: SGLang's Mamba "
                      "radix cache matches only at stored states, not modelled", style="dim",
                      markup=False)
    else:
        out.print(engine_line(defaults, entry_point, num_scheduler_steps, disable_log_requests,
                              res.decode_run_steps, prefix_caching), style="dim", markup=False)
        from tuner.sim.simulator import hybrid_prefix_caching_off
        hybrid_cache_off = hybrid_prefix_caching_off(spec, "vllm", engine_version)
        if hybrid_cache_off:
            out.print(f"prefix caching off: vLLM {engine_version} turns it off for a hybrid "
                      f"model such as {spec.name} (\"Hybrid or mamba-based model detected "
                      "... disabling\"; every hybrid up to 0.11.0, the Gated DeltaNet family "
                      "up to 0.12), whatever the flags say; simulated so",
                      style="dim", markup=False)
        if single_step_note:
            out.print(single_step_note, style="dim", markup=False)
        if summary["defaulted"]:
            # the defaults as this run has them: a hybrid's prefix caching and block as the
            # release and model set them, not the generation's
            given = defaults.describe(summary["defaulted"], prefix_caching_off=hybrid_cache_off,
                                      block_runs=res.memory.block_size_tokens)
            out.print(f"not given ({', '.join(summary['defaulted'])}): {given}",
                      style="dim", markup=False)
    if note := shape_note(spec):
        out.print(note, style="yellow", markup=False)
    if summary["ordering_note"]:
        out.print(f"note: {summary['ordering_note']}", style="yellow", markup=False)
    if summary["start_refused"]:
        out.print(f"warning: {summary['start_refused']}", style="yellow", markup=False)
    if engine == "vllm" and (lacks := engine_refusal(config)):
        # layer-wise KV offload and CPU attention too, not only a 4-bit KV cache
        out.print(f"warning: {lacks}: this is a simulator study, not a plan vLLM runs.",
                  style="yellow", markup=False)
    if ((config.cpu_threads_intra or config.cpu_threads_inter)
            and not cpu_threads_priced(config.attention_on_cpu, config.kv_offload_layers)):
        out.print("note: --cpu-threads-intra / --cpu-threads-inter changed nothing: they set "
                  "the threads of CPU decode attention, which needs --attention-on-cpu and "
                  "--kv-offload-layers > 0.", style="yellow", markup=False)
    for note in summary["precision_notes"]:
        out.print(f"note: {note}", style="yellow", markup=False)
    if config.dp > len(w):
        out.print(f"warning: {config.dp - len(w)} of the {config.dp} replicas get no request "
                  f"({len(w)} requests) but are started and billed; a smaller --dp costs less.",
                  style="yellow", markup=False)
    if sp:
        out.print(f"spot: {sp['note']}; {sp['model']}; not modelled: waiting for capacity, "
                  "the interruption notice, correlated interruptions", style="dim",
                  markup=False)
    if too_long and too_long.get("mode") == "cap":
        limit = f"{spec.name}'s context" if max_model_len is None else "--max-model-len"
        out.print(f"{plural(too_long['count'], 'request')} longer than {limit} of "
                  f"{too_long['context_tokens']:,} tokens end their outputs there (as "
                  f"LLM.generate does; {too_long['output_tokens_lost']:,} output tokens fewer): "
                  f"request(s) {_ids(too_long['ids'])}", markup=False)
    elif too_long:
        limit = f"{spec.name}'s context" if max_model_len is None else "--max-model-len"
        out.print(f"{plural(too_long['count'], 'request')} longer than {limit} of "
                  f"{too_long['context_tokens']:,} tokens failed (as vLLM's server once refused them) and are "
                  f"left out: request(s) {_ids(too_long['ids'])}", markup=False)


def ordering_note(ordering: str, workload) -> str | None:
    """Why --ordering does not apply, where it does not: replaying arrival times the engine
    takes requests as they arrive (FCFS), so an ordering of the whole job up front has no
    meaning; None where it applies (an offline job) or is FCFS anyway."""
    if workload.arrival_s is None or ordering == DEFAULTS["ordering"]:
        return None
    return (f"--ordering {ordering} is ignored: the workload's arrival times are replayed and "
            f"the engine takes requests as they arrive ({DEFAULTS['ordering']}); "
            f"--ignore-arrivals runs the job offline, every request at t = 0, in {ordering} "
            "order")


def _startup_text(startup: dict | None) -> str:
    """'41 s (weights 9.2 s: 16.1 GB at 1.75 GB/s from local NVMe, CUDA graphs 19 s,
    torch.compile 26 s)'."""
    return str((startup or {}).get("description") or "none")


def _ids(ids: list[int], limit: int = 20) -> str:
    head = ", ".join(str(i) for i in ids[:limit])
    return head + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _offload_table(o: dict, gpu_name: str) -> Table:
    """Why offloading helps or not: capacity gained vs transfer time against the overlap budget."""
    from rich.table import Table

    if not (o.get("kv_offload_layers") or o.get("weight_offload_fraction")
            or o.get("attention_on_cpu")):
        # nothing offloaded: a quantized KV cache is what brought the figures here, and the
        # transfer rows would all read 0
        t = Table(title=f"KV-cache quantization on {gpu_name} (per GPU)")
        t.add_column("figure")
        t.add_column("value", justify="right")
        t.add_row("KV bits", str(o.get("kv_bits")))
        if isinstance(o.get("kv_quantize_s"), int | float):
            t.add_row("KV (de)quantization (s)", f"{o['kv_quantize_s']:,.1f}")
        return t
    scheme = o.get("weight_offload_scheme")
    t = Table(title=f"Offloading on {gpu_name} (per GPU)", caption_justify="left",
              caption=(f"weights offloaded as {WEIGHT_OFFLOAD_SCHEMES[scheme]}"
                       if scheme in WEIGHT_OFFLOAD_SCHEMES else None))
    t.add_column("figure")
    t.add_column("value", justify="right")
    if isinstance(o.get("weight_offloaded_layers"), int | float):
        t.add_row("whole layers offloaded (vLLM fills the first layers)",
                  f"{o['weight_offloaded_layers']:.2f}")
    mem = o.get("memory", {})
    if mem:
        t.add_row("weights GPU / host", f"{fmt_gib(mem.get('weights_gpu_bytes', 0))} / "
                  f"{fmt_gib(mem.get('weights_host_bytes', 0))}")
        t.add_row("KV GPU / host", f"{fmt_gib(mem.get('kv_gpu_bytes', 0))} / "
                  f"{fmt_gib(mem.get('kv_host_bytes', 0))}")
        t.add_row("host RAM used / limit", f"{fmt_gib(mem.get('host_used_bytes', 0))} / "
                  f"{fmt_gib(mem.get('host_limit_bytes', 0))}")
    for key, label, fmt in (
        ("kv_capacity_gain", "KV capacity gain from offload", "x{:.2f}"),
        ("layer_kv_transfer_ms", "one layer's KV transfer (ms)", "{:.3f}"),
        ("layer_exec_ms", "one layer's compute (ms)", "{:.3f}"),
        ("transfer_to_compute_ratio", "transfer / compute", "{:.2f}"),
        ("kv_transfer_s", "KV transfer total (s)", "{:,.1f}"),
        ("kv_overlap_budget_s", "overlap budget (s)", "{:,.1f}"),
        ("kv_stall_s", "KV stall (s)", "{:,.1f}"),
        ("weight_stall_s", "weight streaming stall (s)", "{:,.1f}"),
        ("cpu_attention_extra_s", "CPU attention extra (s)", "{:,.1f}"),
        ("kv_quantize_s", "KV (de)quantization (s)", "{:,.1f}"),
        ("stall_fraction", "share of time stalled", "{:.1%}"),
    ):
        v = o.get(key)
        if isinstance(v, int | float):
            t.add_row(label, fmt.format(v))
    mo = o.get("max_overlapped_layers")
    if isinstance(mo, dict):
        t.add_row("layers fully overlapped, median step (Alg. 1 / Alg. 2 / exhaustive)",
                  f"{mo.get('alg1_median')} / {mo.get('alg2_median')} / {mo.get('exact_median')}")
    th = o.get("cpu_threads")
    if isinstance(th, dict) and o.get("attention_on_cpu"):
        t.add_row("CPU threads intra / inter", f"{th.get('intra')} / {th.get('inter')} "
                  f"({th.get('chosen_by')}, {th.get('cores')} cores)")
    if o.get("transfer_model"):
        t.add_row("transfer model", str(o["transfer_model"]))
    return t


def _write_timeline(path: Path, tl: dict) -> None:
    from tuner.core.io import write_atomic

    cols = list(tl)
    rows = zip(*(tl[c].tolist() for c in cols), strict=True)
    import io

    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow(cols)
    wr.writerows(rows)
    if path.parent.exists() and not path.parent.is_dir():
        raise TunerError(f"Cannot write timeline {path}: {path.parent} is a file, not a folder.")
    try:
        write_atomic(path, buf.getvalue())
    except OSError as exc:
        raise TunerError(f"Cannot write timeline {path}: {exc.strerror or exc}.") from None


