"""Where a cost model comes from: one ordered registry of cost sources and its resolver.

    COST_SOURCES    profile -> tables -> transfer -> roofline (the order of preference of
                    tuner.core.provenance.PROVENANCE_KINDS)
    cost_model_for(model, profile=None, mode="auto", engine_version=None)
                    -> (gpu, config) -> CostModel      what a command resolves once, passes down
    resolve(model, gpu, config, ...) -> Resolution     the model, the source that priced it and
                                                       why each source before it could not

Each source prices (model, GPU, config) or declines with a reason; the resolver walks the
registry in order and takes the first price. Sources:

  profile   a profile measured on this GPU at this model's shapes (tp 1, 16-bit): the --profile
            folder's (predictors.loader), or without one a profile shipped in predictors/data
  tables    NVIDIA AIConfigurator's measured vLLM kernel tables of this GPU (predictors.aic; the
            table version closest to --engine-version, default the newest) plus the
            engine-overhead profile of --engine-version's generation, --entry-point and
            --num-scheduler-steps (predictors.engine_overhead.profile_for). For SGLang
            (engine="sglang"): its own AIConfigurator tables where the GPU has them, else the
            vLLM ones (said so), and SGLang's engine profile of its release
            (predictors.engine_overhead.sglang_profile_for)
  transfer  measurements carried to this GPU / config: the --profile folder's efficiency curves
            (its own GPU at another tp / precision, or a GPU profile on this GPU's spec sheet),
            or without a folder the kernel tables of the measured GPU of its architecture
  roofline  the spec sheet (never declines)

--profile-mode restricts the registry (SOURCES_BY_MODE). A --profile folder stands in for the
shipped measurements where it applies: with one, `auto` consults its profile -> transfer (a
GPU profile at this model's shapes), and where neither applies sets the folder aside and walks
the registry as without it (the provenance says so), `measured` only the profile
source (the folder's profile at this model's shapes, whatever device it was taken on; an error
where it has none), `transfer` only the transfer source (always transfer, even from a CPU
profile). `roofline` is the spec sheet, folder or not. Without a folder `measured` and
`transfer` have nothing to restrict and consult the whole registry, as `auto` does.

A stored calibration for (GPU, model) wraps the chosen model (predictors.calibration) unless
`calibrated` is False (`tuner validate`, `tuner cost` compare against the uncalibrated model).
The simulator takes the resulting CostModel and neither reads files nor chooses a source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.predictors.loader import (
    NotedCostModel,
    check_profile_mode,
    read_profiles,
    set_aside_note,
)
from tuner.predictors.protocol import CostModel

if TYPE_CHECKING:
    from tuner.core.catalog import GPU, ModelSpec
    from tuner.core.config import ServingConfig

#: (gpu, config) -> CostModel: what a command resolves once and passes down
CostModelFor = Callable[["GPU", "ServingConfig"], CostModel]


@dataclass(frozen=True)
class CostQuery:
    """What a source is asked to price, and the options it is asked under."""

    model: ModelSpec
    gpu: GPU
    config: ServingConfig
    profile: Path | None = None  # --profile folder
    mode: str = "auto"  # --profile-mode
    engine_version: str | None = None  # --engine-version (kernel tables, engine generation)
    entry_point: str = "llm"  # --entry-point (the engine-overhead profile)
    num_scheduler_steps: int | None = None  # --num-scheduler-steps (V0 multi-step)
    engine: str = "vllm"  # the engine simulated (tuner.core.sglang.ENGINES): whose kernels
    # --disable-log-requests given: False; None: the entry point's default (profile_for)
    log_requests: bool | None = None

    def shapes(self) -> str:
        c = self.config
        return f"{self.model.name} on {self.gpu.name} at tp={c.tp}, W{c.weight_bits}/KV{c.kv_bits}"


@dataclass(frozen=True)
class Declined:
    """A source's answer where it cannot price the query: why (kept in Resolution.declined)."""

    reason: str


