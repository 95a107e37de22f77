"""The study's metadata: one typed, versioned record of everything a search stored beside its
trials (the ``metadata`` user attribute of the Optuna study), from which a worker, `tuner
results`, `tuner report`, `tuner export` and `tuner validate` rebuild the search.

Written in one place (:func:`tuner.search.storage.study_metadata` builds the record from the
search's inputs plus the CLI's extras; :func:`tuner.search.storage.open_study` stores
:meth:`StudyMeta.to_dict`) and read in one place (:func:`study_meta` ->
:meth:`StudyMeta.from_dict`). The stored JSON keeps the keys earlier tuner versions wrote, so
their readers and this one read each other's studies: a key an older study lacks takes the value
its readers assumed (the field's default), and a key this version does not know is kept in
``extra`` and written back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tuner.core.workload.base import lengths_from_input
from tuner.search.constraints import Constraints

#: the layout :meth:`StudyMeta.to_dict` writes. 1: studies written before the record had a
#: version (every key below may be missing); 2: every key written, ``version`` included.
STUDY_META_VERSION = 2


@dataclass(frozen=True)
class StoredSearch:
    """The sampler settings a search ran with (the stored ``search`` entry)."""

    sampler: str = "auto"
    seed: int = 0
    n_trials: int = 300
    timeout_s: float | None = None
    exhaustive: bool = False
    sample_fraction: float | None = None

    @classmethod
    def from_settings(cls, settings) -> StoredSearch:
        """From a :class:`tuner.search.settings.SearchSettings`."""
        return cls(sampler=settings.sampler, seed=settings.seed, n_trials=settings.n_trials,
                   timeout_s=settings.timeout_s, exhaustive=settings.exhaustive,
                   sample_fraction=settings.sample_fraction)

    @classmethod
    def from_dict(cls, d: Any) -> StoredSearch:
        s = d if isinstance(d, dict) else {}
        return cls(sampler=s.get("sampler", "auto"), seed=int(s.get("seed", 0)),
                   n_trials=int(s.get("n_trials", 300)), timeout_s=s.get("timeout_s"),
                   exhaustive=bool(s.get("exhaustive", False)),
                   sample_fraction=s.get("sample_fraction"))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def sampler_used(self) -> str:
        """The sampler that proposes the trials ("auto" resolved by --n-trials; "exhaustive":
        the grid, no sampler)."""
        from tuner.search.settings import sampler_name

        return "exhaustive" if self.exhaustive else sampler_name(self)

    def describe(self) -> str:
        """'sampler tpe (auto at --n-trials 20), seed 0'."""
        if self.exhaustive:
            return "every configuration (--exhaustive)"
        how = f" (auto at --n-trials {self.n_trials})" if self.sampler == "auto" else ""
        return f"sampler {self.sampler_used}{how}, seed {self.seed}"

    def proposes_as(self, other: StoredSearch) -> bool:
        """Both propose trials with the same sampler and seed (--n-trials may differ unless it
        switches what "auto" picks; --exhaustive runs a grid, no sampler)."""
        if self.exhaustive or other.exhaustive:
            return self.exhaustive == other.exhaustive  # the grid's order is the space's
        return (self.sampler_used, self.seed) == (other.sampler_used, other.seed)


@dataclass(frozen=True)
class StudyMeta:
    """Everything a study stores about its search. The defaults are what a reader assumes for a
    study that lacks the key (written by an older version, or by :func:`run_search` called
    without the CLI's extras)."""

    # ---- the job: workload, model, GPUs (tuner.search.storage.study_metadata) ---------------
    workload: str = ""  # the workload file (the CLI's resolved path) or the Workload's source
    model: str = ""  # the model's catalog name
    gpus: list[str] = field(default_factory=list)  # the GPU types searched, in order
    space: str = ""  # the search space's source (a YAML path, or a label)
    knobs: dict[str, list] | None = None  # the space's knobs; None: a study older than that
    fixed: dict[str, Any] = field(default_factory=dict)  # the space's fixed knobs
    prices: dict[str, float] = field(default_factory=dict)  # $/GPU-h the search used
    gpu_specs: dict[str, dict] = field(default_factory=dict)  # GPU name -> asdict(GPU)
    model_spec: dict | None = None  # asdict(ModelSpec), checkpoint included
    workload_requests: int | None = None
    workload_sha256: str | None = None  # tuner.search.storage.workload_digest
    tokenizer: str = ""
    # where the output lengths come from; None: a study older than the rule that only
    # orderings by lengths the input gives are recommended (it keeps its orderings)
    output_source: str | None = None
    search: StoredSearch = field(default_factory=StoredSearch)
    # the sampler settings a --resume left behind (another --sampler / --seed, oldest first),
    # each with "until_trial": the study's trial count when the next one took over
    # (tuner.search.storage.open_study); [] when one setting proposed every trial
    earlier_searches: list[dict] = field(default_factory=list)
    constraints: Constraints = field(default_factory=Constraints)  # --deadline, --budget ...
    # ---- how the CLI read the inputs (tuner.cli.search) --------------------------------------
    gpu_file: str | None = None
    skip_invalid: bool = False
    output_dist: str | None = None
    profile: str | None = None  # the --profile folder of measured cost models
    profile_mode: str | None = None  # None: "auto"
    engine_version: str | None = None
    entry_point: str | None = None  # None: tuner.core.engine_defaults.DEFAULT_ENTRY_POINT
    num_scheduler_steps: int | None = None  # --num-scheduler-steps (V0 multi-step)
    disable_log_requests: bool = False  # --disable-log-requests (the API server's request log)
    provider: str | None = None  # priced by a provider's instances and billing
    spot: bool = False
    # --interruption-rate (interruptions per machine-hour of every --spot machine); None: the
    # provider's published rates (tuner.search.spot)
    interruption_rate_per_h: float | None = None
    on_too_long: str = "fail"  # "skip": requests beyond the context were left out
    too_long: dict | None = None  # what --on-too-long skip left out
    outputs_known: bool = False
    startup_s: float | None = None  # --startup-s; None: modelled from --engine-version
    # --engines: the engines searched (tuner.search.space.fit_space makes them the `engine`
    # knob); None: the space's own (vLLM unless it lists engine), as before engines were searched
    engines: list[str] | None = None
    # digests of what a trial's figures depend on (tuner.search.storage.input_digests): each
    # GPU's specs, the model shape, the cost-model source, the start-up override; None: a study
    # older than that (--resume checks only what _SAME lists)
    digests: dict | None = None
    workload_file_sha256: str | None = None  # the workload file's bytes; None: not a file
    # ---- the record itself -----------------------------------------------------------------
    version: int = STUDY_META_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know

    # ---- reading and writing -----------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Any) -> StudyMeta:
        """The record of a stored ``metadata`` dict, of this version or an older one (missing
        keys: the defaults; unknown keys: kept in ``extra``). None or {}: an empty record
        (:attr:`has_search` False)."""
        d = d if isinstance(d, dict) else {}
        knobs = d.get("knobs")
        return cls(
            workload=str(d.get("workload") or ""),
            model=str(d.get("model") or ""),
            gpus=list(d.get("gpus") or []),
            space=str(d.get("space") or ""),
            knobs=None if knobs is None else {k: list(v) for k, v in knobs.items()},
            fixed=dict(d.get("fixed") or {}),
            prices=dict(d.get("prices") or {}),
            gpu_specs=dict(d.get("gpu_specs") or {}),
            model_spec=d.get("model_spec") if isinstance(d.get("model_spec"), dict) else None,
            workload_requests=d.get("workload_requests"),
            workload_sha256=d.get("workload_sha256") or None,
            tokenizer=str(d.get("tokenizer") or ""),
            output_source=d.get("output_source"),
            search=StoredSearch.from_dict(d.get("search")),
            earlier_searches=[dict(e) for e in d.get("earlier_searches") or []
                              if isinstance(e, dict)],
            constraints=Constraints.from_dict(d.get("constraints")),
            gpu_file=d.get("gpu_file"),
            skip_invalid=bool(d.get("skip_invalid", False)),
            output_dist=d.get("output_dist"),
            profile=d.get("profile"),
            profile_mode=d.get("profile_mode"),
            engine_version=d.get("engine_version"),
            entry_point=d.get("entry_point"),
            num_scheduler_steps=(None if d.get("num_scheduler_steps") is None
                                 else int(d["num_scheduler_steps"])),
            disable_log_requests=bool(d.get("disable_log_requests", False)),
            provider=d.get("provider"),
            spot=bool(d.get("spot", False)),
            interruption_rate_per_h=d.get("interruption_rate_per_h"),
            on_too_long=d.get("on_too_long") or "fail",
            too_long=d.get("too_long"),
            outputs_known=bool(d.get("outputs_known", False)),
            startup_s=d.get("startup_s"),
            engines=None if d.get("engines") is None else list(d["engines"]),
            digests=d.get("digests") if isinstance(d.get("digests"), dict) else None,
            workload_file_sha256=d.get("workload_file_sha256") or None,
            version=int(d.get("version", 1)),
            extra={k: v for k, v in d.items() if k not in _STORED},
        )

    def to_dict(self) -> dict:
        """The stored form: the keys earlier versions wrote, plus ``version`` and ``extra``."""
        d: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            d[f.name] = v.to_dict() if hasattr(v, "to_dict") else v
        return {**d, **self.extra}

    def with_extras(self, extras: dict | None) -> StudyMeta:
        """This record with the keys of a stored-form dict (e.g. the CLI's extras) overriding
        its fields."""
        return StudyMeta.from_dict({**self.to_dict(), **(extras or {})})

    # ---- what readers ask ----------------------------------------------------------------------
    @property
    def has_search(self) -> bool:
        """The study was written by `tuner search` (it names its model and GPUs)."""
        return bool(self.model and self.gpus)

    @property
    def complete(self) -> bool:
        """The search can be rebuilt from the study alone (model and GPU specs, the space)."""
        return bool(self.gpus and self.model_spec and self.gpu_specs) and self.knobs is not None

    @property
    def outputs_recommendable(self) -> bool:
        """Orderings by output length may be recommended: the lengths are known (--outputs-known
        or the input's own), or the study predates the rule."""
        return (self.outputs_known or self.output_source is None
                or bool(lengths_from_input(self.output_source)))

    @property
    def engine_schedulers(self) -> tuple[str, ...]:
        """The scheduler presets --engine-version's flags select (tuner.core.engines; without
        one, the newest vLLM's), its default first."""
        from tuner.core.engines import generation_of

        return generation_of(self.engine_version).generation.schedulers

    @property
    def max_model_len(self) -> int | None:
        """The model's context (V0's default token budget depends on it)."""
        spec = self.model_spec or {}
        return spec.get("max_position")

    @property
    def skips_too_long(self) -> bool:
        """--on-too-long skip: the search left out requests beyond the model's context."""
        return self.on_too_long == "skip"

    def sim_options(self) -> dict:
        """simulate()'s engine keywords: the search's --startup-s, --engine-version and
        --num-scheduler-steps."""
        return {"startup_s": self.startup_s, "engine_version": self.engine_version,
                "num_scheduler_steps": self.num_scheduler_steps}

    def sampler_history(self) -> list[dict]:
        """Which sampler settings proposed which trials: [{"sampler", "seed", "from_trial",
        "description"}], oldest first, the current one last (one entry unless a --resume
        changed --sampler or --seed)."""
        out, start = [], 0
        for e in self.earlier_searches:
            s = StoredSearch.from_dict(e)
            out.append({"sampler": s.sampler_used, "seed": s.seed, "from_trial": start,
                        "description": s.describe()})
            start = int(e.get("until_trial", start))
        s = self.search
        return out + [{"sampler": s.sampler_used, "seed": s.seed, "from_trial": start,
                       "description": s.describe()}]

    @classmethod
    def of(cls, meta: StudyMeta | dict | None) -> StudyMeta:
        """A StudyMeta from a record, its stored dict, or None (API entry points take any)."""
        return meta if isinstance(meta, StudyMeta) else cls.from_dict(meta)


_STORED = frozenset(f.name for f in dataclasses.fields(StudyMeta)) - {"extra"}


def study_meta(study) -> StudyMeta:
    """The study's metadata record (an empty one when it has none): the one reader of the
    ``metadata`` user attribute."""
    return StudyMeta.from_dict(study.user_attrs.get("metadata"))


__all__ = ["STUDY_META_VERSION", "StoredSearch", "StudyMeta", "study_meta"]
