"""ServingConfig: one point of the search space, flat like vLLM's EngineArgs.

Each field carries a :class:`Knob` in its metadata (help, unit, allowed values, CLI flags, and
the vLLM and SGLang argument it becomes). ``tuner simulate``'s options and the exporters'
argument mappings are generated from it, so a knob added here appears everywhere; the config
checks its values on construction, so an invalid one cannot exist.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tuner.core.engine_defaults import COMMON_BATCH
from tuner.core.errors import TunerError
from tuner.core.schedulers import SCHEDULER_PRESETS

# Scheduler presets of InferMax's unified scheduler (Alg. 1): their one registry.
SCHEDULERS = tuple(SCHEDULER_PRESETS)
ORDERINGS = ("fcfs", "shortest-prompt", "longest-output", "binpack", "blend")
#: the engines simulated (tuner.sim.simulator: vLLM's C loop, tuner.sim.sglang's scheduler)
ENGINES = ("vllm", "sglang")


def engine_name(engine: str | None) -> str:
    """vLLM or SGLang, as the engines spell themselves."""
    return {"sglang": "SGLang"}.get(engine or "vllm", "vLLM")

#: SGLang --schedule-policy values tuner simulates (tuner.sim.sglang; SGLang's default fcfs)
SCHEDULE_POLICIES = ("fcfs", "lpm", "dfs-weight")

#: ServingConfig.ordering -> SGLang --schedule-policy, where SGLang has an equivalent: ``lof`` is
#: SGLang's longest-output-first, ``lpm`` its longest-prefix-match (prefix-aware) order.
SGLANG_SCHEDULE_POLICY = {"fcfs": "fcfs", "longest-output": "lof", "blend": "lpm"}
#: Fields one engine's plan does not have, held at these values in the other engine's plans
#: (ServingConfig normalises them, so a search's vLLM trial with schedule_policy lpm is the same
#: plan, and the same dedup key, as with fcfs): vLLM has no schedule policy; the SGLang
#: simulator runs SGLang's own scheduler (no InferMax presets), token-level KV (page size 1)
#: and no offloading.
ENGINE_HELD = {
    "vllm": {"schedule_policy": "fcfs"},
    "sglang": {"scheduler": "vllm", "kv_offload_layers": 0, "weight_offload_fraction": 0.0,
               "attention_on_cpu": False, "cpu_threads_intra": 0, "cpu_threads_inter": 0,
               "block_size": 1},
}


@dataclass(frozen=True)
class EngineArg:
    """How one ServingConfig field appears among an engine's arguments."""

    name: str  # vLLM: EngineArgs keyword (snake_case); SGLang: server option (dashed)
    # field value -> argument value; None: the value as is. A value the mapping lacks (or maps to
    # None) writes no argument: the exporter covers it (another argument, or a note saying what
    # to do instead).
    values: Mapping[Any, Any] | None = None
    omit_default: bool = False  # no argument while the field holds its default
    derived: bool = False  # the exporter computes the value (e.g. GiB from a weight share)

    @property
    def direct(self) -> bool:
        """The argument is the field's value itself, so it parses back 1:1."""
        return self.values is None and not self.derived