@dataclass(frozen=True)
class CostSource:
    name: str
    summary: str
    # (query, the (source, reason) of each source that declined before it) -> a model or why not
    price: Callable[[CostQuery, tuple[tuple[str, str], ...]], CostModel | Declined]


# ---- the sources ------------------------------------------------------------------------------
def _profile(q: CostQuery, declined) -> CostModel | Declined:
    from tuner.predictors.loader import read_profiles, shipped_cost_model

    if q.profile is None:
        cm = shipped_cost_model(q.model, q.gpu, q.config)
        return cm if cm is not None else Declined(
            f"no profile shipped in predictors/data was taken on {q.gpu.name} at "
            f"{q.model.name}'s shapes (tp 1, 16-bit)")
    # `measured`: the folder's profile at this model's shapes on any device (never None: an
    # error where it has none); `auto`: only one taken on this GPU, at the config profiled
    cm = read_profiles(q.profile, q.model, q.gpu, q.config,
                       "measured" if q.mode == "measured" else "auto-measured")
    return cm if cm is not None else Declined(
        f"no profile in {q.profile} measures {q.shapes()}")


def _engine_profile(q: CostQuery):
    """The engine-overhead profile of the query's engine and release."""
    from tuner.predictors.engine_overhead import profile_for, sglang_profile_for

    if q.engine == "sglang":
        return sglang_profile_for(q.engine_version, getattr(q.config, "pp", 1))
    return profile_for(q.engine_version, q.entry_point, q.num_scheduler_steps, q.log_requests)


def _table_model(q: CostQuery):
    from tuner.predictors.aic import table_cost_model

    c = q.config
    return table_cost_model(q.model, q.gpu, tp=c.tp, weight_bits=c.weight_bits,
                            kv_bits=c.kv_bits, engine_version=q.engine_version,
                            engine=_engine_profile(q), dp=c.dp,
                            expert_parallel=c.expert_parallel, framework=q.engine)


def _tables(q: CostQuery, declined) -> CostModel | Declined:
    cm = _table_model(q)  # cached: the transfer source asks again at no cost
    if cm is None:
        return Declined(f"no measured kernel tables cover {q.shapes()}")
    if cm.provenance.kind != "tables":
        return Declined(f"{q.gpu.name} has no measured kernel tables of its own")
    return cm


def _transfer(q: CostQuery, declined) -> CostModel | Declined:
    if q.profile is not None:
        from tuner.predictors.loader import no_profile_applies, read_profiles

        # `transfer`: always, from the folder's best source (never None); `auto`: a GPU profile
        cm = read_profiles(q.profile, q.model, q.gpu, q.config,
                           "transfer" if q.mode == "transfer" else "auto-transferred")
        return cm if cm is not None else Declined(no_profile_applies(q.profile, q.gpu))
    cm = _table_model(q)
    if cm is None or cm.provenance.kind != "transferred":
        return Declined(f"no measured GPU's kernel tables transfer to {q.shapes()}")
    return cm


def _roofline(q: CostQuery, declined) -> CostModel:
    c = q.config
    if q.profile is not None:
        from tuner.predictors.loader import roofline

        # priced as predictors.loader has always priced a folder's fallback (tp and bits; its
        # name says why the folder did not apply)
        return roofline(q.model, q.gpu, c, declined[-1][1] if declined else "")
    from tuner.predictors.roofline import RooflineCostModel

    return RooflineCostModel.from_specs(q.gpu, q.model, tp=c.tp, weight_bits=c.weight_bits,
                                        kv_bits=c.kv_bits, engine=getattr(c, "engine", "vllm"),
                                        dp=c.dp, expert_parallel=c.expert_parallel)


#: The cost sources in order of preference; the first that prices a query is used. Adding a
#: source is one function and one entry (and its place in SOURCES_BY_MODE).
COST_SOURCES: tuple[CostSource, ...] = (
    CostSource("profile", "a profile measured on this GPU at this model's shapes", _profile),
    CostSource("tables", "this GPU's measured vLLM (or SGLang) kernel tables (AIConfigurator)",
               _tables),
    CostSource("transfer", "measurements carried to this GPU and config", _transfer),
    CostSource("roofline", "the spec-sheet roofline", _roofline),
)
SOURCE_NAMES = tuple(s.name for s in COST_SOURCES)

