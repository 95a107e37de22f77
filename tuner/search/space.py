"""Search spaces: YAML files of ServingConfig knobs (data, not code)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

import yaml

from tuner.core.config import DEFAULTS, SCHEDULE_POLICIES, ServingConfig
from tuner.core.engines import (  # noqa: F401  (re-exported: the search's names for them)
    VLLM_LACKS,
    cpu_threads_priced,
    engine_refusal,
    value_text,
)
from tuner.core.errors import TunerError

_FIELDS = {f.name: f for f in dataclasses.fields(ServingConfig)}


#: `tp: auto` / `dp: auto` in a space: the values follow the GPUs' machine shape, the model's
#: attention heads and --max-gpus (:func:`fit_space`)
AUTO = "auto"
AUTO_KNOBS = ("tp", "dp")
#: GPUs a plan may use when --max-gpus is not given: four 8-GPU machines. A winner at this
#: bound says so and names --max-gpus (:func:`tuner.search.records.bounds_hit`).
DEFAULT_MAX_GPUS = 32
#: orderings that read the requests' output lengths: recommended only when those lengths are
#: known before the run (the input's max_tokens, or --outputs-known)
OUTPUT_ORDERINGS = ("longest-output", "binpack", "blend")

# What vLLM cannot run and whether the CPU threads matter are facts of the engine, kept in
# tuner.core.engines (tuner simulate asks them without loading the search)


@dataclass(frozen=True)
class Exclusion:
    """Values of one searched knob that the plans matching `when` never take, because their
    engine refuses them, while the space's other plans run them (fit_space: a V0 vLLM plan's
    dp > 1 for a mixture-of-experts model, which SGLang's plans keep). Where no plan of the
    space runs them, fit_space leaves them out of the knob instead."""

    knob: str
    values: tuple
    when: tuple[tuple[str, tuple], ...]  # (knob, the values it holds): all must hold
    why: str

    def applies(self, point: dict) -> bool:
        return all(point.get(k) in vs for k, vs in self.when)


@dataclass(frozen=True)
class SearchSpace:
    knobs: dict[str, list]  # field -> candidate values (order kept)
    fixed: dict[str, object]
    source: str
    # values some plans never take (fit_space): the grid skips them, the search's sampler,
    # presets and polish move or skip them (tuner.search.loop), so no trial is spent on a plan
    # its engine refuses. Derived from the job each time the space is fitted, not stored.
    excluded: tuple[Exclusion, ...] = ()

    def grid(self, gpus: list[str]):
        """Every configuration of the space (for --exhaustive and tests)."""
        for params in self.grid_params(gpus):
            yield ServingConfig(**self.fixed, **params)

    def grid_params(self, gpus: list[str]):
        """Every point of the space as the search's parameter dict ({'gpu': ..., knob: value}),
        but those an exclusion leaves out."""
        self.size(len(gpus))  # refuses an unresolved space
        names = list(self.knobs)
        for gpu in gpus:
            for combo in itertools.product(*(self.knobs[k] for k in names)):
                params = {"gpu": gpu, **dict(zip(names, combo, strict=True))}
                if not self.excluded or self.allows(params):
                    yield params

    @property
    def resolved(self) -> bool:
        return not any(v == AUTO for v in self.knobs.values())

    def size(self, n_gpus: int) -> int:
        """The points of the grid (grid_params), exclusions left out."""
        if not self.resolved:
            raise TunerError("The search space has tp/dp 'auto': fit it to the job first "
                             "(tuner.search.loop.search_space).")
        bound = {ex.knob for ex in self.excluded} | {k for ex in self.excluded for k, _ in ex.when}
        bound = [k for k in self.knobs if k in bound]
        n = n_gpus
        for k, v in self.knobs.items():
            if k not in bound:
                n *= len(v)
        if bound:  # only the knobs the exclusions read are enumerated
            n *= sum(self.allows(dict(zip(bound, combo, strict=True)))
                     for combo in itertools.product(*(self.knobs[k] for k in bound)))
        return n

    def allowed(self, name: str, params: dict) -> list:
        """The values of knob `name` a plan with `params` (the other knobs) may take."""
        point = {**self.fixed, **params}
        values = list(self.knobs[name])
        for ex in self.excluded:
            if ex.knob == name and ex.applies(point):
                values = [v for v in values if v not in ex.values]
        return values

    def allows(self, params: dict) -> bool:
        """Whether no exclusion leaves out the point `params`."""
        point = {**self.fixed, **params}
        return not any(ex.knob in point and point[ex.knob] in ex.values and ex.applies(point)
                       for ex in self.excluded)

    def sample_order(self) -> list[str]:
        """The knobs in the order a trial draws them: those the exclusions depend on (the
        engine) first, so each excluded knob is drawn knowing whether it applies."""
        first = {k for ex in self.excluded for k, _ in ex.when}
        return sorted(self.knobs, key=lambda k: k not in first)  # stable: the rest in order

    def conform(self, params: dict, name: str | None = None) -> dict:
        """`params` with each excluded value (only knob `name`'s, where given) moved to the
        nearest value its plan may take (the search's proposals, presets)."""
        out = dict(params)
        for knob in dict.fromkeys(ex.knob for ex in self.excluded):
            if knob not in out or (name is not None and knob != name):
                continue
            allowed = self.allowed(knob, out)
            if allowed and out[knob] not in allowed:
                out[knob] = _nearest_value(allowed, out[knob])
        return out


def _nearest_value(values: list, want):
    """The value of `values` nearest to `want` (numbers; the smaller on a tie), else the first."""
    nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if nums and isinstance(want, int | float) and not isinstance(want, bool):
        return min(nums, key=lambda v: (abs(v - want), v))
    return values[0]


def shipped_space_path(name: str) -> Path:
    """A search space shipped with tuner (the `search_spaces` package data), by file or bare
    name: "default", "offload.yaml"."""
    from importlib.resources import files

    fname = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    # The package is installed as files (not zipped), so its resources are plain paths.
    path = Path(str(files("tuner.search_spaces") / fname))
    if not path.is_file():
        raise TunerError(f"No search space {fname!r} is shipped with tuner (shipped: "
                         f"{', '.join(shipped_space_names())}); pass --space FILE.")
    return path


def shipped_space_names() -> list[str]:
    from importlib.resources import files

    return sorted(p.name for p in files("tuner.search_spaces").iterdir() if p.name.endswith(".yaml"))


def default_space_path() -> Path:
    """search_spaces/default.yaml, installed with the package."""
    return shipped_space_path("default.yaml")


def load_space(path: str | Path | None = None) -> SearchSpace:
    """A search space from a YAML file, or a shipped one by name ("offload"); None: the default.
    Every check runs before the search starts, each failing with one TunerError that names the
    file: the YAML, its sections, the knob names, the knob lists, then each value."""
    path = _space_file(path)
    knobs, fixed = _sections(path, _read_yaml(path))
    _check_names(path, knobs, fixed)
    _check_knob_lists(path, knobs)
    _check_overlap(path, knobs, fixed)
    _check_values(path, knobs, fixed)
    return SearchSpace(knobs=dict(knobs), fixed=dict(fixed), source=str(path))


def _space_file(path: str | Path | None) -> Path:
    """The file of a space: `path`, a shipped space by bare name, or the default."""
    if path is None:
        return default_space_path()
    path = Path(path)
    if path.is_file():
        return path
    if path.parent == Path(".") and path.stem in {Path(n).stem for n in shipped_space_names()}:
        return shipped_space_path(path.name)
    raise TunerError(f"Search space {path} does not exist (shipped spaces, by name: "
                     f"{', '.join(Path(n).stem for n in shipped_space_names())}).")


def _read_yaml(path: Path) -> dict:
    """The file's top-level mapping (not empty, no section but 'knobs:' and 'fixed:')."""
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise TunerError(f"{path}: not valid YAML ({' '.join(str(exc).split())}).") from None
    if raw is None:  # an empty file is a mistake, not "search the GPUs at the defaults"
        raise TunerError(f"{path}: empty; a search space has a 'knobs:' section (knob: list of "
                         "values) and/or a 'fixed:' one (knob: value).")
    if not isinstance(raw, dict):
        raise TunerError(f"{path}: expected a mapping with 'knobs:' and 'fixed:' sections.")
    unknown = set(raw) - {"knobs", "fixed"}
    if unknown:
        raise TunerError(f"{path}: unknown section(s) {', '.join(map(repr, sorted(unknown)))}; "
                         "a search space has only 'knobs:' and 'fixed:'.")
    return raw


def _sections(path: Path, raw: dict) -> tuple[dict, dict]:
    """(knobs, fixed): both mappings (an absent or empty section is {})."""
    knobs = raw.get("knobs") or {}
    fixed = raw.get("fixed") or {}
    for section, value in (("knobs", knobs), ("fixed", fixed)):
        if not isinstance(value, dict):
            raise TunerError(f"{path}: '{section}:' must be a mapping of knob names to "
                             f"{'lists of values' if section == 'knobs' else 'values'}.")
    return knobs, fixed


def _check_names(path: Path, knobs: dict, fixed: dict) -> None:
    """Every name is a ServingConfig field other than the GPU (which --gpus gives)."""
    for name in list(knobs) + list(fixed):
        if name not in _FIELDS or name == "gpu":
            raise TunerError(
                f"{path}: {name!r} is not a knob (choose from "
                f"{', '.join(n for n in _FIELDS if n != 'gpu')}; GPUs come from --gpus).")


def _check_knob_lists(path: Path, knobs: dict) -> None:
    """Each searched knob lists values (or is `auto`, where the knob may be)."""
    for name, values in knobs.items():
        if values == AUTO and name in AUTO_KNOBS:
            continue  # resolved per search by fit_space (machine shape, heads, --max-gpus)
        if not isinstance(values, list) or not values:
            raise TunerError(f"{path}: knob {name!r} needs a non-empty list of values"
                             + (" or 'auto'" if name in AUTO_KNOBS else "") + ".")


def _check_overlap(path: Path, knobs: dict, fixed: dict) -> None:
    overlap = set(knobs) & set(fixed)
    if overlap:
        raise TunerError(f"{path}: {', '.join(sorted(overlap))} both searched and fixed.")


def _check_values(path: Path, knobs: dict, fixed: dict) -> None:
    """Each value through ServingConfig (its type, then its rule, beside the other knobs'
    first values), so a typo fails before the search starts."""
    listed = {k: v for k, v in knobs.items() if v != AUTO}
    probe = {k: v[0] for k, v in listed.items()} | dict(fixed)
    checks = [(n, v) for n, vs in listed.items() for v in vs] + list(fixed.items())
    for name, v in checks:
        if not _type_ok(name, v):
            raise TunerError(f"{path}: {name}={v!r}: expected {_FIELDS[name].type}.")
    for name, v in checks:
        try:
            ServingConfig(gpu="probe", **(probe | {name: v}))
        except (TunerError, TypeError) as exc:
            raise TunerError(f"{path}: {name}={v!r}: {exc}") from None


def _type_ok(name: str, value: object) -> bool:
    """YAML values against the ServingConfig field's type (int, float, str or bool)."""
    kind = _FIELDS[name].type
    kind = getattr(kind, "__name__", kind)  # "int" under postponed annotations, else int
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    if kind == "float":
        return isinstance(value, int | float)
    return isinstance(value, str)


def is_shipped(space: SearchSpace) -> bool:
    """The space is one tuner ships (search_spaces/), not a file of the user's."""
    try:
        return Path(space.source.split(" + ")[0]).resolve().parent == \
            default_space_path().resolve().parent
    except (OSError, TunerError):
        return False


def tp_splits_heads(tp: int, num_heads: int, num_kv_heads: int) -> bool:
    """vLLM's rule: TP divides the attention heads; KV heads fewer than the ranks are
    replicated, so those must divide the degree (tuner.sim.simulator.check_feasible)."""
    return not (num_heads % tp or (num_kv_heads % tp if num_kv_heads >= tp
                                   else tp % num_kv_heads))


def _powers_of_two_to(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out + ([n] if out[-1] != n else [])


def _with_value(values: list, v) -> list:
    """`values` with `v` added where missing (numbers kept in order)."""
    if v in values:
        return values
    if all(isinstance(x, int | float) and not isinstance(x, bool) for x in [*values, v]):
        return sorted([*values, v])
    return [*values, v]


def fit_space(space: SearchSpace, *, model, gpus: dict, gpu_caps: dict[str, int],
              defaults: dict[str, dict], outputs_from_input: bool,
              engine_schedulers: tuple[str, ...] | None = None,
              engines: list[str] | None = None,
              engine_version: str | None = None, workload=None,
              num_scheduler_steps: int | None = None) -> tuple[SearchSpace, list[str]]:
    """The space a search runs, and notes saying what was changed and why:

    * ``tp: auto``: powers of two up to the largest machine among the GPUs (a TP group stays
      inside one machine) and the GPU cap, that split the model's attention heads;
    * ``dp: auto``: powers of two up to the largest GPU cap (--max-gpus; DEFAULT_MAX_GPUS
      without it), and the cap itself;
    * in a shipped space, every GPU's vLLM defaults (`defaults`: GPU -> ServingConfig knobs,
      from tuner.core.engine_defaults) are added to the knobs it searches, so vLLM's own
      settings are always a candidate (a space of the user's own is searched as written; its
      winners are still compared with the defaults, tuner.search.baseline);
    * orderings that read output lengths (OUTPUT_ORDERINGS) are left out unless
      `outputs_from_input`: an exported job cannot sort by lengths nobody knows;
    * a shipped space's fixed scheduler that the engine version does not run becomes its
      default (`engine_schedulers`: the presets its flags select, first its default;
      tuner.core.engines): V0 runs prefill-first batches, not V1's. A searched scheduler list
      already holds the default (the defaults above); presets the engine does not run are
      kept as simulator studies (tuner.search.records.study_only_reason);
    * `engines` (--engines) become the `engine` knob, in place of the space's; with SGLang
      among them a shipped space also searches its schedule policy (fcfs, lpm). The knobs one
      engine lacks are held in its plans (tuner.core.config.ENGINE_HELD);
    * values no engine searched runs (VLLM_LACKS: layer-wise KV offload, CPU attention, a 4-bit
      KV cache for vLLM) are left out, and with them the CPU-thread knobs, which only set CPU
      attention's threads (_fit_engine_knobs); a space of nothing else is refused;
    * under a vLLM V0 `engine_version` (0.5 - 0.7) with vLLM the only engine searched, a
      mixture-of-experts model's expert parallelism, which only V1 runs
      (tuner.core.engines.moe_parallel_refusal), is left out (its dp > 1 stays: independent
      replicas, each holding every expert);
    * values an engine searched refuses for this job (_engine_refusals: V0's MoE expert
      parallelism; SGLang's dp > 1 for a MoE model without its DP attention; with
      `workload`, chunk sizes below its longest request under a scheduler without chunked
      prefill, which vLLM refuses, `num_scheduler_steps` V0's decode runs) are left out
      where no engine searched runs them, else left out of that engine's plans only
      (SearchSpace.excluded): no trial is spent on a plan its engine refuses;
    * a hybrid (Gated DeltaNet) model's plans run on vLLM V1 at pp 1 with every layer's KV
      on the GPU (_fit_hybrid): SGLang, V0 schedulers, pp > 1 and KV offload are left out,
      and a space or --engine-version of nothing else is one TunerError.
    """
    knobs = dict(space.knobs)
    fixed = dict(space.fixed)
    if engines:
        fixed.pop("engine", None)
        knobs["engine"] = list(engines)
        if ("sglang" in engines and is_shipped(space) and "schedule_policy" not in knobs
                and "schedule_policy" not in fixed):
            knobs["schedule_policy"] = list(SCHEDULE_POLICIES)
    caps = {g: int(gpu_caps.get(g, DEFAULT_MAX_GPUS)) for g in gpus}
    if knobs.get("tp") == AUTO:
        knobs["tp"] = _auto_tp(model, gpus, caps)
    if knobs.get("dp") == AUTO:
        knobs["dp"] = _powers_of_two_to(max(caps.values()))
    if is_shipped(space):  # a space of the user's own lists what the user chose
        _offer_defaults(knobs, defaults)
    notes: list[str] = []
    if (engine_schedulers and is_shipped(space)
            and fixed.get("scheduler") not in (None, *engine_schedulers)):
        notes.append(f"scheduler: {engine_schedulers[0]} (the engine version's own batching) "
                     f"in place of the space's {fixed['scheduler']}")
        fixed["scheduler"] = engine_schedulers[0]
    if getattr(model, "is_hybrid", False):
        notes += _fit_hybrid(knobs, fixed, model, engine_version, space.source)
        if "schedule_policy" not in space.knobs and "sglang" not in knobs.get("engine", ()):
            knobs.pop("schedule_policy", None)  # added above for SGLang's plans alone
    notes += _fit_checkpoint(knobs, fixed, model, shipped=is_shipped(space), gpus=gpus)
    notes += _fit_engine_knobs(knobs, fixed, space.source)
    if (is_shipped(space) and "pp" not in knobs and int(fixed.get("pp", 1)) == 1
            and not getattr(model, "is_hybrid", False)):  # a hybrid runs at pp 1 (_fit_hybrid)
        notes += _offer_pipeline(knobs, model, gpus)
    if is_shipped(space) and "sglang" in knobs.get("engine", ()):
        # after the checkpoint and the pipeline: SGLang's defaults depend on the precision and
        # the stages the plans run (its --max-running-requests on the KV pool they leave)
        _offer_sglang_defaults(knobs, fixed, model, gpus)
    if "ordering" in knobs and not outputs_from_input:
        notes += _drop_output_orderings(knobs)
    notes += _fit_v0_moe(knobs, fixed, model, engine_version)
    refusals = _engine_refusals(knobs, fixed, model, engine_version, workload,
                                num_scheduler_steps)
    more, excluded = _fit_engine_refusals(knobs, fixed, refusals)
    return dataclasses.replace(space, knobs=knobs, fixed=fixed, excluded=excluded), notes + more


def fit_exclusions(space: SearchSpace, *, model, engine_version: str | None = None,
                   workload=None, num_scheduler_steps: int | None = None) -> SearchSpace:
    """A space fitted already (a study's stored knobs and fixed values, which do not keep
    SearchSpace.excluded) with the exclusions fit_space derives for the same job: the same
    rules on the same inputs (the model, --engine-version, the workload, --num-scheduler-steps),
    so a worker rebuilt from the study leaves out what the search left out. Its knobs are
    kept as stored (the study's trials were drawn from them)."""
    knobs = {k: list(v) if isinstance(v, list) else v for k, v in space.knobs.items()}
    fixed = dict(space.fixed)
    refusals = _engine_refusals(knobs, fixed, model, engine_version, workload,
                                num_scheduler_steps)
    _notes, excluded = _fit_engine_refusals(knobs, fixed, refusals)
    # a value every engine refuses was left out of the stored knobs when they were fitted;
    # one the stored knobs still hold stays there (its trials say why)
    return dataclasses.replace(space, excluded=excluded)


@dataclass(frozen=True)
class _Refusal:
    """Values of a knob one engine refuses for this job, where `when` holds (knob, values)."""

    engine: str
    knob: str
    values: tuple
    why: str
    when: tuple[tuple[str, tuple], ...] = ()


def _engine_refusals(knobs: dict[str, list], fixed: dict, model, engine_version: str | None,
                     workload, num_scheduler_steps: int | None) -> list[_Refusal]:
    """What each engine refuses of the knob values searched, as the simulator does
    (tuner.sim.simulator.simulate, check_feasible)."""
    from tuner.core.engines import generation_of
    from tuner.core.schedulers import SCHEDULER_PRESETS
    from tuner.core.sglang import dp_attention_supported

    out: list[_Refusal] = []
    dps = knobs.get("dp", [])
    wide = () if dps == AUTO else tuple(d for d in dps if int(d) > 1)
    v0 = generation_of(engine_version).generation.key == "v0"
    # (its dp > 1 V0 runs, as independent replicas: tuner.core.engines.moe_independent_replicas)
    if getattr(model, "is_moe", False) and v0:  # tuner.core.engines.moe_parallel_refusal
        out.append(_Refusal("vllm", "expert_parallel", (True,),
                            f"vLLM {engine_version} (V0) has no --enable-expert-parallel (V1's, "
                            "from 0.8.0)"))
    if getattr(model, "is_moe", False) and not dp_attention_supported(model):
        out.append(_Refusal("sglang", "dp", wide,
                            f"SGLang runs {model.name} at dp > 1 only as independent servers, "
                            "each with every expert (its DP attention, which splits the experts "
                            "as tuner prices dp > 1, is for the DeepSeek and Qwen MoE families)"))
    schedulers = knobs.get("scheduler") or [fixed.get("scheduler", DEFAULTS["scheduler"])]
    unchunked = tuple(s for s in schedulers if not SCHEDULER_PRESETS[s].chunked_prefill)
    if workload is not None and len(workload) and unchunked and "chunk_size" in knobs:
        floor, longest, steps = _unchunked_floor(workload, engine_version, num_scheduler_steps)
        runs = (f"; {floor + 1:,} to the end of V0's last {steps}-step decode run"
                if floor + 1 > longest else "")
        out.append(_Refusal(
            "vllm", "chunk_size", tuple(c for c in knobs["chunk_size"] if int(c) < floor),
            f"without chunked prefill ({', '.join(unchunked)}) vLLM's token budget "
            f"(max_num_batched_tokens) must hold the longest request ({longest:,} tokens{runs}),"
            f" so it refuses a budget below {floor:,}",
            when=(("scheduler", unchunked),)))
    return out


def _unchunked_floor(workload, engine_version: str | None,
                     num_scheduler_steps: int | None) -> tuple[int, int, int]:
    """(the smallest chunk_size a vLLM plan without chunked prefill runs this job at, its
    longest request's tokens, the decode steps per scheduler call): check_feasible's rule,
    and check_decode_runs' on V0's multi-step decode runs."""
    from tuner.sim.scheduler import multi_step_outputs
    from tuner.sim.simulator import decode_run_steps

    steps = decode_run_steps("vllm", engine_version, num_scheduler_steps)
    prompt = workload.prompt_tokens.astype("int64")
    longest = int((prompt + workload.output_tokens).max())
    scheduled = int((prompt + multi_step_outputs(workload.output_tokens, steps)).max())
    return max(longest, scheduled) - 1, longest, steps


def _fit_engine_refusals(knobs: dict[str, list], fixed: dict, refusals: list[_Refusal]
                         ) -> tuple[list[str], tuple[Exclusion, ...]]:
    """Leave out (in place) the values every engine searched refuses; the values only some
    refuse become exclusions of those engines' plans. The notes say what was left out; a knob
    with nothing left for an engine is left as it is (its trials say why)."""
    engines = list(knobs.get("engine") or [fixed.get("engine", DEFAULTS["engine"])])
    live = []
    for r in refusals:
        if r.engine not in engines or r.knob not in knobs or knobs[r.knob] == AUTO:
            continue
        values = tuple(v for v in knobs[r.knob] if v in r.values)
        when = []
        for k, vs in r.when:  # a fixed knob settles its condition; a searched one stays one
            if k in knobs:
                when.append((k, tuple(v for v in knobs[k] if v in vs)))
            elif fixed.get(k, DEFAULTS.get(k)) not in vs:
                values = ()
        if values and all(vs for _, vs in when):
            live.append(dataclasses.replace(r, values=values, when=tuple(when)))
    notes: list[str] = []
    # refused by every engine searched (under no further condition): no plan runs them
    for name in dict.fromkeys(r.knob for r in live):
        by_engine = {e: [r for r in live if r.knob == name and r.engine == e and not r.when]
                     for e in engines}
        if not all(by_engine.values()):
            continue
        common = [v for v in knobs[name]
                  if all(any(v in r.values for r in rs) for rs in by_engine.values())]
        kept = [v for v in knobs[name] if v not in common]
        if not common or not kept:
            continue
        knobs[name] = kept
        whys = "; ".join(dict.fromkeys(r.why for rs in by_engine.values() for r in rs))
        notes.append(f"{name} {', '.join(map(value_text, common))} left out: {whys}")
        live = [dataclasses.replace(r, values=tuple(v for v in r.values if v in kept))
                if r.knob == name else r for r in live]
    # the rest: left out of the refusing engine's plans (under a searched scheduler: of its
    # plans with that scheduler), which the other plans keep
    from tuner.core.config import engine_name

    excluded = []
    for r in live:
        values = tuple(v for v in knobs[r.knob] if v in r.values)
        if not values or len(values) == len(knobs[r.knob]):
            continue  # nothing to leave out, or nothing left: its trials say why
        when = ((("engine", (r.engine,)),) if len(engines) > 1 else ()) + r.when
        excluded.append(Exclusion(r.knob, values, when, r.why))
        whose = f"{engine_name(r.engine)}'s plans"
        if r.when:
            whose += " with " + ", ".join(f"{k} {'/'.join(map(value_text, vs))}"
                                         for k, vs in r.when)
        others = [engine_name(e) + "'s" for e in engines if e != r.engine]
        keep = (f"{' and '.join(others)} keep them" if others
                else "the space's other plans keep them")
        notes.append(f"{r.knob} {', '.join(map(value_text, values))} left out of {whose} "
                     f"({keep}): {r.why}")
    return notes, tuple(excluded)


def _fit_v0_moe(knobs: dict[str, list], fixed: dict, model, engine_version: str | None
                ) -> list[str]:
    """Under a V0 release, a mixture-of-experts model's expert parallelism (V1's alone) left
    out of a vLLM-only space, in place (the simulator refuses it: every such trial would be
    infeasible; a space that also searches SGLang keeps it for SGLang's plans and leaves it
    out of vLLM's: _engine_refusals, _fit_engine_refusals). Its dp > 1 stays: V0 runs it as
    independent replicas, each holding every expert
    (tuner.core.engines.moe_independent_replicas). The notes saying both."""
    from tuner.core.engines import generation_of

    if not getattr(model, "is_moe", False) or generation_of(engine_version).generation.key != "v0":
        return []
    engines = set(knobs.get("engine") or [fixed.get("engine", "vllm")])
    notes = []
    if "vllm" in engines and any(int(d) > 1 for d in knobs.get("dp") or [fixed.get("dp", 1)]):
        notes.append(f"vLLM {engine_version}'s dp > 1 of {model.name}: independent replicas "
                     "(V0 has no data-parallel MoE engine); each holds every expert")
    if engines == {"vllm"} and any(bool(e) for e in knobs.get("expert_parallel") or []):
        knobs["expert_parallel"] = [False]
        notes.append(f"expert parallelism left out: vLLM {engine_version} (V0) has no "
                     "--enable-expert-parallel (V1's, from 0.8.0)")
    return notes


#: scheduler presets of vLLM's V0 engine (its prefill-first batching, Sarathi on its block
#: manager, and their -noevict forms), which no hybrid model runs on
_V0_SCHEDULERS = ("vllm-v0", "sarathi")


def _fit_hybrid(knobs: dict[str, list], fixed: dict, model, engine_version: str | None,
                source: str) -> list[str]:
    """What a hybrid (Gated DeltaNet, Mamba2) model's plans cannot take, left out in place, so no
    trial is spent on a plan the simulator refuses (tuner.sim.simulator._check_hybrid_runs,
    tuner.core.memory.plan_memory): SGLang for a hybrid outside the Gated DeltaNet family
    (whose Mamba state pool alone tuner plans under SGLang), a V0 scheduler, KV offload and
    pipeline stages (the state pages are planned for one stage whose KV stays on the GPU). One
    note per knob; one TunerError where nothing would be left (the space, or --engines, holds
    only such values) or --engine-version predates the model."""
    from tuner.core.engines import parse_version
    from tuner.sim.simulator import HYBRID_SINCE

    name = f"{model.name} is a hybrid ({getattr(model, 'linear_mixer_label', 'Gated DeltaNet')}) model"
    since = ".".join(map(str, HYBRID_SINCE))
    v = parse_version(engine_version)
    if v is not None and v < HYBRID_SINCE:
        raise TunerError(f"--engine-version {engine_version}: {name}, which tuner prices on "
                         f"vLLM {since} (V1 engine) on: give --engine-version {since} or later, "
                         "or leave it out (the newest).")
    not_gdn = bool(getattr(model, "linear_mixer", ""))  # "": Gated DeltaNet
    rules = (
        ("engine", lambda e: not_gdn and e == "sglang",
         "tuner prices it under SGLang for the Gated DeltaNet family (Qwen3-Next, Qwen3.5) "
         "only", "search it under vLLM (--engines vllm)"),
        ("scheduler", lambda n: str(n).removesuffix("-noevict") in _V0_SCHEDULERS,
         f"tuner prices it on vLLM's V1 engine only (from {since}), not V0's batching",
         "use scheduler vllm"),
        ("kv_offload_layers", lambda k: int(k) > 0,
         "tuner plans its recurrent state pages with every layer's KV on the GPU",
         "use kv_offload_layers 0"),
        ("pp", lambda p: int(p) > 1,
         "tuner plans its recurrent state pages for one pipeline stage",
         "use pp 1, with tp / dp for more GPUs"),
    )
    notes: list[str] = []
    for knob, refused, why, instead in rules:
        if knob in fixed and refused(fixed[knob]):
            raise TunerError(f"{source}: {knob} {value_text(fixed[knob])}: {name}, and {why}; "
                             f"{instead}.")
        values = knobs.get(knob)
        if not isinstance(values, list):
            continue
        dropped = [x for x in values if refused(x)]
        kept = [x for x in values if not refused(x)]
        if not dropped:
            continue
        if not kept:
            what = (f"the engines searched ({', '.join(values)})" if knob == "engine" else
                    f"{source}: {knob} {', '.join(map(value_text, values))}")
            raise TunerError(f"{what}: {name}, and {why}; {instead}.")
        knobs[knob] = kept
        if len(kept) == 1 and knob != "engine":  # one value left: held, not searched
            fixed[knob] = knobs.pop(knob)[0]
        notes.append(f"{knob} {', '.join(map(value_text, dropped))} left out: {name}, and "
                     f"{why}")
    return notes


def _offer_pipeline(knobs: dict[str, list], model, gpus: dict) -> list[str]:
    """A model no machine of any GPU holds (the memory plan at the space's fewest weight bits,
    a whole machine as TP): pipeline stages over machines, `pp` searched over the fewest
    stages that hold it and twice that (in place); the note saying so ([] when one machine
    holds it)."""
    from tuner.core.memory import plan_memory

    bits = min(int(b) for b in knobs.get("weight_bits", [model.checkpoint_bits]))
    bits = min(bits, model.checkpoint_bits)
    stages = []
    for g in gpus.values():
        tp = max([t for t in _powers_of_two_to(g.gpus_per_machine)
                  if tp_splits_heads(t, model.num_heads, model.num_kv_heads)] or [1])
        fits = [pp for pp in (1, 2, 4, 8) if plan_memory(
            model, g, ServingConfig(gpu=g.name, tp=tp, pp=pp, weight_bits=bits)).fits]
        if fits and fits[0] == 1:
            return []
        stages.append(fits[0] if fits else 8)
    first = min(stages)
    knobs["pp"] = sorted({first, min(2 * first, 8)})
    return [f"pp: {knobs['pp']}, {model.name} fits no one machine of these GPUs at "
            f"{bits}-bit weights: pipeline stages span machines"]


def _fit_checkpoint(knobs: dict[str, list], fixed: dict, model, *, shipped: bool,
                    gpus: dict | None = None) -> list[str]:
    """What the model's checkpoint sets (tuner.core.engine_defaults.model_defaults), in place:
    a quantized checkpoint is served at its precision or below (vLLM cannot serve an FP8
    checkpoint's weights at 16 bits), in every space; a shipped space's block size is the
    model's (MLA: 64), and its KV cache FP8 where every GPU serves sparse MLA's cache so
    (SM120_GPUS). The notes say what changed."""
    from tuner.core.engine_defaults import model_defaults

    want = model_defaults(model)
    notes: list[str] = []
    bits = want.get("weight_bits")
    if bits is not None:
        why = f"{model.name}'s checkpoint is {model.checkpoint_quantization} ({bits}-bit)"
        if "weight_bits" in knobs:
            kept = [b for b in knobs["weight_bits"] if int(b) <= bits]
            if len(kept) < len(knobs["weight_bits"]):
                knobs["weight_bits"] = _with_value(kept, bits)
                notes.append(f"weight_bits: {knobs['weight_bits']}, {why}")
        elif int(fixed.get("weight_bits", DEFAULTS["weight_bits"])) > bits:
            fixed["weight_bits"] = bits
            notes.append(f"weight_bits: {bits}, {why}")
    block = want.get("block_size")
    if block is not None and shipped and "block_size" not in knobs \
            and fixed.get("block_size", DEFAULTS["block_size"]) != block:
        fixed["block_size"] = block
        # block_size is a vLLM knob (SGLang's page is its own pick): said where vLLM is searched
        if "vllm" in set(knobs.get("engine") or [fixed.get("engine", DEFAULTS["engine"])]):
            notes.append(f"block_size: {block} for {model.name}'s MLA latent cache, a block "
                         "every vLLM MLA backend takes (the exports set it)")
    # the cache precision a GPU's engine imposes (model_defaults with the GPU: sparse MLA on
    # sm_120), which no kv_cache_dtype changes
    cache = {g: model_defaults(model, g) for g in gpus or ()}
    cache = {g: d for g, d in cache.items() if "kv_cache" in d}
    kv = int(fixed.get("kv_bits", DEFAULTS["kv_bits"]))
    if cache and shipped and "kv_bits" not in knobs and kv > min(d["kv_bits"] for d in
                                                                 cache.values()):
        bits = min(d["kv_bits"] for d in cache.values())
        why = (f"vLLM serves {model.name}'s cache on {', '.join(sorted(cache))} at {bits} bits "
               f"({next(iter(cache.values()))['kv_cache']})")
        if len(cache) == len(gpus):
            fixed["kv_bits"] = bits
            notes.append(f"kv_bits: {bits}, {why}")
        else:
            notes.append(f"kv_bits: {kv} as the space says, though {why}: those plans are "
                         "priced with a larger cache than they get")
    return notes


def _fit_engine_knobs(knobs: dict[str, list], fixed: dict, source: str) -> list[str]:
    """Leave out (in place) the knob values no engine searched runs: a vLLM plan with one
    (VLLM_LACKS) would be ranked on a prediction vLLM cannot reproduce and exported as vLLM's
    own settings; SGLang plans hold the offload knobs anyway, and keep a 4-bit KV cache (an
    SGLang dtype). Then the CPU-thread knobs, which change nothing without CPU attention: each
    of their values would be the same plan simulated again. The notes say what was left out;
    a knob with nothing left, or fixed at such a value, is one TunerError."""
    engines = set(knobs.get("engine") or [fixed.get("engine", DEFAULTS["engine"])])
    notes: list[str] = []
    if "vllm" in engines:
        for name, (lacks, why) in VLLM_LACKS.items():
            if name == "kv_bits" and "sglang" in engines:
                continue  # SGLang's 4-bit KV plans stay; vLLM's are infeasible (evaluator)
            flag = "--" + name.replace("_", "-")
            if name in fixed and lacks(fixed[name]):
                raise TunerError(
                    f"{source}: {name} {value_text(fixed[name])}: {why}, so no engine "
                    "searched runs it; "
                    f"study it with `tuner simulate {flag}` or leave it out of the space.")
            if name not in knobs or knobs[name] == AUTO:
                continue
            kept = [v for v in knobs[name] if not lacks(v)]
            if not kept:
                raise TunerError(
                    f"{source}: {name} {', '.join(map(value_text, knobs[name]))}: {why}, so "
                    f"no engine searched runs any of them; study them with `tuner simulate "
                    f"{flag}` or list a value it runs.")
            if len(kept) < len(knobs[name]):
                dropped = [v for v in knobs[name] if lacks(v)]
                knobs[name] = kept
                if len(kept) == 1:  # one value left: held, not searched
                    fixed[name] = knobs.pop(name)[0]
                notes.append(f"{name} {', '.join(map(value_text, dropped))} left out: {why}; "
                             f"`tuner simulate {flag}` studies it")
    threads = [n for n in ("cpu_threads_intra", "cpu_threads_inter") if n in knobs]
    cpu_attention = (True in knobs.get("attention_on_cpu", [])
                     or fixed.get("attention_on_cpu") is True)
    offload = any(int(v) > 0 for v in knobs.get("kv_offload_layers", [])) \
        or int(fixed.get("kv_offload_layers", 0)) > 0
    # SGLang plans hold every offload knob (ENGINE_HELD): only vLLM's could price the threads
    if threads and not ("vllm" in engines and cpu_attention and offload):
        for n in threads:
            del knobs[n]
        notes.append(f"{', '.join(threads)} left out: they set the threads of CPU decode "
                     "attention (attention_on_cpu with KV-offloaded layers), which no plan "
                     "here runs")
    return notes


def _auto_tp(model, gpus: dict, caps: dict[str, int]) -> list[int]:
    """`tp: auto`: powers of two up to the largest machine (capped) that split the heads."""
    top = max(min(gpus[g].gpus_per_machine, caps[g]) for g in gpus)
    return [t for t in _powers_of_two_to(top) if (t & (t - 1)) == 0
            and tp_splits_heads(t, model.num_heads, model.num_kv_heads)] or [1]


def _offer_defaults(knobs: dict[str, list], defaults: dict[str, dict]) -> None:
    """Add every GPU's vLLM defaults to the knobs searched (in place)."""
    for g_defaults in defaults.values():
        for name, v in g_defaults.items():
            if name in knobs:
                knobs[name] = _with_value(list(knobs[name]), v)


def _offer_sglang_defaults(knobs: dict[str, list], fixed: dict, model, gpus: dict) -> None:
    """Add SGLang's defaults on every GPU at every TP, DP, pipeline depth and precision searched
    (its chunked prefill size, --mem-fraction-static and --max-running-requests:
    tuner.core.sglang.default_config) to the knobs searched (in place), so SGLang untuned is a
    candidate too, as vLLM's defaults are (tuner.search.loop.add_default_trials simulates it
    beside each SGLang winner). The precision matters: --max-running-requests follows the KV
    pool the weights leave (DeepSeek-V3's FP8 checkpoint on 8 x H100: 2,048; at 16 bits it
    does not fit)."""
    from tuner.core.sglang import default_config

    def values(name: str) -> list:
        if name in knobs and knobs[name] != AUTO:
            return list(knobs[name])
        return [fixed.get(name, DEFAULTS[name])]

    tps = [int(t) for t in knobs.get("tp", [1]) if isinstance(t, int | float)]
    # DP moves the defaults of a MoE model only (its experts split over TP x DP); a dense
    # model's replicas each run the TP plan's defaults
    dps = values("dp") if getattr(model, "is_moe", False) else [1]
    for g in gpus.values():
        for tp, dp, pp, wbits, kvbits in itertools.product(
                tps, dps, values("pp"), values("weight_bits"), values("kv_bits")):
            if not tp_splits_heads(tp, model.num_heads, model.num_kv_heads) \
                    or tp > g.gpus_per_machine:
                continue
            try:  # dp too: a MoE model's experts split over TP x DP (DP attention)
                config, _ = default_config(model, g, {"tp": tp, "dp": dp, "pp": pp,
                                                      "weight_bits": wbits, "kv_bits": kvbits})
            except TunerError:  # no default on this GPU (its reserve exceeds the memory)
                continue
            for name in ("chunk_size", "max_running", "gpu_memory_utilization"):
                if name in knobs:
                    knobs[name] = _with_value(list(knobs[name]), getattr(config, name))


def _drop_output_orderings(knobs: dict[str, list]) -> list[str]:
    """Leave out the orderings that read output lengths (in place) when others remain; the
    note saying so ([] when nothing was left out)."""
    dropped = [o for o in knobs["ordering"] if o in OUTPUT_ORDERINGS]
    kept = [o for o in knobs["ordering"] if o not in OUTPUT_ORDERINGS]
    if not (dropped and kept):
        return []
    knobs["ordering"] = kept
    return [f"orderings {', '.join(dropped)} left out: they sort by output "
            "lengths, which the input does not give (no max_tokens); pass "
            "--outputs-known when the lengths are what the job will produce"]
