"""What every exporter shares: the deployment it describes, the arguments generated from
ServingConfig's field metadata, the notes for knobs an engine lacks, the comment header with the
``# tuner-config:`` line, and writing and parsing command lines."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from tuner.core.catalog import GIB, GPU, ModelSpec
from tuner.core.config import (
    DEFAULTS,
    KNOBS,
    SGLANG_SCHEDULE_POLICY,
    ServingConfig,
    prefill_budget_refusal,
)
from tuner.core.errors import TunerError
from tuner.core.memory import moe_replica_config, plan_memory, weight_bytes_per_rank
from tuner.core.pricing import Machines, place
from tuner.core.units import plural

CONFIG_COMMENT_PREFIX = "# tuner-config:"

ORDERING_HOWTO = {
    "shortest-prompt": "shortest prompt first",
    "longest-output": "longest expected output first",
    "binpack": "the tuner's bin-packing order",
    "blend": "the tuner's prefix-aware blend (requests sharing a prefix adjacent)",
}


@dataclass(frozen=True)
class Deployment:
    """What an export describes: a config of a model on a GPU, for requests up to
    ``max_model_len`` tokens. ``kv_capacity_tokens``: per replica, from the search's memory plan
    (None: :func:`tuner.core.memory.plan_memory` estimates it where a note needs it)."""

    config: ServingConfig
    model: ModelSpec
    gpu: GPU
    max_model_len: int
    kv_capacity_tokens: int | None = None
    # the quantized checkpoint (HF id or path) a plan with quantized weights serves
    # (`--quantized-model`); None: the model's own checkpoint, quantized online where the
    # engine can (8-bit: FP8, weight-only through Marlin on GPUs without FP8 tensor cores)
    quantized_model: str | None = None
    # V0 multi-step scheduling the prediction assumed (tuner.core.engines.priced_scheduler_steps);
    # None: a V1 engine, which has no such option
    num_scheduler_steps: int | None = None
    # the search priced a V0 API server started with --disable-log-requests (the `vllm serve`
    # YAML says so); False: the server's default
    disable_log_requests: bool = False
    # the vLLM release the plan was searched for (--engine-version; None: the newest): the
    # arguments whose spelling changed between releases follow it (online_fp8_method)
    engine_version: str | None = None

    def __post_init__(self) -> None:
        if self.max_model_len < 1:
            raise TunerError(f"max_model_len must be positive, got {self.max_model_len}.")

    @property
    def needs_checkpoint(self) -> bool:
        """4-bit weights: no engine quantizes them online (unless the model's own checkpoint
        stores that precision); 8-bit ones are quantized to FP8 as the engine loads them."""
        from tuner.search.constraints import needs_checkpoint

        return needs_checkpoint(self.config.weight_bits, bool(self.gpu.fp8_tflops),
                                self.model.checkpoint_bits)

    @functools.cached_property
    def quantized_bits_known(self) -> int | None:
        """The weight bits the --quantized-model checkpoint's config.json or name says (None:
        neither says); read once a deployment (a config file or the HF cache)."""
        from tuner.search.constraints import stored_checkpoint_bits

        return stored_checkpoint_bits(self.quantized_model or "")

    @property
    def quantized_bits(self) -> int:
        """The weight bits the --quantized-model checkpoint is taken to store
        (tuner.search.constraints.served_bits of quantized_bits_known)."""
        from tuner.search.constraints import served_bits

        return served_bits(self.quantized_bits_known)

    def _checkpoint_width(self) -> str:
        bits = self.quantized_bits
        return (f"{bits}-bit weights" if self.quantized_bits_known else
                f"taken as {bits}-bit: its config and name do not say")

    @property
    def serves_quantized_checkpoint(self) -> bool:
        """Whether the engine loads the --quantized-model checkpoint: for a plan at the
        checkpoint's own weight bits only (a 4-bit AWQ checkpoint is no 8-bit plan's; an 8-bit
        checkpoint given serves the 8-bit plans in place of online FP8)."""
        bits = self.config.weight_bits
        return bool(self.quantized_model) and bits < 16 and self.quantized_bits == bits

    @property
    def offload_gib_per_gpu(self) -> float:
        """The weights each GPU offloads to host memory, in GiB (the memory plan's shard: an
        MoE model at dp > 1 holds 1/dp of the experts, but every one as V0's replicas)."""
        replica = moe_replica_config(self.model, self.config, self.engine_version,
                                     self.config.engine)
        return (self.config.weight_offload_fraction
                * weight_bytes_per_rank(self.model, replica) / GIB)

    def quantized_checkpoint_notes(self, opts: dict, notes: list[str], option: str,
                                   engine: str) -> list[str]:
        """A plan served from the --quantized-model checkpoint: it carries its quantization
        config, which the engine reads, so `opts` loses its online `quantization` and `notes`
        their weight-bits advice for one line naming the checkpoint. A quantized plan that
        quantizes online although a checkpoint of other bits was given: a line saying it is
        not served. Unchanged otherwise."""
        c = self.config
        if not self.serves_quantized_checkpoint:
            if self.quantized_model and c.weight_bits < 16 and not self.needs_checkpoint:
                return [*notes, f"--quantized-model {self.quantized_model} "
                        f"({self._checkpoint_width()}) is not served: this plan's "
                        f"{c.weight_bits}-bit weights are quantized from "
                        f"{self.model.load_id} as {engine} loads them."]
            return notes
        opts.pop("quantization", None)
        return [n for n in notes if not n.startswith("weight_bits=")] + [
            f"{option}: {self.checkpoint} is the {c.weight_bits}-bit checkpoint given "
            f"with --quantized-model; {engine} takes its quantization from the checkpoint."]

    @property
    def checkpoint(self) -> str:
        """The checkpoint the engine loads: the --quantized-model one for a plan at its weight
        bits (serves_quantized_checkpoint), else the model's own, as the user named it
        (ModelSpec.load_id)."""
        if self.serves_quantized_checkpoint:
            return self.quantized_model
        return self.model.load_id

    @property
    def machines(self) -> Machines:
        """The machines the plan runs on: TP inside a machine, the DP replicas spread over
        whole machines of the GPU's shape (the provider's instances with --provider)."""
        c = self.config
        return place(self.gpu.name, self.gpu.gpus_per_machine, c.tp, c.dp, self.gpu.billing,
                     c.pp)

    @property
    def replicas_by_machine(self) -> list[list[int]]:
        """The DP replicas each machine runs (replica K on machine K // replicas_per_machine),
        one list per machine."""
        m, dp = self.machines, self.config.dp
        per = m.replicas_per_machine
        return [list(range(j * per, min(j * per + per, dp))) for j in range(m.count)]

    @property
    def one_engine(self) -> bool:
        """The whole plan is one engine: a mixture-of-experts model at dp > 1 is priced and
        sized as vLLM's data-parallel engine runs it (attention per replica, the experts split
        over all TP x DP GPUs, tensor-wise or, with expert parallelism, whole: its memory
        plan and predictors.moe), so its export keeps it one engine (vLLM --data-parallel-size,
        SGLang's DP attention); otherwise every DP replica is an engine of its own, as also
        under vLLM V0, which has no data-parallel engine (moe_replicas_alone)."""
        return self.model.is_moe and self.config.dp > 1 and not self.moe_replicas_alone

    @property
    def moe_replicas_alone(self) -> bool:
        """A mixture-of-experts plan at dp > 1 for a vLLM V0 release: dp independent engines,
        each holding every expert on its TP GPUs, as it was sized and priced
        (tuner.core.memory.moe_replica_config: the config at dp 1 then)."""
        return moe_replica_config(self.model, self.config, self.engine_version,
                                  self.config.engine) is not self.config

    def machines_line(self, engine: str = "vllm", separate: bool = False,
                      headless_model: str | None = None) -> str:
        """'# Needs 4 x H100 machine (8 GPUs each): 8 replicas of TP 1 per machine (32 GPUs).'
        `separate`: for an export that runs every replica as an engine of its own (run-batch,
        Ray Data): no one-engine launch lines. `headless_model`: the checkpoint of a command
        that has no --headless (`vllm run-batch`): the other machines' data-parallel ranks are
        then `vllm serve MODEL --headless` with the same engine options."""
        m = self.machines
        line = f"# Needs {m.describe()} ({plural(m.gpus_used, 'GPU')} in use)."
        if m.machines_per_replica > 1 and engine == "sglang":
            # SGLang's own multi-node launch (docs.sglang.io, "Multi-Node Deployment")
            line += (f"\n# Each server's {m.pp} pipeline stages span {m.machines_per_replica} "
                     f"machines: start the same command on each of them with --nnodes "
                     f"{m.machines_per_replica} --node-rank K (K = 0 .. "
                     f"{m.machines_per_replica - 1}) --dist-init-addr HEAD_IP:5000 (machine 0's "
                     "address), one such group per replica.")
        elif self.one_engine and m.count > 1 and engine == "sglang" and not separate:
            line += (f"\n# The one engine spans the {m.count} machines: start the same command "
                     f"on each with --nnodes {m.count} --node-rank K (K = 0 .. {m.count - 1}) "
                     "--dist-init-addr HEAD_IP:5000 (machine 0's address).")
        elif self.one_engine and m.count > 1 and not separate:  # vLLM's multi-node DP
            local = m.replicas_per_machine
            head = "--data-parallel-address HEAD_IP --data-parallel-rpc-port 13345"
            # `vllm run-batch` takes the head's DP options but has no --headless (its parser,
            # vLLM 0.32): the other machines' ranks are then headless `vllm serve` engines
            others = ("the same plus --headless" if not headless_model else
                      f"start its ranks with vllm serve {headless_model} --headless, this "
                      "command's engine options (all but -i, -o and --served-model-name), "
                      f"--data-parallel-size-local {local}, {head} and")
            line += (f"\n# The one engine spans the {m.count} machines ({local} data-parallel "
                     f"rank(s) each): on machine 0 add --data-parallel-size-local {local} "
                     f"{head}{' to this command' if headless_model else ''}; on machine K (K = "
                     f"1 .. {m.count - 1}) {others} --data-parallel-start-rank {local}*K "
                     "(vLLM's multi-node data parallel"
                     + ("; vllm run-batch has no --headless)." if headless_model else ")."))
        elif m.machines_per_replica > 1:  # vLLM runs stages on other machines through Ray
            line += (f"\n# Each engine's {m.pp} pipeline stages span {m.machines_per_replica} "
                     "machines: join them in one Ray cluster (`ray start --head` on one, "
                     "`ray start --address HEAD:6379` on the others) and start the engine on "
                     "the head; vLLM then runs its stages through Ray.")
        return line

    def check_deployable(self) -> None:
        """One TunerError for a plan whose export would not run as predicted: quantized
        weights that need a checkpoint nobody named, or one of other bits."""
        if not self.needs_checkpoint or self.serves_quantized_checkpoint:
            return
        bits = self.config.weight_bits
        why = (f"{bits}-bit weights on {self.gpu.name} need a {bits}-bit (AWQ/GPTQ) checkpoint "
               f"of {self.model.name} (the engine cannot quantize them online)")
        if not self.quantized_model:
            raise TunerError(f"{why}; pass --quantized-model ID.")
        raise TunerError(f"{why}; --quantized-model {self.quantized_model} holds "
                         f"{self._checkpoint_width()}: pass a {bits}-bit one.")

    def kv_capacity(self) -> tuple[int, str]:
        """(KV capacity in tokens per replica, where the figure comes from)."""
        if self.kv_capacity_tokens is not None:
            return self.kv_capacity_tokens, "memory plan"
        return (plan_memory(self.model, self.gpu, self.config).kv_capacity_tokens,
                "tuner's memory-plan estimate")


@dataclass(frozen=True)
class RenderOptions:
    """Everything an export writes besides the deployment (each format reads what it uses)."""

    header: str = ""
    metrics: dict | None = None
    memory: dict | None = None
    extra: dict | None = None
    input_path: str = "INPUT.jsonl"
    output_path: str = "OUTPUT.jsonl"
    served_model_name: str | None = None


# ---- arguments from the field metadata ------------------------------------------------------
def mapped_args(config: ServingConfig, engine: str) -> dict[str, Any]:
    """{argument: value} of every field ``engine`` ("vllm" or "sglang") has an argument for,
    per the field's :class:`tuner.core.config.EngineArg` (derived values are the field's own;
    the exporter replaces them)."""
    args: dict[str, Any] = {}
    for name, knob in KNOBS.items():
        arg = getattr(knob, engine)
        value = getattr(config, name)
        if arg is None or (arg.omit_default and value == DEFAULTS.get(name)):
            continue
        if arg.values is not None:
            value = arg.values.get(value)
        if value is not None:
            args[arg.name] = value
    return args


def direct_options(engine: str) -> dict[str, str]:
    """{dashed option: field} of the arguments that are a field's value as is (they parse back
    1:1 and override the ``# tuner-config:`` line, so a hand edit wins)."""
    out = {}
    for name, knob in KNOBS.items():
        arg = getattr(knob, engine)
        if arg is not None and arg.direct:
            out[arg.name.replace("_", "-")] = name
    return out


def in_order(args: dict[str, Any], order: Iterable[str]) -> dict[str, Any]:
    """``args`` in the order the file lists them; arguments ``order`` lacks (a knob added since)
    go last rather than missing."""
    order = list(order)
    return {k: args[k] for k in order if k in args} | {k: v for k, v in args.items()
                                                       if k not in order}


# ---- notes on what an engine lacks ------------------------------------------------------------
#: When each note applies. Each engine words its notes (a table key -> text, in the order its
#: file lists them); a text is a template over ``c`` (the config), ``gpu``, ``model``, ``mml``
#: (max_model_len) and ``howto`` (the ordering in words), or a function of the deployment.
WHEN: dict[str, Callable[[Deployment], bool]] = {
    "model_id": lambda d: not (d.model.checkpoint or d.model.hf_id),
    "prefill_budget": lambda d: prefill_budget_refusal(d.config, d.max_model_len) is not None,
    "kv_bits_4": lambda d: d.config.kv_bits == 4,
    # an FP8 KV cache on a GPU where vLLM's FlashAttention has none (another backend runs it)
    "kv_bits_8": lambda d: fp8_kv_other_backend(d),
    "weight_bits_8": lambda d: d.config.weight_bits == 8 and not d.gpu.fp8_tflops,
    # ... unless the model's own checkpoint is 4-bit (gpt-oss's MXFP4): it is served as is
    "weight_bits_4": lambda d: d.config.weight_bits == 4 and d.model.checkpoint_bits != 4,
    "kv_offload": lambda d: d.config.kv_offload_layers > 0,
    "attention_on_cpu": lambda d: d.config.attention_on_cpu,
    # the CPU threads set the CPU attention's threads, and only priced with it
    "cpu_threads": lambda d: _threads_given(d) and _threads_priced(d),
    "cpu_threads_unused": lambda d: _threads_given(d) and not _threads_priced(d),
    "eviction_free": lambda d: d.config.eviction_free,
    "ordering": lambda d: d.config.ordering != "fcfs",
    # SGLang: orders it has no schedule policy for, and the one its policy only approximates
    "ordering_no_policy": lambda d: (d.config.engine == "vllm"
                                     and d.config.ordering not in SGLANG_SCHEDULE_POLICY),
    "ordering_blend": lambda d: d.config.engine == "vllm" and d.config.ordering == "blend",
    # an SGLang-simulated plan: its queue takes the requests in the order they are submitted
    "ordering_submit": lambda d: d.config.engine == "sglang" and d.config.ordering != "fcfs",
    # a mixture-of-experts model over dp > 1 replicas: the prediction splits its experts over
    # all tp x dp GPUs, as one vLLM engine with --data-parallel-size does; independent
    # engines (SGLang's --dp-size without EP, run-batch replicas, Ray Data) each hold all
    "moe_dp": lambda d: d.one_engine,
    # ... except under vLLM V0, whose replicas are such independent engines, sized and priced so
    "moe_replicas": lambda d: d.moe_replicas_alone,
}


def _threads_given(dep: Deployment) -> bool:
    return dep.config.cpu_threads_intra > 0 or dep.config.cpu_threads_inter > 0


def _threads_priced(dep: Deployment) -> bool:
    from tuner.core.engines import cpu_threads_priced

    return cpu_threads_priced(dep.config.attention_on_cpu, dep.config.kv_offload_layers)


#: GPU architectures (GPU.architecture) where vLLM's FlashAttention takes an FP8 KV cache:
#: FA3 on sm_90 and FA4 on sm_100 (vllm/v1/attention/backends/fa_utils.py,
#: flash_attn_supports_kv_cache_dtype, read in vLLM 0.32); Blackwell's sm_120 parts are not
#: sm_100 (tuner.core.engine_defaults.SM120_GPUS)
FP8_KV_FLASH_ATTENTION = ("hopper", "blackwell")


def fp8_kv_flash_attention(gpu: GPU) -> bool | None:
    """Whether vLLM's FlashAttention serves an FP8 KV cache on `gpu` (elsewhere vLLM picks
    another backend, FlashInfer); None where the catalog does not say the architecture."""
    from tuner.core.engine_defaults import SM120_GPUS

    if gpu.architecture is None:
        return None
    return gpu.architecture in FP8_KV_FLASH_ATTENTION and gpu.name not in SM120_GPUS


#: the first vLLM release with the online-quantization shorthands (`--quantization
#: fp8_per_tensor`, vllm-project/vllm#38138): the 0.20.0 wheel's
#: vllm/model_executor/layers/quantization/__init__.py lists it, 0.19.1's does not;
#: later releases refuse online `fp8` (0.32's Fp8Config: "The `fp8` quantization method no
#: longer supports online quantization. Please use `--quantization fp8_per_tensor`"); before
#: it `fp8` is the online method
ONLINE_FP8_SHORTHAND_SINCE = (0, 20, 0)


def online_fp8_method(engine_version: str | None, *, v0: bool = False) -> str:
    """vLLM's --quantization value that quantizes a 16-bit checkpoint to FP8 as it loads, in
    release `engine_version` (None: the newest; `v0`: a V0 engine, 0.5 - 0.7): per-tensor FP8,
    weight-only through Marlin on GPUs without FP8 tensor cores, in both spellings."""
    from tuner.core.engines import parse_version

    version = parse_version(engine_version)
    if v0 or (version is not None and version < ONLINE_FP8_SHORTHAND_SINCE):
        return "fp8"
    return "fp8_per_tensor"


def fp8_kv_other_backend(dep: Deployment) -> bool:
    """An FP8 KV cache that vLLM's FlashAttention does not serve on the plan's GPU (an MLA
    model's cache goes to vLLM's MLA backends instead, priced as such)."""
    return (dep.config.kv_bits == 8 and not getattr(dep.model, "is_mla", False)
            and fp8_kv_flash_attention(dep.gpu) is False)


def precision_notes(dep: Deployment, engine: str = "vllm") -> list[str]:
    """What a plan below 16 bits needs that its prediction assumes, and what the prediction
    leaves out (tuner simulate prints them): the checkpoint its weights need, or how the
    engine quantizes them online; the FP8 KV cache's attention backend and scales."""
    c, model = dep.config, dep.model
    name = {"sglang": "SGLang"}.get(engine, "vLLM")
    out = []
    if c.weight_bits < 16 and c.weight_bits != model.checkpoint_bits:
        if dep.needs_checkpoint:
            out.append(f"{c.weight_bits}-bit weights: no engine quantizes {model.name} to "
                       f"{c.weight_bits} bits as it loads it; this prediction assumes a "
                       f"{c.weight_bits}-bit AWQ/GPTQ checkpoint of it served as the model "
                       "(tuner search / export --quantized-model ID). Output quality is not "
                       "simulated.")
        else:
            method = (online_fp8_method(dep.engine_version,
                                        v0=dep.num_scheduler_steps is not None)
                      if engine == "vllm" else "fp8")
            how = ("W8A8 on its FP8 tensor cores" if dep.gpu.fp8_tflops else
                   f"weight-only FP8 through Marlin, W8A16, as priced: {dep.gpu.name} has no "
                   "FP8 tensor cores")
            out.append(f"8-bit weights: {name} quantizes {model.load_id} to FP8 as it loads it "
                       f"(--quantization {method}; {how}): no checkpoint is needed. Output "
                       "quality is not simulated (per-tensor scales, no calibration).")
    if c.kv_bits == 8:
        text = ("FP8 KV cache: k/v scales of 1.0 unless the checkpoint carries calibrated "
                "ones; output quality is not simulated.")
        if engine == "vllm" and fp8_kv_other_backend(dep):
            text += (f" On {dep.gpu.name} vLLM's FlashAttention has no FP8 KV cache (sm_90 "
                     "and sm_100 only), so vLLM runs another attention backend (FlashInfer); "
                     "the predicted FP8-KV decode attention is an estimate for it.")
        if engine == "vllm":  # a sparse-MLA model's cache layout as its backend keeps it
            from tuner.core.memory import sparse_mla_cache_note

            if note := sparse_mla_cache_note(model, dep.gpu, c.kv_bits):
                text += " " + note
        out.append(text)
    return out


def separate_engines_misfit(dep: Deployment) -> str | None:
    """Why the plan's replicas cannot start as engines of their own (run-batch, Ray Data):
    for a mixture-of-experts model at dp > 1 each holds every expert on its TP GPUs, where the
    prediction (one data-parallel engine) split them over all TP x DP GPUs; the memory plan's
    reason where that does not fit, None where it does (or the replicas are sized as separate
    engines already). The one check behind the run-batch / Ray Data note, their refusal and
    the search skipping them."""
    if not dep.one_engine:
        return None
    alone = plan_memory(dep.model, dep.gpu,
                        dataclasses.replace(dep.config, dp=1, expert_parallel=False),
                        max_request_tokens=dep.max_model_len)
    return None if alone.fits else alone.reason


def moe_separate_engines_note(dep: Deployment) -> str:
    """The note of the `moe_dp` condition, for exports that run the replicas as separate
    engines: whether one replica holding every expert fits its GPUs at all."""
    c = dep.config
    misfit = separate_engines_misfit(dep)
    fit = ("it fits, with another KV capacity and makespan than predicted" if misfit is None
           else f"it does NOT fit ({misfit})")
    return (f"dp={c.dp} of a mixture-of-experts model: the prediction is one vLLM engine with "
            f"--data-parallel-size {c.dp} (its experts split over all {c.num_gpus} GPUs; the "
            f"`vllm` export, --format vllm, runs it so); here each of the {c.dp} replicas is its "
            f"own engine holding every expert on {plural(c.tp, 'GPU')}: {fit}.")


NoteText = str | Callable[[Deployment], str]


def notes_for(dep: Deployment, texts: dict[str, NoteText]) -> list[str]:
    """The notes of ``texts`` that apply to ``dep``, in the table's order."""
    c = dep.config
    fields = {"c": c, "gpu": dep.gpu, "model": dep.model, "mml": dep.max_model_len,
              "howto": ORDERING_HOWTO.get(c.ordering, c.ordering)}
    return [text(dep) if callable(text) else text.format(**fields)
            for key, text in texts.items() if WHEN[key](dep)]


def model_id_note(dep: Deployment, option: str) -> str:
    return (f"{option}: {dep.model.name!r} has no Hugging Face id in the catalog; replace it with "
            "the checkpoint's repo id or local path.")


def cpu_threads_note(dep: Deployment, lacks: str) -> str:
    """The CPU threads the prediction gave CPU decode attention (attention_on_cpu); ``lacks``:
    e.g. "vLLM has no engine argument". No OMP_NUM_THREADS advice: the engine has no CPU
    attention for them to run (vLLM's GPU workers set OMP_NUM_THREADS themselves)."""
    c = dep.config
    return (f"cpu_threads intra={c.cpu_threads_intra} inter={c.cpu_threads_inter}: the threads "
            f"the prediction gave CPU decode attention; {lacks} for CPU threads, and no CPU "
            "attention for them to run (see attention_on_cpu).")


def cpu_threads_unused_note(dep: Deployment) -> str:
    """CPU threads set on a plan without CPU attention: they changed nothing predicted."""
    c = dep.config
    return (f"cpu_threads intra={c.cpu_threads_intra} inter={c.cpu_threads_inter}: no effect on "
            "this plan (they set CPU decode attention's threads, which it does not use); "
            "nothing to set.")


# ---- the comment header ---------------------------------------------------------------------
def comment_lines(text: str) -> list[str]:
    return [f"# {line}".rstrip() for line in text.splitlines() if line.strip()]


def export_head(title: list[str], header: str, notes: list[str],
                config: ServingConfig) -> list[str]:
    """Title lines, the user's header and the notes as comments, then the ``# tuner-config:``
    line that restores the exact ServingConfig."""
    lines = list(title) + comment_lines(header)
    for note in notes:
        lines += comment_lines(f"NOTE: {note}")
    payload = json.dumps(config.to_dict(), sort_keys=True, separators=(",", ":"))
    return [*lines, f"{CONFIG_COMMENT_PREFIX} {payload}"]


def tuner_config_line(text: str) -> dict:
    """The JSON object of the ``# tuner-config:`` line ({} when there is none)."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(CONFIG_COMMENT_PREFIX):
            try:
                base = json.loads(line[len(CONFIG_COMMENT_PREFIX):])
            except json.JSONDecodeError as exc:
                raise TunerError(f"Unreadable '{CONFIG_COMMENT_PREFIX}' line ({exc}).") from None
            if not isinstance(base, dict):
                raise TunerError(f"'{CONFIG_COMMENT_PREFIX}' line must hold a JSON object.")
            return base
    return {}


def parsed_fields(text: str, options: dict[str, Any], engine: str) -> tuple[dict, bool]:
    """The fields of the ``# tuner-config:`` line in ``text``, with ``engine``'s options that map
    1:1 (dashed names) over them so a hand edit wins; and whether the line was there (without
    it the caller infers the rest)."""
    base = tuner_config_line(text)
    had_line = bool(base)
    for key, name in direct_options(engine).items():
        if options.get(key) is not None:
            base[name] = options[key]
    return base, had_line


def finish_config(base: dict, gpu: str | None, what: str) -> ServingConfig:
    """The ServingConfig of parsed fields ``base``; ``gpu`` overrides its GPU."""
    if gpu is not None:
        base["gpu"] = gpu
    if not base.get("gpu"):
        raise TunerError(f"{what} does not say which GPU it is for (no '{CONFIG_COMMENT_PREFIX}' "
                         "line); pass the GPU type.")
    try:
        return ServingConfig.from_dict(base)
    except TypeError as exc:
        raise TunerError(f"{what} does not describe a ServingConfig ({exc}).") from None


def weight_bits_from_quantization(value: Any) -> int | None:
    """Weight bits an engine's ``quantization`` names (None: unquantized)."""
    quant = str(value or "").lower()
    if quant.startswith(("awq", "gptq")):
        return 4
    return 8 if quant else None


# ---- command lines (vllm run-batch, SGLang) -------------------------------------------------
_CONTINUATION = " \\\n  "
_OPTION = re.compile(r"^--?[A-Za-z]")


def _scalar(value: str) -> Any:
    """A command-line value as YAML would type it ('16' -> 16, '0.9' -> 0.9, 'auto' -> 'auto')."""
    try:
        v = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else value


def _command_tokens(text: str, marker: str, what: str) -> list[str]:
    """Tokens after ``marker`` of the command in ``text`` (comments dropped, \\-continued lines
    joined)."""
    body = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        body.append(stripped[:-1] if stripped.endswith("\\") else stripped)
    try:
        tokens = shlex.split(" ".join(body))
    except ValueError as exc:
        raise TunerError(f"{what} is not a valid shell command line ({exc}).") from None
    if marker not in tokens:
        raise TunerError(f"{what} has no '{marker}' command.")
    return tokens[tokens.index(marker) + 1:]


def _parse_options(tokens: list[str], what: str) -> dict[str, Any]:
    """``--key value`` -> {key: value}; a bare ``--flag`` -> True; ``--no-flag`` -> {flag: False}.
    Keys are returned without the leading dashes."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not _OPTION.match(tok):
            raise TunerError(f"{what}: unexpected argument {tok!r}.")
        key, eq, val = tok.lstrip("-").partition("=")
        if eq:
            out[key] = _scalar(val)
            i += 1
        elif i + 1 < len(tokens) and not _OPTION.match(tokens[i + 1]):
            out[key] = _scalar(tokens[i + 1])
            i += 2
        elif key.startswith("no-"):
            out[key[3:]] = False
            i += 1
        else:
            out[key] = True
            i += 1
    return out


def _cli_tokens(options: list[tuple[str, Any]]) -> list[str]:
    """[(dashed name, value)] -> ['--name', 'value', ...]; True -> bare flag, False -> --no-name."""
    tokens = []
    for key, value in options:
        if value is True:
            tokens.append(f"--{key}")
        elif value is False:
            tokens.append(f"--no-{key}")
        else:
            tokens += [f"--{key}", shlex.quote(str(value))]
    return tokens


def read_command(text: str, marker: str, what: str, *,
                 positional: str | None = None) -> dict[str, Any]:
    """The options of the command after ``marker`` in ``text`` (see :func:`_parse_options`);
    `positional`: the key a leading positional argument is read as (``vllm serve MODEL``)."""
    tokens = _command_tokens(text, marker, what)
    if positional is not None and tokens and not _OPTION.match(tokens[0]):
        return {positional: _scalar(tokens[0])} | _parse_options(tokens[1:], what)
    return _parse_options(tokens, what)


def write_command(head: list[str], prog: str, options: list[tuple[str, Any]]) -> str:
    """Comment lines, then the command with one option (and its value) per line."""
    options = _cli_tokens(options)
    lines = list(head)
    parts, i = [], 0
    while i < len(options):
        if i + 1 < len(options) and not options[i + 1].startswith("--"):
            parts.append(f"{options[i]} {options[i + 1]}")
            i += 2
        else:
            parts.append(options[i])
            i += 1
    lines.append(_CONTINUATION.join([prog, *parts]))
    return "\n".join(lines) + "\n"


# ---- checking an export against the installed engine's own argument parser ------------------
#: The vLLM engine-argument check, run in the Python that has vLLM: every argument list is
#: parsed by ``EngineArgs.add_cli_args(FlexibleArgumentParser())`` and turned into EngineArgs.
#: EngineArgs resolves the model to a local folder under HF_HUB_OFFLINE (vLLM 0.8.5+:
#: get_model_path, a cache look-up that fails where the checkpoint was never downloaded): that
#: failure says nothing of the arguments, so the list is judged again with a stand-in local
#: folder for --model / --tokenizer, and the look-up's own message comes back apart
#: (TUNER-LOOKUP), never as a refusal.
_VLLM_CHECK = r"""
import json, os, sys, tempfile
from vllm.engine.arg_utils import EngineArgs
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser

class Refused(Exception):
    pass

def _error(message):
    raise Refused(message)

def _lookup_error(exc):
    # the model's download / cache look-up (huggingface_hub, ModelScope, the network), not
    # the arguments
    mod = type(exc).__module__ or ""
    return (mod.split(".")[0] in ("huggingface_hub", "modelscope", "requests", "urllib3",
                                  "httpx", "httpcore") or isinstance(exc, OSError))

def _line(exc):
    return " ".join(str(exc).split()) or type(exc).__name__

stand_in = tempfile.mkdtemp(prefix="tuner-model-")
out, lookups = [], []
for argv in json.loads(sys.stdin.read()):
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    parser.error = _error
    lookup = None
    try:
        ns = parser.parse_args(argv)
        try:
            EngineArgs.from_cli_args(ns)
        except Exception as exc:
            if not _lookup_error(exc):
                raise
            lookup = f"{type(exc).__name__}: {_line(exc).split('. ')[0]}"  # not its advice
            for key in ("model", "tokenizer"):
                if getattr(ns, key, None) and not os.path.exists(str(getattr(ns, key))):
                    setattr(ns, key, stand_in)
            EngineArgs.from_cli_args(ns)
        out.append(None)
    except (Refused, SystemExit, ValueError, TypeError) as exc:
        out.append(_line(exc))
    lookups.append(lookup)
os.rmdir(stand_in)
import vllm
print("TUNER-VLLM-VERSION " + str(getattr(vllm, "__version__", "") or "unknown"))
print("TUNER-LOOKUP " + json.dumps(lookups))
print("TUNER-CHECK " + json.dumps(out))
"""


def engine_python(package: str = "vllm") -> str | None:
    """The Python that has ``package`` installed, found as tuner's runners find it:
    ``TUNER_VLLM_PYTHON``, then ``.venv-vllm/bin/python`` in the repository or the current
    folder, then this interpreter; None when none has it."""
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path

    cands = []
    env = os.environ.get(f"TUNER_{package.upper()}_PYTHON")
    if env:
        cands.append(env)
    for base in (Path(__file__).resolve().parents[2], Path.cwd()):
        p = base / f".venv-{package}" / "bin" / "python"
        if p.is_file() and str(p) not in cands:
            cands.append(str(p))
    code = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({package!r}) else 3)"
    for py in cands:
        try:
            if subprocess.run([py, "-c", code], capture_output=True, timeout=60).returncode == 0:
                return py
        except (OSError, subprocess.TimeoutExpired):
            continue
    return sys.executable if importlib.util.find_spec(package) is not None else None


def engine_tokens(args: dict[str, Any]) -> list[str]:
    """vLLM engine args (snake_case or dashed) as the argv ``vllm serve`` would take."""
    argv: list[str] = []
    for k, v in args.items():
        key = k.replace("_", "-")
        if v is True:
            argv.append(f"--{key}")
        elif v is False:
            argv.append(f"--no-{key}")
        elif isinstance(v, dict):  # a dict-typed option (--limit-mm-per-prompt) takes JSON
            argv += [f"--{key}", json.dumps(v)]
        else:
            argv += [f"--{key}", str(v)]
    return argv


@dataclass(frozen=True)
class VllmParserCheck:
    """What :func:`vllm_parser_check` ran: vLLM's verdict on each argument list (None:
    accepted), the vLLM release whose parser judged them and the Python that has it.
    ``model_lookups``: per list, why EngineArgs could not resolve its model to a local
    folder (HF_HUB_OFFLINE and the checkpoint not in the cache; None: it could, or it did not
    look), the arguments then being judged with a stand-in folder."""
    verdicts: list[str | None]
    vllm_version: str
    python: str
    model_lookups: tuple[str | None, ...] = ()

    @property
    def model_lookup(self) -> str | None:
        """The first model look-up that failed (one model per export), or None."""
        return next((m for m in self.model_lookups if m), None)


def check_vllm_argv(argvs: list[list[str]], python: str | None = None,
                    timeout_s: float = 300.0) -> list[str | None] | None:
    """Each argument list parsed by the installed vLLM's own parser (in ``python``, default
    :func:`engine_python`): None where it is accepted, else vLLM's one-line reason. Returns
    None when vLLM is not installed anywhere tuner looks."""
    check = vllm_parser_check(argvs, python, timeout_s)
    return None if check is None else check.verdicts


def vllm_parser_check(argvs: list[list[str]], python: str | None = None,
                      timeout_s: float = 300.0) -> VllmParserCheck | None:
    """:func:`check_vllm_argv`, saying also which vLLM release judged (its parser's options
    and types are that release's, whatever release the plan is for)."""
    import subprocess

    python = python or engine_python("vllm")
    if python is None:
        return None
    try:
        r = subprocess.run([python, "-c", _VLLM_CHECK], input=json.dumps(argvs),
                           capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TunerError(f"Could not run vLLM's argument check with {python} ({exc}).") from None
    version, lookups = "unknown", ()
    for line in r.stdout.splitlines():
        if line.startswith("TUNER-VLLM-VERSION "):
            version = line[len("TUNER-VLLM-VERSION "):].strip() or "unknown"
        if line.startswith("TUNER-LOOKUP "):
            lookups = tuple(json.loads(line[len("TUNER-LOOKUP "):]))
        if line.startswith("TUNER-CHECK "):
            return VllmParserCheck(json.loads(line[len("TUNER-CHECK "):]), version, python,
                                   lookups)
    tail = " ".join((r.stderr or "").strip().splitlines()[-1:]) or f"exit status {r.returncode}"
    raise TunerError(f"vLLM's argument check failed in {python}: {tail}")