#: --profile-mode -> the sources consulted, in registry order: (with a --profile folder,
#: without one). Keys: predictors.loader.PROFILE_MODES.
SOURCES_BY_MODE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # with a folder, then the whole registry without it (resolve) where the folder declines
    "auto": (("profile", "transfer"), SOURCE_NAMES),
    "measured": (("profile",), SOURCE_NAMES),
    "transfer": (("transfer",), SOURCE_NAMES),
    "roofline": (("roofline",), ("roofline",)),
}


def sources_for(mode: str = "auto", *, profile: bool = False) -> tuple[CostSource, ...]:
    """The registry's sources `mode` consults (with or without a --profile folder), in order."""
    check_profile_mode(mode)
    names = SOURCES_BY_MODE[mode][0 if profile else 1]
    return tuple(s for s in COST_SOURCES if s.name in names)


# ---- the resolver -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Resolution:
    cost_model: CostModel  # calibrated where a stored calibration applies
    source: str  # the COST_SOURCES entry that priced it
    declined: tuple[tuple[str, str], ...]  # (source, reason) of each source consulted before

    def trail(self) -> str:
        """'tables: no measured kernel tables cover ...; transfer: ...; priced by roofline'."""
        return "; ".join([f"{s}: {r}" for s, r in self.declined]
                         + [f"priced by {self.source}"])


def resolve(model: ModelSpec, gpu: GPU, config: ServingConfig, *,
            profile: str | Path | None = None, mode: str = "auto",
            engine_version: str | None = None, calibrated: bool = True,
            entry_point: str = "llm", num_scheduler_steps: int | None = None,
            engine: str = "vllm", log_requests: bool | None = None) -> Resolution:
    """Walk the registry (as `mode` restricts it) for (model, gpu, config); TunerError on a bad
    mode or folder, or where the restricted registry cannot price it. `engine`: the engine
    simulated ("vllm" | "sglang"): whose kernel tables and engine profile price it. A hybrid
    (Gated DeltaNet) model resolves its attention and linear parts alike and adds the
    recurrent scan's roofline estimate (predictors.hybrid). A mixture-of-experts plan whose
    dp > 1 is independent engines (vLLM V0) is priced as one of them, at dp 1."""
    from tuner.core.memory import moe_replica_config
    from tuner.core.pricing import plan_machine_gpu

    # with --provider, the machines are the rented instance shape (an expert group over two
    # 4-GPU instances gathers over the network): gpu itself without one
    gpu = plan_machine_gpu(gpu, config.tp, config.dp, config.pp)
    config = moe_replica_config(model, config, engine_version, engine)
    if getattr(model, "is_hybrid", False):
        from tuner.predictors.hybrid import hybrid_cost_model

        kw = dict(profile=profile, mode=mode, engine_version=engine_version,
                  calibrated=calibrated, entry_point=entry_point,
                  num_scheduler_steps=num_scheduler_steps, engine=engine,
                  log_requests=log_requests)
        first = {}

        def part(spec):
            r = resolve(spec, gpu, config, **kw)
            first.setdefault("r", r)
            return r.cost_model

        cm = hybrid_cost_model(model, gpu, config, part)
        return Resolution(cm, first["r"].source, first["r"].declined)
    q = CostQuery(model, gpu, config, None if profile is None else Path(profile), mode,
                  engine_version, entry_point, num_scheduler_steps, engine, log_requests)
    declined: list[tuple[str, str]] = []
    walks = [(q, sources_for(mode, profile=q.profile is not None))]
    if q.profile is not None and mode == "auto":  # a folder that does not apply is set aside
        walks.append((dataclasses.replace(q, profile=None), sources_for(mode)))
    for query, src in ((w, s) for w, srcs in walks for s in srcs):
        out = src.price(query, tuple(declined))
        if isinstance(out, Declined):
            declined.append((src.name, out.reason))
            continue
        if query is not q:
            out = NotedCostModel(out, set_aside_note(q.profile, gpu, model))
        if calibrated:
            # a fit from `tuner calibrate` (measured runs on this device and model) corrects
            # the residual of every later prediction there (TUNER_NO_CALIBRATION=1: off)
            from tuner.predictors.calibration import apply_stored

            out = apply_stored(out, gpu.name, model.name, engine=engine,
                               engine_version=engine_version)
        return Resolution(out, src.name, tuple(declined))
    from tuner.core.errors import TunerError

    raise TunerError(f"No cost source prices {q.shapes()} under --profile-mode {mode}: "
                     + "; ".join(f"{s}: {r}" for s, r in declined) + ".")