@dataclass(frozen=True)
class Knob:
    """A field's metadata: what it means and where it goes."""

    help: str
    unit: str = ""
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    flags: tuple[str, ...] = ()  # CLI flags, the primary (vLLM's name) first; () -> --field-name
    vllm: EngineArg | None = None
    sglang: EngineArg | None = None
    # which end of a space's values needs the least GPU memory ("min" | "max"; None: no
    # direction, a space's first value): the search's early "does any GPU fit" check
    # (tuner.search.loop.assert_some_gpu_fits) takes it
    lenient: str | None = None

    def __post_init__(self) -> None:
        if self.lenient not in (None, "min", "max"):
            raise ValueError(f"Knob.lenient must be 'min', 'max' or None, got {self.lenient!r}")

    def most_lenient(self, values: list) -> Any:
        """The value of `values` that needs the least memory (see `lenient`)."""
        if self.lenient == "min":
            return min(values)
        if self.lenient == "max":
            return max(values)
        return values[0]

    def rule(self) -> str:
        """The allowed values in words ('' when any value of the type is)."""
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.exclusive_minimum is not None and self.maximum is not None:
            return f"in ({self.exclusive_minimum:g}, {self.maximum:g}]"
        if self.minimum is not None and self.maximum is not None:
            return f"in [{self.minimum:g}, {self.maximum:g}]"
        if self.minimum is not None:
            return f">= {self.minimum:g}"
        return ""

    def allows(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        if self.minimum is not None and value < self.minimum:
            return False
        if self.exclusive_minimum is not None and value <= self.exclusive_minimum:
            return False
        return self.maximum is None or value <= self.maximum


def _knob(default: Any = dataclasses.MISSING, **meta: Any) -> Any:
    return field(default=default, metadata={"knob": Knob(**meta)})


def _chunked(scheduler: str) -> bool:
    """Chunked prefill with hybrid batches (every preset but vLLM V0's prefill-first)."""
    return SCHEDULER_PRESETS[scheduler].chunked_prefill


@dataclass(frozen=True)
class ServingConfig:
    """Every knob of one serving deployment. Defaults follow vLLM V1's offline defaults (the
    batch limits: tuner.core.engine_defaults.COMMON_BATCH)."""

    gpu: str = _knob(help="GPU type (`tuner gpus`): a catalog name or an alias such as nvidia-smi prints it (NVIDIA A100-SXM4-80GB).", flags=("--gpu", "-g"))
    engine: str = _knob(
        "vllm", help="Serving engine: vllm, or sglang (SGLang's scheduler, radix cache and "
        "memory plan; chunk_size is then --chunked-prefill-size, max_running "
        "--max-running-requests, gpu_memory_utilization --mem-fraction-static).",
        choices=ENGINES, flags=("--engine",))
    tp: int = _knob(
        1, help="Tensor-parallel degree (GPUs per replica).", unit="GPUs", choices=(1, 2, 4, 8),
        flags=("--tensor-parallel-size", "--tp", "--tp-size"),
        vllm=EngineArg("tensor_parallel_size"), sglang=EngineArg("tp-size"),
        lenient="max")  # weights and KV split over more GPUs
    dp: int = _knob(
        1, help="Data-parallel replicas; the workload is split across them.", unit="replicas",
        minimum=1, flags=("--data-parallel-size", "--dp", "--dp-size"),
        vllm=EngineArg("data_parallel_size", omit_default=True),
        sglang=EngineArg("dp-size", omit_default=True))
    pp: int = _knob(
        1, help="Pipeline-parallel stages per replica (the layers split over PP groups of TP "
        "GPUs; stages may span machines): for a model one machine cannot hold.", unit="stages",
        choices=(1, 2, 4, 8), flags=("--pipeline-parallel-size", "--pp", "--pp-size"),
        vllm=EngineArg("pipeline_parallel_size", omit_default=True),
        sglang=EngineArg("pp-size", omit_default=True), lenient="max")
    scheduler: str = _knob(
        "vllm", help="Preset of InferMax's unified scheduler: vllm (V1 as current releases run "
        "it, prefix caching on) and sarathi (Sarathi-Serve) chunk prefills into hybrid batches; "
        "vllm-basic is V1's batching without full-sequence admission and cached recompute; "
        "vllm-v0 runs prefills first; -noevict reserves prompt + output at admission.",
        choices=SCHEDULERS,
        vllm=EngineArg("enable_chunked_prefill", values={s: _chunked(s) for s in SCHEDULERS}),
        sglang=EngineArg("enable-mixed-chunk",
                         values={s: True for s in SCHEDULERS if _chunked(s)}))
    chunk_size: int = _knob(
        COMMON_BATCH[0], help="Token budget per step (decodes + prefill chunks; the prefill "
        "chunk is the budget).", unit="tokens", minimum=1,
        flags=("--max-num-batched-tokens", "--chunk-size", "--chunked-prefill-size"),
        vllm=EngineArg("max_num_batched_tokens"),
        # chunked: the budget; prefill-first: -1 (off) and --max-prefill-tokens
        sglang=EngineArg("chunked-prefill-size", derived=True), lenient="min")
    max_running: int = _knob(
        COMMON_BATCH[1], help="Most requests running at once (R_max).", unit="requests",
        minimum=1, flags=("--max-num-seqs", "--max-running", "--max-running-requests"),
        vllm=EngineArg("max_num_seqs"), sglang=EngineArg("max-running-requests"),
        lenient="min")
    weight_bits: int = _knob(
        16, help="Weight precision (8: FP8, quantized online; weight-only through Marlin "
        "on GPUs without FP8 tensor cores; 4: an AWQ/GPTQ checkpoint).",
        unit="bits", choices=(16, 8, 4),
        vllm=EngineArg("quantization", values={8: "fp8"}),
        sglang=EngineArg("quantization", values={8: "fp8"}), lenient="min")
    kv_bits: int = _knob(
        16, help="KV-cache precision.", unit="bits", choices=(16, 8, 4),
        vllm=EngineArg("kv_cache_dtype", values={16: "auto", 8: "fp8"}),
        sglang=EngineArg("kv-cache-dtype", values={16: "auto", 8: "fp8_e4m3"}), lenient="min")
    kv_offload_layers: int = _knob(
        0, help="KV-cache layers kept in host RAM, moved over PCIe each iteration (Vasuki).",
        unit="layers", minimum=0, lenient="max")
    weight_offload_fraction: float = _knob(
        0.0, help="Share of weights in host RAM, streamed every iteration.",
        unit="fraction", minimum=0.0, maximum=1.0,
        vllm=EngineArg("cpu_offload_gb", omit_default=True, derived=True),
        sglang=EngineArg("cpu-offload-gb", omit_default=True, derived=True), lenient="max")
    cpu_threads_intra: int = _knob(
        0, help="CPU intra-op threads (0: LM-Offload's Alg. 3 chooses).", unit="threads",
        minimum=0)
    cpu_threads_inter: int = _knob(
        0, help="CPU inter-op threads (0: LM-Offload's Alg. 3 chooses).", unit="threads",
        minimum=0)
    ordering: str = _knob(
        "fcfs", help="Request order (binpack: Vasuki's bin packing; blend: BlendServe's "
        "prefix-aware order).", choices=ORDERINGS,
        # a vLLM plan exported to SGLang: the policy nearest its order (tuner.exports.sglang;
        # an SGLang plan's own policy is schedule_policy)
        sglang=EngineArg("schedule-policy", values=SGLANG_SCHEDULE_POLICY, derived=True))
    schedule_policy: str = _knob(
        "fcfs", help="SGLang only: fcfs (its default), lpm (longest cached prefix first; "
        "SGLang falls back to fcfs above 128 waiting requests) or dfs-weight (requests of the "
        "cached prefix most of them wait on first).", choices=SCHEDULE_POLICIES,
        flags=("--schedule-policy",), sglang=EngineArg("schedule-policy", derived=True))
    gpu_memory_utilization: float = _knob(
        0.9, help="Share of GPU memory the engine may use.", unit="fraction",
        exclusive_minimum=0.0, maximum=1.0,
        vllm=EngineArg("gpu_memory_utilization"), sglang=EngineArg("mem-fraction-static"),
        lenient="max")
    block_size: int = _knob(
        16, help="KV block (page) size.", unit="tokens", minimum=1,
        flags=("--block-size", "--page-size"),
        vllm=EngineArg("block_size"), sglang=EngineArg("page-size"))
    attention_on_cpu: bool = _knob(
        False, help="Decode attention of the KV-offloaded layers runs on the CPU.",
        flags=("--attention-on-cpu/--attention-on-gpu",))
    expert_parallel: bool = _knob(
        False, help="Mixture-of-experts models only: split whole experts across the tp x dp GPUs "
        "(expert parallelism) instead of slicing every expert; with dp > 1 each MoE layer "
        "all-gathers and reduce-scatters the replicas' tokens.",
        flags=("--enable-expert-parallel/--no-enable-expert-parallel",),
        vllm=EngineArg("enable_expert_parallel", omit_default=True),
        # SGLang: --ep-size (the expert-parallel group; with dp > 1 DP attention), written by
        # tuner.exports.sglang
        sglang=EngineArg("ep-size", omit_default=True, derived=True))

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_value(f, getattr(self, f.name))
        for name, value in ENGINE_HELD[self.engine].items():  # the other engine's fields
            object.__setattr__(self, name, value)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def eviction_free(self) -> bool:
        return SCHEDULER_PRESETS[self.scheduler].reserve_full

    @property
    def chunked_prefill(self) -> bool:
        return _chunked(self.scheduler)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ServingConfig:
        unknown = set(d) - set(KNOBS)
        if unknown:
            raise TunerError(f"Unknown ServingConfig field(s): {', '.join(sorted(unknown))}.")
        return cls(**d)


def prefill_budget_refusal(config: ServingConfig, max_model_len: int) -> str | None:
    """Why vLLM refuses to start `config` at `max_model_len`, or None: without chunked prefill
    its token budget must hold max_model_len (SchedulerConfig.verify_max_model_len; V0's
    _verify_args alike)."""
    if config.engine != "vllm" or config.chunked_prefill or config.chunk_size >= max_model_len:
        return None
    return (f"vLLM refuses to start: max_num_batched_tokens ({config.chunk_size}) is smaller "
            f"than max_model_len ({max_model_len}) without chunked prefill (scheduler "
            f"{config.scheduler})")


def check_model_config(config: ServingConfig, model: Any) -> None:
    """TunerError where a knob does not apply to `model` (a tuner.core.catalog.ModelSpec):
    expert parallelism needs a mixture-of-experts model; a quantized checkpoint is not served
    at more bits than it stores."""
    if config.expert_parallel and not getattr(model, "is_moe", False):
        raise TunerError(f"expert_parallel applies to mixture-of-experts models only; "
                         f"{getattr(model, 'name', model)} is dense (no routed experts). Drop "
                         "--enable-expert-parallel.")
    refusal = getattr(model, "linear_tp_refusal", lambda tp: None)(config.tp)
    if refusal:  # a Mamba2 hybrid's heads / groups that vLLM cannot shard over the degree
        raise TunerError(refusal)
    bits = getattr(model, "checkpoint_bits", 16)
    if config.weight_bits > bits:
        raise TunerError(
            f"{model.name}'s checkpoint is {model.checkpoint_quantization} ({bits}-bit weights, "
            f"its config.json's quantization_config): {engine_name(config.engine)} serves it "
            f"at {bits} bits, not "
            f"{config.weight_bits}. Use --weight-bits {bits} (the default), or give a "
            f"{config.weight_bits}-bit checkpoint's config with --model.")


def _check_value(f: dataclasses.Field, value: Any) -> None:
    """TunerError (one line, with the allowed values) unless ``value`` suits field ``f``."""
    knob: Knob = f.metadata["knob"]
    default = f.default
    wrong_type = False  # a numeric knob given no number (or a fraction for a count)
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, numbers.Real):
        # an int knob (tokens, requests, GPUs) takes whole numbers only: 512.5 is no budget
        wrong_type = (not isinstance(value, numbers.Real) or isinstance(value, bool)
                      or (isinstance(default, int) and not float(value).is_integer()))
        ok = not wrong_type and knob.allows(value)
    else:  # str fields
        ok = isinstance(value, str) and (knob.allows(value) if knob.choices else bool(value))
    if not ok:
        rule = knob.rule() or ("true or false" if isinstance(default, bool) else "non-empty")
        if wrong_type and not knob.choices:  # ">= 1, got 'abc'" does not say a number is due
            rule = f"{'an integer' if isinstance(default, int) else 'a number'} {rule}".strip()
        # the field and the option that sets it: a CLI user typed the flag, a file the field
        flag = (knob.flags or (f"--{f.name.replace('_', '-')}",))[0].split("/")[0]
        raise TunerError(f"{f.name} must be {rule}, got {value!r} (option {flag}). "
                         f"{knob.help}")