def resolve_cost_model(model: ModelSpec, gpu: GPU, config: ServingConfig, *,
                       profile: str | Path | None = None, mode: str = "auto",
                       engine_version: str | None = None, calibrated: bool = True,
                       entry_point: str = "llm",
                       num_scheduler_steps: int | None = None,
                       engine: str = "vllm", log_requests: bool | None = None) -> CostModel:
    """The registry's CostModel for (model, gpu, config): resolve(...).cost_model."""
    return resolve(model, gpu, config, profile=profile, mode=mode,
                   engine_version=engine_version, calibrated=calibrated,
                   entry_point=entry_point, num_scheduler_steps=num_scheduler_steps,
                   engine=engine, log_requests=log_requests).cost_model


def cost_model_for(model: ModelSpec, profile: str | Path | None = None, mode: str = "auto",
                   engine_version: str | None = None, *, calibrated: bool = True,
                   check_gpu: GPU | None = None, entry_point: str = "llm",
                   num_scheduler_steps: int | None = None,
                   engine: str = "vllm", log_requests: bool | None = None) -> CostModelFor:
    """`(gpu, config) -> CostModel` under a command's --profile / --profile-mode /
    --engine-version: what it resolves once and passes down. Each config is priced as its own
    engine simulates it (config.engine: whose kernel tables and engine profile); `engine` is
    the engine --engine-version, --entry-point and --num-scheduler-steps name (a search's
    plans of the other engine take its newest release). A bad mode fails now; with
    `check_gpu` a --profile folder is read now, so a bad one fails before a search starts (one
    TunerError) rather than in its first trial."""
    check_profile_mode(mode)
    # a bad engine or release fails now
    _engine_profile(CostQuery(model, None, None, engine_version=engine_version,
                              entry_point=entry_point, num_scheduler_steps=num_scheduler_steps,
                              engine=engine))

    def for_config(gpu: GPU, config: ServingConfig) -> CostModel:
        named = config.engine == engine
        return resolve_cost_model(model, gpu, config, profile=profile, mode=mode,
                                  engine_version=engine_version if named else None,
                                  calibrated=calibrated, entry_point=entry_point,
                                  num_scheduler_steps=num_scheduler_steps if named else None,
                                  engine=config.engine,
                                  log_requests=log_requests if named else None)

    if check_gpu is not None and profile is not None:
        from tuner.core.config import ServingConfig

        for_config(check_gpu, ServingConfig(gpu=check_gpu.name))
    return for_config


def load_cost_model(profile_or_fit_dir, model, gpu, config, *, mode: str = "auto") -> CostModel:
    """CostModel for `model` on `gpu` under `config` (tp, weight_bits, kv_bits) from the measured
    profiles in `profile_or_fit_dir` (predictors.loader's modes); `auto` where the folder does
    not apply: what auto gives without it, said in the provenance (resolve). Raises TunerError
    on bad input."""
    check_profile_mode(mode)
    if mode == "auto":
        return resolve(model, gpu, config, profile=Path(profile_or_fit_dir), mode=mode,
                       calibrated=False).cost_model
    return read_profiles(profile_or_fit_dir, model, gpu, config, mode)