#: Field name -> its Knob, in field order (the one place the metadata is read from).
KNOBS: Mapping[str, Knob] = MappingProxyType(
    {f.name: f.metadata["knob"] for f in dataclasses.fields(ServingConfig)})
#: Field name -> its default (``gpu`` has none).
DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {f.name: f.default for f in dataclasses.fields(ServingConfig)
     if f.default is not dataclasses.MISSING})


def engine_flag_hint(option: str, available: Collection[str]) -> str:
    """For an option tuner does not take that is a vLLM or SGLang argument a knob maps to
    (--kv-cache-dtype, --quantization): the tuner option that sets it and how its values
    translate, where the command takes that option (`available`: its flags); "" otherwise."""
    want = option.lstrip("-").replace("_", "-")
    for name, knob in KNOBS.items():
        flags = [x for f in (knob.flags or (f"--{name.replace('_', '-')}",))
                 for x in f.split("/")]
        for engine, arg in (("vLLM", knob.vllm), ("SGLang", knob.sglang)):
            if (arg is None or arg.name.replace("_", "-") != want or f"--{want}" in flags
                    or flags[0] not in available):
                continue
            values = ", ".join(f"{v} = {flags[0]} {k}" for k, v in (arg.values or {}).items()
                               if v is not None)
            how = (f" ({values})" if values else
                   " (tuner derives the engine's value from it)" if arg.derived else "")
            return f"; --{want} is {engine}'s argument: tuner's {flags[0]} sets it{how}"
    return ""
