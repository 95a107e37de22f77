"""GPU and model catalogs: plain dataclasses loaded from YAML data files shipped in tuner/data."""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
from dataclasses import MISSING, asdict, dataclass, fields, replace
from functools import cache
from pathlib import Path
from typing import NamedTuple

from tuner.core.errors import TunerError, close_matches_hint
from tuner.core.io import load_shipped_yaml, read_shipped
from tuner.core.pricing import MAX_PRICE_USD_PER_H, Billing, reprice

GIB = 1024**3
# GPU architectures a GPU may state (`GPU.architecture`): the measured kernel tables of one GPU
# price the others of its architecture (predictors.aic_transfer)
ARCHITECTURES = ("ampere", "ada", "hopper", "blackwell")


class Figure(NamedTuple):
    """The range one GPU figure must lie in (GPU.__post_init__). `low` is exclusive when 0
    (> 0), else inclusive; `example` and the two hints turn a value 1000x off (a unit typed
    wrong) into an error that names the unit the file should have used."""

    low: float
    high: float
    unit: str
    whole: bool = False  # a whole number (checked inclusively)
    optional: bool = False  # may be null
    example: str = ""  # "2039 for an A100-80G"
    too_low: str = ""  # the unit a too-small value was probably given in ("TB/s")
    too_high: str = ""  # ... a too-large one ("MB/s")


# plausible ranges of a GPU's figures: wide enough for a CPU validation device
# (runners/cpu_device.py: ~0.25 GiB; 0.08 TFLOP/s and 10 GB/s per core), narrow enough that a
# figure typed in the neighbouring unit (TB/s for GB/s, PFLOP/s, MiB) falls outside
GPU_FIELD_RANGES: dict[str, Figure] = {
    "memory_gib": Figure(0, 1024, "GiB", example="79.25 for an A100-80G", too_high="MiB"),
    "bf16_tflops": Figure(0, 100_000, "TFLOP/s", example="312 for an A100-80G",
                          too_high="GFLOP/s"),
    "fp32_tflops": Figure(0, 100_000, "TFLOP/s", example="19.5 for an A100-80G",
                          too_high="GFLOP/s"),
    "fp8_tflops": Figure(0, 100_000, "TFLOP/s", optional=True, example="1979 for an H100",
                         too_high="GFLOP/s"),
    "int8_tops": Figure(0, 100_000, "TOP/s", optional=True, example="624 for an A100-80G",
                        too_high="GOP/s"),
    # the slowest real device memory is ~100 GB/s; a 1-core CPU device states 10
    "hbm_gbps": Figure(10, 100_000, "GB/s", example="2039 for an A100-80G", too_low="TB/s",
                       too_high="MB/s"),
    "pcie_gen": Figure(1, 7, "", whole=True),
    # PCIe 3 x1 moves ~1 GB/s; a PCIe 4 x16 host link ~25
    "host_link_gbps": Figure(1, 10_000, "GB/s", example="25 for an A100-80G (PCIe 4)",
                             too_low="TB/s", too_high="MB/s"),
    "nvlink_gbps": Figure(1, 100_000, "GB/s", optional=True, example="300 for an A100-80G",
                          too_low="TB/s", too_high="MB/s"),
    # one 400 Gb/s NIC per GPU moves 50 GB/s; the fastest NICs shipping (800 Gb/s) 100
    "scale_out_gbps": Figure(0, 1_000, "GB/s", optional=True,
                             example="50 for an H100 (one 400 Gb/s NIC per GPU)",
                             too_high="Mb/s"),
    "host_ram_gib": Figure(0, 1_048_576, "GiB", example="225 for an A100-80G"),
    "cpu_cores": Figure(1, 100_000, "cores", whole=True),
    "tdp_w": Figure(0, 100_000, "W", optional=True, example="400 for an A100-80G"),
    "price_usd_per_h": Figure(0, MAX_PRICE_USD_PER_H, "$/GPU-h"),
    "vasuki_usd_per_fp32_gflop_per_w": Figure(0, 1e9, "$ per FP32 GFLOP/s per W",
                                              optional=True),
}

# peak FLOP (or OP) per byte of device memory traffic: GPUs lie between ~10 (FP32) and ~850
# (FP8), a CPU device at ~8; a rate or a bandwidth 1000x off lands far outside, which the
# per-figure ranges alone cannot see (0.3 TFLOP/s is a small CPU, or an A100 in PFLOP/s)
FLOP_PER_BYTE_RANGE = (1.0, 10_000.0)
RATE_FIELDS = ("bf16_tflops", "fp32_tflops", "fp8_tflops", "int8_tops")

#: what a GPU file's required figures mean, with their units: a GPU missing one is refused
#: with these (host_ram_gib and cpu_cores have no default: they set what offloading can hold
#: and how fast CPU attention runs, and a guess would move those predictions silently)
GPU_FIELD_HELP: dict[str, str] = {
    "memory_gib": "GPU memory in GiB, e.g. 79.25 for an A100-80G",
    "bf16_tflops": "dense BF16 tensor TFLOP/s, e.g. 312",
    "fp32_tflops": "FP32 TFLOP/s, e.g. 19.5",
    "hbm_gbps": "memory bandwidth in GB/s, e.g. 2039",
    "pcie_gen": "PCIe generation, e.g. 4",
    "host_link_gbps": "one-way host-GPU copy bandwidth in GB/s, e.g. 25 for PCIe 4",
    "host_ram_gib": "host RAM per GPU in GiB, e.g. 225; no default: it caps offloaded "
                    "weights and KV",
    "cpu_cores": "CPU cores per GPU, e.g. 30; no default: CPU attention runs on them",
    "price_usd_per_h": "on-demand price in $/GPU-h, e.g. 1.29",
}

#: a new GPU of a --gpu-file may leave these out: bookkeeping no prediction reads ("{path}":
#: the file); the shipped catalog states them all
GPU_FILE_DEFAULTS: dict[str, object] = {
    "price_source": "given in --gpu-file {path}",
    "price_date": "",  # not given: `tuner gpus` shows "—"
    "tdp_w": None,  # not given: read by no prediction
    "scale_out_source": "",  # not given: GPU.scale_out_note says where the figure came from
}

#: scale-out network of a machine whose GPU states no scale_out_gbps (a --gpu-file GPU):
#: one 100 Gb/s Ethernet port per machine, shared by its GPUs: an ESTIMATE, the common
#: network of cloud instances without a GPU fabric (AWS g5.48xlarge / g6.48xlarge: 100 Gbps)
FALLBACK_SCALE_OUT_GBPS_PER_MACHINE = 12.5


def _check_gpu_figure(gpu: str, name: str, value, fig: Figure) -> None:
    """One TunerError naming the GPU, field and value unless `value` lies in its range: "must
    be" for a value of the wrong kind, "is implausible" (with the unit, an example and the
    unit it was probably given in) for a number out of range."""
    if value is None and fig.optional:
        return
    unit_text = f" {fig.unit}" if fig.unit else ""
    null = " (or null)" if fig.optional else ""
    if fig.whole:
        if not (isinstance(value, int) and not isinstance(value, bool)
                and fig.low <= value <= fig.high):
            raise TunerError(f"GPU {gpu}: {name} must be a whole number from {fig.low:g} to "
                             f"{fig.high:g}{unit_text}{null}, got {value!r}.")
        return
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and value > 0):
        raise TunerError(f"GPU {gpu}: {name} must be a positive finite number{unit_text}"
                         f"{null}, got {value!r}.")
    low_ok = fig.low < value if fig.low == 0 else fig.low <= value
    if low_ok and value <= fig.high:
        return
    span = f"up to {fig.high:g}" if fig.low == 0 else f"from {fig.low:g} to {fig.high:g}"
    example = f", e.g. {fig.example}" if fig.example else ""
    typo = fig.too_high if low_ok else fig.too_low
    hint = f" (did you give {typo}?)" if typo else ""
    raise TunerError(f"GPU {gpu}: {name} {value!r} is implausible: {fig.unit or 'a number'}, "
                     f"{span}{example}{hint}.")


def _check_flop_per_byte(gpu: GPU) -> None:
    """One TunerError where a peak rate and the memory bandwidth are each in range but their
    ratio is not: one of them is in the wrong unit (TB/s, PFLOP/s, GFLOP/s)."""
    low, high = FLOP_PER_BYTE_RANGE
    for name in RATE_FIELDS:
        rate = getattr(gpu, name)
        if rate is None:
            continue
        ratio = rate * 1e12 / (gpu.hbm_gbps * 1e9)
        if low <= ratio <= high:
            continue
        unit = GPU_FIELD_RANGES[name].unit
        what = "OP" if unit == "TOP/s" else "FLOP"
        typo = (f"hbm_gbps in TB/s or {name} in G{unit[1:]}" if ratio > high
                else f"{name} in P{unit[1:]} or hbm_gbps in MB/s")
        shown = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.2g}"
        raise TunerError(
            f"GPU {gpu.name}: {name} {rate:g} {unit} over hbm_gbps {gpu.hbm_gbps:g} GB/s is "
            f"{shown} {what} per byte of memory traffic, implausible (devices do "
            f"{low:g} to {high:,g}; an A100-80G 153 at BF16): did you give {typo}?")


@dataclass(frozen=True)
class GPU:
    """Spec-sheet figures of one GPU type plus its on-demand price (with source and date)."""

    name: str
    memory_gib: float
    bf16_tflops: float  # dense (no sparsity)
    fp32_tflops: float
    hbm_gbps: float  # GB/s (10^9 bytes/s)
    pcie_gen: int
    host_link_gbps: float  # realistic one-direction host<->device copy bandwidth, GB/s
    host_ram_gib: float  # typical host RAM per GPU in cloud offerings
    cpu_cores: int  # typical vCPUs per GPU in cloud offerings
    tdp_w: float | None  # None: not given (a --gpu-file GPU; no prediction reads it)
    price_usd_per_h: float
    price_source: str
    price_date: str
    fp8_tflops: float | None = None  # dense; None where the GPU has no FP8 tensor cores
    int8_tops: float | None = None  # dense
    nvlink_gbps: float | None = None  # per-GPU NVLink bandwidth (one direction), None = PCIe only
    # NVLink joins every pair of a machine's GPUs (an NVSwitch board); False where bridges join
    # pairs only (A40): vLLM and SGLang then keep their custom all-reduce to 2 GPUs
    nvlink_all_pairs: bool = True
    # the NVLink column is the sum of direct links, one to each other GPU of the machine, not a
    # switch port (AMD Infinity Fabric: an 8-GPU MI300X board joins every pair by its own
    # 64 GB/s-one-way link): a group of k GPUs exchanges over k - 1 of them
    nvlink_mesh: bool = False
    # per-GPU scale-out network bandwidth between machines (InfiniBand / RoCE / EFA NICs), ONE
    # direction, GB/s: what an expert group spanning machines gathers over; None = not stated
    # (FALLBACK_SCALE_OUT_GBPS_PER_MACHINE, an estimate); scale_out_source says where it
    # comes from ("estimate: ..." where assumed)
    scale_out_gbps: float | None = None
    scale_out_source: str = ""
    vasuki_usd_per_fp32_gflop_per_w: float | None = None  # Vasuki Table 1 (A10, A40 only)
    notes: str = ""
    # --provider: the provider's instances and billing rule (tuner.core.pricing); None = the
    # per-GPU catalog price, billed per GPU-second
    billing: Billing | None = None
    # GPUs in one machine (server) of this type: tensor parallelism stays inside one, data-
    # parallel replicas spread over several (tuner.core.pricing.place); with --provider, the
    # provider's largest instance of this GPU
    gpus_per_machine: int = 8
    # NVIDIA architecture (ARCHITECTURES): a GPU without measured kernel tables borrows those of
    # the measured GPU of its architecture (transferred by spec-sheet ratios); None = not stated
    # (no tables: the spec-sheet roofline)
    architecture: str | None = None
    # CUDA compute capability, major.minor (9.0 H100, 10.0 B200, 12.0 RTX PRO 6000): what an
    # engine picks its kernels by (SGLang's attention backend and KV page size,
    # tuner.core.sglang.sglang_page_size); None = not stated (AMD GPUs; a --gpu-file GPU may)
    compute_capability: float | None = None
    # other spellings --gpu accepts (nvidia-smi's device name, vendor SKU names; gpu_key)
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        al = self.aliases
        if isinstance(al, str) or not all(isinstance(a, str) and a.strip() for a in al or ()):
            raise TunerError(f"GPU {self.name}: aliases must be a list of names, got {al!r}.")
        object.__setattr__(self, "aliases", tuple(al or ()))
        if isinstance(self.billing, dict):  # a study's stored specs (dataclasses.asdict form)
            object.__setattr__(self, "billing", Billing.from_dict(self.billing))
        arch = self.architecture
        if arch is not None:
            if not isinstance(arch, str) or arch.strip().lower() not in ARCHITECTURES:
                raise TunerError(f"GPU {self.name}: architecture must be one of "
                                 f"{', '.join(ARCHITECTURES)} (or left out), got {arch!r}.")
            object.__setattr__(self, "architecture", arch.strip().lower())
        cc = self.compute_capability
        if cc is not None and (isinstance(cc, bool) or not isinstance(cc, int | float)
                               or not 1.0 <= cc < 20.0):
            raise TunerError(f"GPU {self.name}: compute_capability must be the CUDA compute "
                             f"capability as major.minor (e.g. 9.0, 10.0) or left out, got "
                             f"{cc!r}.")
        # a zero, negative, non-finite or absurd spec or price would divide by zero, turn
        # every $ into nan or make a plan look 1000x faster far from where it was typed
        # (--price, --gpu-file): each figure positive, finite and within a plausible range
        for name, fig in GPU_FIELD_RANGES.items():
            _check_gpu_figure(self.name, name, getattr(self, name), fig)
        _check_flop_per_byte(self)
        if not isinstance(self.nvlink_all_pairs, bool):
            raise TunerError(f"GPU {self.name}: nvlink_all_pairs must be true or false, got "
                             f"{self.nvlink_all_pairs!r}.")
        if not isinstance(self.nvlink_mesh, bool):
            raise TunerError(f"GPU {self.name}: nvlink_mesh must be true or false, got "
                             f"{self.nvlink_mesh!r}.")
        if not isinstance(self.scale_out_source, str):
            raise TunerError(f"GPU {self.name}: scale_out_source must be text (where "
                             f"scale_out_gbps comes from), got {self.scale_out_source!r}.")
        per = self.gpus_per_machine
        if isinstance(per, bool) or not isinstance(per, int) or not 1 <= per <= 64:
            raise TunerError(f"GPU {self.name}: gpus_per_machine must be a whole number of GPUs "
                             f"from 1 to 64, got {per!r}.")

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    @property
    def peak_flops(self) -> float:
        return self.bf16_tflops * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * 1e9

    @property
    def host_link_bytes_per_s(self) -> float:
        return self.host_link_gbps * 1e9

    @property
    def interconnect_bytes_per_s(self) -> float:
        """Bandwidth for tensor-parallel all-reduce: NVLink when present, else the PCIe link."""
        return (self.nvlink_gbps or self.host_link_gbps) * 1e9

    @property
    def scale_out_bytes_per_s(self) -> float:
        """Per-GPU scale-out network bandwidth (one direction) between machines: the catalog's
        figure, else FALLBACK_SCALE_OUT_GBPS_PER_MACHINE shared by the machine's GPUs."""
        if self.scale_out_gbps is not None:
            return self.scale_out_gbps * 1e9
        return FALLBACK_SCALE_OUT_GBPS_PER_MACHINE * 1e9 / self.gpus_per_machine

    @property
    def scale_out_note(self) -> str:
        """The scale-out figure and, briefly, where it comes from (provenance lines; the whole
        source is the catalog's scale_out_source)."""
        gbps = self.scale_out_bytes_per_s / 1e9
        src = self.scale_out_source.strip()
        if self.scale_out_gbps is None:
            return (f"{gbps:.3g} GB/s per GPU, an estimate (no scale_out_gbps given: "
                    f"{FALLBACK_SCALE_OUT_GBPS_PER_MACHINE * 8:g} Gb/s per machine of "
                    f"{self.gpus_per_machine} GPUs)")
        if not src:
            return f"{gbps:.3g} GB/s per GPU (scale_out_gbps as given)"
        if src.lower().startswith("estimate"):
            return f"{gbps:.3g} GB/s per GPU, an estimate (catalog scale_out_source)"
        return f"{gbps:.3g} GB/s per GPU ({src.split(':')[0]})"


#: how many weights share one scale (and zero) in an AWQ / GPTQ / compressed-tensors group
#: where the config names no group_size: 128, the default of every common 4-bit recipe
DEFAULT_QUANT_GROUP = 128


def scale_bytes_per_weight(bits: int, scheme: str = "") -> float:
    """Bytes of quantization scales (and zero points) per weight at `bits`, for a checkpoint
    quantized as `scheme` (ModelSpec.checkpoint_quantization; "" = vLLM quantizing a 16-bit
    checkpoint at load, or an unnamed 4-bit checkpoint):

    - 16-bit: none. FP8 / INT8 per tensor or per output channel (vLLM's online FP8, plain
      `fp8`, FBGEMM, ModelOpt FP8, W8A8): ~0 (one scale per tensor or per row of thousands).
    - FP8 in AxB blocks (DeepSeek-V3's 128x128): one FP32 scale per block, 4 / (A*B).
    - AWQ / GPTQ / AutoRound at group g: an FP16 scale and a zero packed at `bits` per group,
      (2 + bits/8) / g (2.5 / 128 at 4 bits); compressed-tensors groups are symmetric (scale
      only), 2 / g. An unnamed 4-bit checkpoint is taken as AWQ / GPTQ at group 128.
    - MXFP4: one E8M0 byte per 32 weights; NVFP4: one FP8 byte per 16.
    - bitsandbytes 4-bit: an FP32 absmax per 64 weights (double quantization: 1 byte per 64
      plus an FP32 per 256 blocks)."""
    if bits >= 16:
        return 0.0
    s = scheme.lower()
    blocks = re.search(r"blocks (\d+)x(\d+)", s)
    if blocks:
        return 4.0 / (int(blocks[1]) * int(blocks[2]))
    if "nvfp4" in s:
        return 1.0 / 16.0
    if "mxfp4" in s:
        return 1.0 / 32.0
    if s.startswith(("bitsandbytes", "bnb")):
        if bits != 4:
            return 0.0  # LLM.int8: one scale per row
        return 1.0 / 64 + 4.0 / (64 * 256) if "double quant" in s else 4.0 / 64
    grouped = re.search(r"group (-?\d+)", s)
    group = int(grouped[1]) if grouped else DEFAULT_QUANT_GROUP
    if group <= 0:
        return 0.0  # one scale per output channel
    if s.startswith("compressed-tensors"):
        return 2.0 / group if grouped else 0.0  # per channel unless a group is named
    if bits == 4 or re.match(r"(awq|gptq|auto.round)", s):
        return (2.0 + bits / 8.0) / group
    return 0.0


#: how checkpoint_quantization says what share of the matmul weights the checkpoint keeps at
#: 16 bits (its modules_to_not_convert / ignore list: Meta's FBGEMM FP8 405B keeps every
#: attention projection and the first and last MLPs in BF16)
_UNCONVERTED = re.compile(r"(\d+(?:\.\d+)?) % of matmul weights at 16 bits")


#: how with_unconverted says the 16-bit share of each kind of projection: of the attention
#: projections (Q, K, V, O) and of the dense MLPs' (gate, up, down; routed experts are never
#: counted), which run at different GEMM shapes
_UNCONVERTED_SPLIT = re.compile(
    r"attention projections (\d+(?:\.\d+)?) %, dense MLPs (\d+(?:\.\d+)?) % at 16 bits")


def unconverted_share(scheme: str) -> float:
    """The share (0..1) of the matmul weights a checkpoint quantized as `scheme` keeps at 16
    bits (0 where the scheme says none)."""
    m = _UNCONVERTED.search(scheme)
    return float(m[1]) / 100.0 if m else 0.0


def unconverted_split(scheme: str) -> tuple[float, float]:
    """(attention, dense MLP): the share (0..1) of each kind of projection's weights that a
    checkpoint quantized as `scheme` keeps at 16 bits, which the timing models run at the
    16-bit tensor rate. Where `scheme` says only the total (unconverted_share), that total
    for both; (0, 0) where it says none."""
    m = _UNCONVERTED_SPLIT.search(scheme)
    if m:
        return float(m[1]) / 100.0, float(m[2]) / 100.0
    share = unconverted_share(scheme)
    return share, share


def weight_bytes_per_param(bits: int, scheme: str = "") -> float:
    """Bytes one matmul weight takes in HBM at `bits` for a checkpoint quantized as `scheme`,
    its share of the scales included: what the memory plan holds and what a kernel reads per
    weight, so memory and timing use this one figure (ModelSpec.weight_bytes_per_param picks
    the scheme; the predictors' timing models call that, or this with no scheme). Weights the
    checkpoint leaves at 16 bits (unconverted_share) count 2 bytes in the mean; the timing
    models run their GEMMs at the 16-bit tensor rate (unconverted_split)."""
    quantized = bits / 8.0 + scale_bytes_per_weight(bits, scheme)
    if bits >= 16:
        return quantized
    share = unconverted_share(scheme)
    return (1.0 - share) * quantized + share * 2.0


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer: Llama/Mistral/Qwen-style (GQA, gated MLP), plus
    mixture-of-experts FFNs (Mixtral, Qwen3-MoE, gpt-oss, DeepSeek), MLA attention (DeepSeek)
    and sliding-window layers (Gemma-3, gpt-oss). Every extra field defaults to 0 = "absent",
    so a dense GQA model is the seven shape numbers alone.

    Parameter counts cover the matmul weights, embeddings, LM head and RMSNorm weights; biases
    (Qwen2.5 QKV, gpt-oss attention/experts), attention sinks and per-head q/k norms are left
    out (each < 0.1 % of the total). `intermediate_size` is the dense FFN width: every layer's
    for a dense model, the `first_k_dense_layers` dense layers' for an MoE model (leading for
    DeepSeek; interleaved for Qwen-MoE and Llama-4, where only their count matters). A
    non-gated MLP (StarCoder2, GPT-NeoX, Phi-2, Nemotron: up and down, no gate) of width W is
    stored at the gated width of equal parameters, FLOPs and bytes, 2W/3, so every predictor's
    3 x hidden x intermediate holds for it too (model_from_config_dict).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int  # query/key width per head (MLA: qk_nope_head_dim + qk_rope_head_dim)
    intermediate_size: int
    vocab_size: int
    max_position: int = 4096  # context length in tokens (after rope scaling)
    tie_embeddings: bool = False
    hf_id: str = ""  # Hugging Face repo id of the model the user named ("" for a local path)
    source: str = "catalog"
    # what an engine loads, as the user named it (get_model): their HF id or local path, or a
    # catalog entry's hf_id for its bare catalog name; "" = hf_id, else name (see `load_id`)
    checkpoint: str = ""
    # --- mixture of experts -------------------------------------------------------------
    num_experts: int = 0  # routed experts (0 = dense)
    experts_per_token: int = 0  # top-k routed experts per token
    moe_intermediate_size: int = 0  # per-expert FFN width
    num_shared_experts: int = 0  # always-active shared experts (DeepSeek, Qwen2-MoE)
    shared_expert_intermediate_size: int = 0  # FFN width of all shared experts together
    first_k_dense_layers: int = 0  # leading dense layers (DeepSeek-V3: 3)
    # --- attention variants -------------------------------------------------------------
    kv_lora_rank: int = 0  # MLA (DeepSeek): compressed KV width; 0 = standard GQA KV
    qk_rope_head_dim: int = 0  # MLA decoupled rope dims (part of head_dim)
    q_lora_rank: int = 0  # MLA: low-rank query projection width; 0 = direct q_proj
    v_head_dim: int = 0  # value width per head when it differs from head_dim (MLA); 0 = head_dim
    # DeepSeek sparse attention (V3.2): an FP8 "lightning indexer" of index_n_heads x
    # index_head_dim scores every cached token, then MLA attends to the index_topk best
    index_topk: int = 0  # 0 = dense attention
    index_n_heads: int = 0
    index_head_dim: int = 0
    sliding_window: int = 0  # tokens; 0 = none
    sliding_window_layers: int = 0  # layers that use the window (Gemma-3: 5 of every 6, gpt-oss: half)
    # Qwen3-Next / Qwen3.5 attention (config attn_output_gate, vLLM's default True): q_proj
    # also emits a sigmoid gate on the attention output, heads x head_dim more columns
    attn_output_gate: bool = False
    # --- the checkpoint as stored ---------------------------------------------------------
    # weight precision of the published checkpoint (config.json's quantization_config): vLLM
    # serves a quantized checkpoint at its own precision (DeepSeek-V3: FP8, gpt-oss: MXFP4)
    checkpoint_bits: int = 16
    checkpoint_quantization: str = ""  # how, as the config says it ("fp8, blocks 128x128")
    # --- a multimodal checkpoint's encoder -----------------------------------------------
    # parameters of its vision tower (_vision_params' estimate from vision_config), which vLLM
    # (unless --limit-mm-per-prompt zeroes every modality; for Gemma-3 only from 0.15) and
    # SGLang load onto the GPU for a text-only job too: counted in the weights held and loaded
    # (vision_weight_bytes), never in num_params or a step's compute (a text job never runs it)
    vision_params: int = 0
    # --- hybrid linear attention (Qwen3-Next / Qwen3.5 Gated DeltaNet, Granite-4.0-H Mamba2)
    # layers whose mixer is a Gated DeltaNet or a Mamba2 (no KV cache: a fixed per-request
    # recurrent state) instead of attention; 0 = every layer attends. Shapes as a Gated
    # DeltaNet config.json names them; a Mamba2 mixer (linear_mixer "mamba2") keeps its
    # n_groups x d_state (B and C) as key heads x key dim and its heads x head_dim (x) as value
    # heads x value dim, so its conv channels (2 x key + value) and temporal state (value heads
    # x value dim x key dim) read as a Gated DeltaNet's do (vLLM's mamba2_state_shape)
    linear_mixer: str = ""  # "": Gated DeltaNet; "mamba2": Mamba2 (GraniteMoeHybrid)
    linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    linear_ssm_state_bits: int = 16  # config mamba_ssm_dtype float32: 32 (vLLM honours it)
    # Nemotron-H: the temporal state's dtype as the config names it (mamba_ssm_cache_dtype,
    # "" where silent) and "nemotron_h", whose vLLM hook sets that dtype by release
    # (tuner.core.memory.vllm_ssm_state_bits); "": linear_ssm_state_bits on every release
    linear_ssm_dtype: str = ""
    linear_ssm_dtype_rule: str = ""

    # --- structure -------------------------------------------------------------------
    @property
    def load_id(self) -> str:
        """The checkpoint an engine loads (every export's model): `checkpoint`, else the HF id,
        else the name (a spec built by hand, or stored by a study older than `checkpoint`)."""
        return self.checkpoint or self.hf_id or self.name

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_sparse_attention(self) -> bool:
        return self.index_topk > 0

    @property
    def num_moe_layers(self) -> int:
        return max(self.num_layers - self.first_k_dense_layers, 0) if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def num_window_layers(self) -> int:
        """Layers whose KV holds at most `sliding_window` tokens per request."""
        return min(self.sliding_window_layers, self.num_layers) if self.sliding_window > 0 else 0

    @property
    def num_full_attention_layers(self) -> int:
        return self.num_kv_layers - self.num_window_layers

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def is_hybrid(self) -> bool:
        """Some layers are Gated DeltaNet / Mamba2 mixers with a recurrent state, not KV."""
        return self.linear_attention_layers > 0

    @property
    def is_mamba2(self) -> bool:
        return self.linear_mixer == "mamba2"

    @property
    def linear_mixer_label(self) -> str:
        """The non-attention mixer as messages and provenance name it."""
        return "Mamba2" if self.is_mamba2 else "Gated DeltaNet"

    @property
    def linear_in_proj_outputs(self) -> int:
        """Output columns of one linear layer's fused input projection: a Gated DeltaNet's
        in_proj_qkvz (2 x key + 2 x value; its small in_proj_ba apart), a Mamba2's in_proj
        (vLLM mamba_mixer2.py: gate z and x, 2 x intermediate, B and C, 2 x groups x d_state,
        and dt, one per head)."""
        key = self.linear_num_key_heads * self.linear_key_head_dim
        value = self.linear_num_value_heads * self.linear_value_head_dim
        extra = self.linear_num_value_heads if self.is_mamba2 else 0
        return 2 * key + 2 * value + extra

    def linear_state_groups_rank(self, tp: int = 1) -> float:
        """Key heads (a Mamba2's groups) one rank keeps: vLLM replicates a Mamba2's groups up to
        the TP degree where it does not divide them (extra_groups_for_head_shards)."""
        g = self.linear_num_key_heads
        if self.is_mamba2 and g % tp:
            g += tp - g
        return g / tp

    def linear_tp_refusal(self, tp: int) -> str | None:
        """Why vLLM cannot shard this model's Mamba2 mixers over `tp` ranks (MambaMixer2
        asserts: the degree divides the heads; it divides the groups or there is one group),
        else None."""
        if not (self.is_hybrid and self.is_mamba2) or tp <= 1:
            return None
        heads, groups = self.linear_num_value_heads, self.linear_num_key_heads
        if heads % tp or (groups % tp and groups != 1):
            return (f"{self.name}'s Mamba2 layers have {heads} heads in {groups} groups: vLLM "
                    f"shards them over tp {tp} only where it divides the heads and the groups "
                    "(or there is one group); choose a tp that does")
        return None

    @property
    def num_kv_layers(self) -> int:
        """Layers that keep a KV cache (every layer unless the model is hybrid)."""
        return self.num_layers - self.linear_attention_layers

    @property
    def linear_mixer_params_per_layer(self) -> int:
        """One Gated DeltaNet layer's projections (vLLM qwen3_next.py): in_proj_qkvz (hidden ->
        2 x key heads x key dim + 2 x value heads x value dim), in_proj_ba (hidden -> 2 x value
        heads) and out_proj (value heads x value dim -> hidden); the depthwise conv1d's
        kernel x conv channels. 0 for a model without such layers."""
        if not self.is_hybrid:
            return 0
        h = self.hidden_size
        key = self.linear_num_key_heads * self.linear_key_head_dim
        value = self.linear_num_value_heads * self.linear_value_head_dim
        conv = (2 * key + value) * self.linear_conv_kernel_dim
        if self.is_mamba2:  # in_proj (linear_in_proj_outputs), conv1d, out_proj
            return h * self.linear_in_proj_outputs + conv + value * h
        return h * (2 * key + 2 * value) + h * 2 * self.linear_num_value_heads + value * h + conv

    def linear_state_bytes_per_layer_rank(self, tp: int = 1) -> float:
        """One request's recurrent state in one Gated DeltaNet layer on one tensor-parallel
        rank, as vLLM sizes it (MambaStateShapeCalculator.gated_delta_net_state_shape, and
        mamba2_state_shape for a Mamba2: its groups replicated up to the TP degree where it
        does not divide them): the conv state (2 x key + value channels / tp) x (kernel - 1)
        at the model dtype (16-bit) plus the temporal state (value heads / tp) x value dim x
        key dim at linear_ssm_state_bits (the config's mamba_ssm_dtype, else the model dtype)."""
        if not self.is_hybrid:
            return 0.0
        key_rank = self.linear_state_groups_rank(tp) * self.linear_key_head_dim
        value = self.linear_num_value_heads * self.linear_value_head_dim
        conv = (2 * key_rank + value / tp) * (self.linear_conv_kernel_dim - 1) * 2.0
        ssm = (self.linear_num_value_heads / tp * self.linear_value_head_dim
               * self.linear_key_head_dim * self.linear_ssm_state_bits / 8.0)
        return conv + ssm

    # --- parameter counts -------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        """Q, K, V and O projection weights of one layer (MLA: the low-rank projections)."""
        h, heads, d, dv = self.hidden_size, self.num_heads, self.head_dim, self.value_head_dim
        if self.is_mla:
            q = (h * self.q_lora_rank + self.q_lora_rank * heads * d) if self.q_lora_rank \
                else h * heads * d
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = self.kv_lora_rank * heads * (d - self.qk_rope_head_dim + dv)
            return q + kv_a + kv_b + heads * dv * h
        kv = self.hidden_size * self.num_kv_heads * (d + dv)
        q = h * heads * d * (2 if self.attn_output_gate else 1)  # + the output gate's columns
        return q + kv + heads * dv * h

    # What vLLM's DeepSeek model (model_executor/models/deepseek_v2.py, read in 0.32; SGLang's
    # deepseek_v2.py builds the same layers) keeps whole on every tensor-parallel rank or adds
    # at load, beyond a 1/tp share of the counts above (tuner.core.memory.mla_rank_extra_bytes)
    @property
    def mla_down_proj_params_per_layer(self) -> int:
        """MLA's down-projection to the query and KV latents (q_a_proj + kv_a_proj_with_mqa),
        which vLLM runs replicated (DeepSeekV2FusedQkvAProjLinear, disable_tp=True; without
        q_lora a ReplicatedLinear kv_a_proj_with_mqa); 0 for a GQA model."""
        if not self.is_mla:
            return 0
        return self.hidden_size * (self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim)

    @property
    def mla_absorbed_params_per_layer(self) -> int:
        """kv_b_proj's weights (kv_lora_rank x heads x (qk_nope + v)): vLLM keeps kv_b_proj for
        prefill and adds W_UK_T and W_UV, a 16-bit copy of the rank's slice, for the absorbed
        decode (mla_attention.py process_weights_after_loading); 0 for a GQA model."""
        if not self.is_mla:
            return 0
        return self.kv_lora_rank * self.num_heads * (
            self.head_dim - self.qk_rope_head_dim + self.value_head_dim)

    @property
    def index_quantized_params_per_layer(self) -> int:
        """DeepSeek sparse attention's indexer query projection wq_b (q_lora_rank x
        index_n_heads x index_head_dim), a ReplicatedLinear at the checkpoint's precision;
        not in the parameter counts above (under 0.2 % of DeepSeek-V3.2's); 0 when dense."""
        if not self.is_sparse_attention:
            return 0
        return self.q_lora_rank * self.index_n_heads * self.index_head_dim

    @property
    def index_16bit_params_per_layer(self) -> int:
        """The indexer's key and head-weight projections (wk: hidden x index_head_dim,
        weights_proj: hidden x index_n_heads), fused in one 16-bit, replicated layer
        (wk_weights_proj: quant_config None, disable_tp; an FP8 wk is upcast at load); 0 when
        dense."""
        if not self.is_sparse_attention:
            return 0
        return self.hidden_size * (self.index_head_dim + self.index_n_heads)

    @property
    def dense_mlp_params(self) -> int:
        """Gate, up and down projections of one dense FFN."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """Gate, up and down projections of one routed expert."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_expert_params(self) -> int:
        return 3 * self.hidden_size * self.shared_expert_intermediate_size

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    @property
    def moe_layer_params(self) -> int:
        """Resident FFN weights of one MoE layer: every routed expert + shared experts + router."""
        return self.num_experts * self.expert_params + self.shared_expert_params \
            + self.router_params

    @property
    def active_moe_layer_params(self) -> int:
        """FFN weights one token uses in an MoE layer: top-k experts + shared experts + router."""
        return self.experts_per_token * self.expert_params + self.shared_expert_params \
            + self.router_params

    @property
    def linear_params_total(self) -> int:
        """All per-layer matmul weights (resident: every expert counts)."""
        return (self.num_kv_layers * self.attention_params_per_layer
                + self.linear_attention_layers * self.linear_mixer_params_per_layer
                + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * self.moe_layer_params)

    @property
    def active_linear_params_total(self) -> int:
        """Per-layer matmul weights one token passes through (MoE: only its top-k experts)."""
        return (self.num_kv_layers * self.attention_params_per_layer
                + self.linear_attention_layers * self.linear_mixer_params_per_layer
                + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * self.active_moe_layer_params)

    @staticmethod
    def _per_layer(total: int, layers: int) -> int | float:
        return total // layers if total % layers == 0 else total / layers

    @property
    def linear_params_per_layer(self) -> int | float:
        """Resident matmul weights of one layer (QKV, O, gate, up, down; MoE: every expert and
        the router), averaged over the layers when they differ (DeepSeek's dense first layers),
        so `num_layers * linear_params_per_layer == linear_params_total`."""
        return self._per_layer(self.linear_params_total, self.num_layers)

    @property
    def active_linear_params_per_layer(self) -> int | float:
        """Matmul weights one token passes through in one layer (layer mean); == the resident
        figure for a dense model."""
        return self._per_layer(self.active_linear_params_total, self.num_layers)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def norm_params(self) -> int:
        """RMSNorm weights: two per layer + the final one (+ MLA's q/kv latent norms)."""
        mla = self.num_layers * (self.q_lora_rank + self.kv_lora_rank) if self.is_mla else 0
        return (2 * self.num_layers + 1) * self.hidden_size + mla

    @property
    def num_params(self) -> int:
        """Total parameters (every expert; embeddings and LM head once each unless tied)."""
        head = 0 if self.tie_embeddings else self.lm_head_params
        return self.linear_params_total + self.embedding_params + head + self.norm_params

    @property
    def active_params_per_token(self) -> int:
        """Parameters one token uses: the total less the routed experts it is not sent to
        (dense: == num_params). Embeddings count, as in Mistral's and Qwen's published
        "active" figures (OpenAI's gpt-oss figures leave the input embedding out)."""
        return self.num_params - (self.linear_params_total - self.active_linear_params_total)

    # --- bytes ---------------------------------------------------------------------------
    def weight_bytes_per_param(self, bits: int) -> float:
        """Bytes one matmul weight takes at `bits`, its share of the quantization scales
        included (scale_bytes_per_weight): the checkpoint's own scheme where `bits` is the
        checkpoint's precision, else what vLLM makes of a 16-bit checkpoint."""
        own = self.checkpoint_quantization if bits == self.checkpoint_bits else ""
        return weight_bytes_per_param(bits, own)

    def linear_weight_bytes_per_layer(self, bits: int) -> float:
        """Bytes of one layer's matmul weights at `bits` (layer mean), scales included."""
        return self.linear_params_per_layer * self.weight_bytes_per_param(bits)

    def weight_bytes(self, bits: int) -> float:
        """All weights; embeddings, LM head and norms stay 16-bit (as in vLLM's AWQ/GPTQ/FP8
        paths). MoE: every expert is resident."""
        head = 0 if self.tie_embeddings else self.lm_head_params
        return self.num_layers * self.linear_weight_bytes_per_layer(bits) + 2.0 * (
            self.embedding_params + head + self.norm_params
        )

    @property
    def vision_weight_bytes(self) -> float:
        """The vision tower's bytes on the GPU, at 16 bits whatever the plan's weight bits:
        quantized VLM checkpoints usually leave it unconverted (their ignore /
        modules_to_not_convert lists name it); an upper bound for an 8-bit plan vLLM quantizes
        online, whose Fp8Config converts the tower's linear layers too (the 0.11 wheel's
        gemma3_mm.py passes quant_config to SiglipVisionModel)."""
        return 2.0 * self.vision_params

    def kv_bytes_per_token_per_layer(self, bits: int, packed: bool = True) -> float:
        """KV bytes one token holds in one attention layer at `bits`, whole model (not per TP
        rank): K and V of every KV head, or for MLA one latent 'head' of kv_lora_rank +
        qk_rope_head_dim (vLLM caches the compressed latent, shared by all heads). `packed`:
        see latent_bytes_per_token_per_layer."""
        if self.is_mla:
            return (self.latent_bytes_per_token_per_layer(bits, packed)
                    + self.index_bytes_per_token_per_layer)
        return self.num_kv_heads * (self.head_dim + self.value_head_dim) * bits / 8.0

    def latent_bytes_per_token_per_layer(self, bits: int, packed: bool = True) -> float:
        """MLA's cached latent (kv_lora_rank + qk_rope_head_dim values) for one token and layer,
        as vLLM stores it: `bits` per value, except a sparse-attention model's 8-bit cache in
        vLLM's packed fp8_ds_mla layout (`packed`, the FlashMLA-sparse kernels'): the latent in
        FP8 with an FP32 scale per 128 values, the rope part 16-bit (656 bytes for
        DeepSeek-V3.2). packed=False: the plain FP8 cache of a backend that refuses that layout
        (tuner.core.memory.sparse_mla_packed_fp8 says which GPUs)."""
        if self.is_sparse_attention and bits == 8 and packed:
            return self.kv_lora_rank * (1.0 + 4.0 / 128.0) + 2.0 * self.qk_rope_head_dim
        return (self.kv_lora_rank + self.qk_rope_head_dim) * bits / 8.0

    @property
    def index_bytes_per_token_per_layer(self) -> float:
        """The sparse-attention indexer's cached key of one token and layer: index_head_dim
        FP8 values with an FP32 scale per 128, whatever the KV dtype (vLLM's indexer cache);
        0 without sparse attention."""
        return self.index_head_dim * (1.0 + 4.0 / 128.0) if self.is_sparse_attention else 0.0

    def kv_bytes_per_token(self, bits: int, layers: int | None = None) -> float:
        """KV of one token over `layers` layers (default all) at `bits`, as if every layer kept
        every token; sliding-window layers keep fewer: see tuner.core.memory.kv_bytes_per_request."""
        n = self.num_kv_layers if layers is None else layers
        return n * self.kv_bytes_per_token_per_layer(bits)


# ---------------------------------------------------------------------------------------
# Loading


def _load_yaml_resource(filename: str) -> dict:
    return load_shipped_yaml(read_shipped(filename))


def _gpu_from_dict(name: str, d: dict | None, where: str, *, new: bool = False) -> GPU:
    """GPU `name` from its fields `d` (read from `where`); `new`: a --gpu-file GPU of its own
    (not an override of a shipped one), whose bookkeeping fields may be left out
    (GPU_FILE_DEFAULTS)."""
    d = dict(d or {})
    d.pop("name", None)
    known = {f.name for f in fields(GPU)}
    unknown = set(d) - known
    if unknown:
        raise TunerError(f"{where}: unknown field(s) for GPU {name!r}: {', '.join(sorted(unknown))}.")
    if new:
        for key, value in GPU_FILE_DEFAULTS.items():
            d.setdefault(key, value.format(path=where) if isinstance(value, str) else value)
    required = [f.name for f in fields(GPU) if f.name != "name" and f.default is MISSING
                and f.default_factory is MISSING]
    missing = [k for k in required if k not in d]
    if missing:
        raise TunerError(f"{where}: GPU {name!r} is missing fields: " + "; ".join(
            f"{k} ({GPU_FIELD_HELP.get(k, 'see `tuner gpus --json`')})" for k in missing)
            + ".")
    try:
        return GPU(name=name, **d)
    except TunerError as exc:  # a figure out of range: say which file it came from
        raise TunerError(f"{where}: {exc}") from None


@cache
def _shipped_gpus() -> dict[str, GPU]:
    """The shipped GPU catalog, parsed once per process (a simulate reads it twice: the
    command's catalog and a kernel-table transfer's source GPU); callers copy the dict, and a
    GPU is frozen."""
    raw = _load_yaml_resource("gpus.yaml")["gpus"]
    return {name: _gpu_from_dict(name, d, "tuner/data/gpus.yaml") for name, d in raw.items()}


def load_gpus(extra_yaml: str | Path | None = None) -> dict[str, GPU]:
    """The shipped GPU catalog, plus GPUs from a user YAML (same schema: name -> fields)."""
    gpus = dict(_shipped_gpus())
    if extra_yaml is not None:
        path = Path(extra_yaml)
        if not path.is_file():
            raise TunerError(f"GPU file {path} "
                             + ("is a folder; give the YAML file." if path.is_dir()
                                else "does not exist."))
        import yaml  # ~20 ms: only a user's file needs it (the shipped ones are cached)

        try:
            user = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise TunerError(f"{path}: not valid YAML ({exc}).") from None
        if isinstance(user, dict):  # a file may hold a 'providers:' section alone
            user = user.get("gpus", {k: v for k, v in user.items() if k != "providers"})
        if not isinstance(user, dict):
            raise TunerError(f"{path}: a GPU file is a mapping of GPU name -> fields (optionally "
                             f"under 'gpus:'), got {type(user).__name__}.")
        for name, d in user.items():
            if not isinstance(d, dict | None):
                raise TunerError(f"{path}: GPU {name!r} needs a mapping of fields (e.g. "
                                 f"price_usd_per_h: 1.1), got {d!r}.")
        for name, d in user.items():
            # a shipped GPU however spelled (H100-PCIE for H100-PCIe): a partial override of
            # it, not a second GPU the same name would find first
            shipped = next((n for n in gpus if gpu_key(n) == gpu_key(str(name))), None)
            if shipped is not None:
                gpus[shipped] = _gpu_from_dict(shipped, {**asdict(gpus[shipped]), **(d or {})},
                                               str(path))
            else:
                gpus[name] = _gpu_from_dict(name, d, str(path), new=True)
    return gpus


def parse_price_overrides(items: list[str] | None) -> dict[str, float]:
    """['A10=0.75', 'A40=1.1'] -> {'A10': 0.75, 'A40': 1.1}."""
    out: dict[str, float] = {}
    for item in items or []:
        for part in item.split(","):
            if not part.strip():
                continue
            name, sep, value = part.partition("=")
            try:
                price = float(value)
            except ValueError:
                price = -1.0
            if not sep or not (math.isfinite(price) and 0 < price <= MAX_PRICE_USD_PER_H):
                raise TunerError(f"--price expects GPU=USD_PER_HOUR with a price above 0 and up "
                                 f"to {MAX_PRICE_USD_PER_H:,.0f} $/GPU-h (e.g. A10=0.75), got "
                                 f"{part!r}.")
            out[name.strip()] = price
    return out


def apply_prices(gpus: dict[str, GPU], prices: dict[str, float]) -> dict[str, GPU]:
    out = dict(gpus)
    for name, price in prices.items():
        gpu = get_gpu(name, out)
        # with --provider the price is per GPU-hour on every instance shape it rents
        billing = None if gpu.billing is None else reprice(gpu.billing, price)
        out[gpu.name] = replace(gpu, price_usd_per_h=price, price_source="user override (--price)",
                                price_date="", billing=billing)
    return out


def check_checkpoint_ref(value: str | None, option: str = "--quantized-model") -> None:
    """One TunerError unless `value` (a checkpoint an export names: --quantized-model) is a
    Hugging Face repo id (owner/name) or a path that exists: a path that does not would be
    written into every export and fail only when the engine starts."""
    if not value:
        return
    looks_like_path = value.startswith(("/", "./", "../", "~", ".\\")) or value in (".", "..")
    if not looks_like_path and _HF_ID.match(value):
        return
    if Path(value).expanduser().exists():
        return
    if looks_like_path or "/" in value or os.sep in value:
        raise TunerError(f"{option} {value}: no such file or folder (pass an existing "
                         "checkpoint path or a Hugging Face repo id, owner/name).")
    raise TunerError(f"{option} {value!r} is neither an existing checkpoint path nor a Hugging "
                     "Face repo id (owner/name).")


def gpu_key(name: str) -> str:
    """How GPU names compare: case, spaces, '-' and '_', a leading vendor ('NVIDIA', 'AMD') and
    a count ('8x', as in '8xH100-80GB-SXM') ignored: 'NVIDIA A100-SXM4-80GB' -> 'a100sxm480gb'."""
    s = re.sub(r"^\s*\d+\s*x\s*(?=[a-z])", "", name.strip().lower())
    s = re.sub(r"^(nvidia|amd)\b", "", s.strip())
    return re.sub(r"[^a-z0-9]", "", s)


def find_gpu(name: str, gpus: dict[str, GPU]) -> GPU | None:
    """The catalog GPU a name means: its catalog name, else one of its aliases (gpu_key);
    None when none does. A user's --gpu-file GPU of the exact name wins over an alias."""
    key = gpu_key(name)
    for gpu_name, gpu in gpus.items():
        if gpu_key(gpu_name) == key:
            return gpu
    hits = [g for g in gpus.values() if any(gpu_key(a) == key for a in g.aliases)]
    return hits[0] if len(hits) == 1 else None


def get_gpu(name: str, gpus: dict[str, GPU]) -> GPU:
    """Look a GPU up by its catalog name or an alias (find_gpu); unknown names raise with close
    matches."""
    gpu = find_gpu(name, gpus)
    if gpu is not None:
        return gpu
    why = next((f" {part}: {text}." for part, text in
                (_load_yaml_resource("gpus.yaml").get("not_in_catalog") or {}).items()
                if gpu_key(part) == gpu_key(name)), "")
    raise TunerError(f"Unknown GPU {name!r}.{why or close_matches_hint(name, gpus)} (`tuner gpus` lists them; add more with --gpu-file.)")


# ---------------------------------------------------------------------------------------
# Models: the shipped catalog, Hugging Face config.json files, and the Hugging Face Hub

_MODEL_FIELDS = {f.name for f in fields(ModelSpec)}
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name as the Hub spells repo ids

# Defaults of the transformers config class for fields a published config.json may leave out
# (the class fills them in when it loads). Gemma-3's multimodal configs list only what differs
# from transformers' Gemma3TextConfig defaults (gemma-3-4b-it's text_config names no heads).
_MODEL_TYPE_DEFAULTS: dict[str, dict] = {
    "gemma3_text": {  # transformers.models.gemma3.configuration_gemma3.Gemma3TextConfig
        "vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "max_position_embeddings": 131072, "sliding_window": 4096,
        "sliding_window_pattern": 6, "tie_word_embeddings": True,
    },
    "gemma2": {"tie_word_embeddings": True},  # Gemma2Config
}


def _load_catalog_yaml() -> dict:
    return _load_yaml_resource("models.yaml")["models"]


def _catalog_config(filename: str) -> tuple[dict, str]:
    """A config.json shipped in tuner/core/data/configs/, and the label it is known by."""
    text = read_shipped(f"configs/{filename}")
    return json.loads(text), f"configs/{filename}"


def _catalog_entry(name: str, d: dict) -> ModelSpec:
    d = dict(d)
    d.pop("aliases", None)
    config_file = d.pop("config", None)
    unknown = set(d) - _MODEL_FIELDS
    if unknown:
        raise TunerError(f"tuner/core/data/models.yaml: unknown field(s) for model {name!r}: "
                         f"{', '.join(sorted(unknown))}.")
    if config_file:
        cfg, label = _catalog_config(config_file)
        spec = model_from_config_dict(cfg, where=f"tuner/core/data/{label}", name=name,
                                      source=f"catalog ({label})")
        return replace(spec, **d)  # hf_id, and any field the entry pins
    return ModelSpec(name=name, source="catalog (models.yaml)", **d)


@cache
def _shipped_models() -> tuple[dict[str, ModelSpec], dict[str, tuple[str, ...]]]:
    """models.yaml parsed once per process: (name -> ModelSpec, name -> its aliases); callers
    copy the dicts, and a ModelSpec is frozen."""
    raw = _load_catalog_yaml()
    return ({name: _catalog_entry(name, d) for name, d in raw.items()},
            {name: tuple((d or {}).get("aliases", ())) for name, d in raw.items()})


def load_models() -> dict[str, ModelSpec]:
    """The shipped catalog: name -> ModelSpec (entries in models.yaml, some read from the
    published config.json shipped beside it in data/configs/)."""
    return dict(_shipped_models()[0])


#: how a published checkpoint names its chat-tuned form (the base form has no chat template)
_CHAT_MARKS = ("instruct", "-chat", "-it")


def chat_checkpoint(model: ModelSpec) -> str | None:
    """The chat-tuned checkpoint of the same shape for a catalog entry loaded as its base
    checkpoint (models.yaml lists it among the entry's aliases: Meta-Llama-3-8B ->
    Meta-Llama-3-8B-Instruct), or None: the model is not a catalog base checkpoint, or the
    catalog knows no chat form of it."""
    ckpt = model.load_id
    if model.name not in _shipped_models()[1] or any(m in ckpt.lower() for m in _CHAT_MARKS):
        return None
    if ckpt.lower() != model.hf_id.lower():
        return None
    owner = ckpt.partition("/")[0].lower()
    for alias in _shipped_models()[1][model.name]:
        low = alias.lower()
        if "/" in alias and low.partition("/")[0] == owner and any(m in low for m in _CHAT_MARKS):
            return alias
    return None


def model_aliases(models: dict[str, ModelSpec] | None = None) -> dict[str, str]:
    """Every name a catalog model answers to (lower-case) -> its catalog name: the name, its
    Hugging Face id, the id without the owner ("Llama-3.1-8B"), and the entry's aliases
    (other repos with the same shape, e.g. the -Instruct checkpoint)."""
    models = load_models() if models is None else models
    aliases = _shipped_models()[1]
    out: dict[str, str] = {}
    for name, spec in models.items():
        names = [name, spec.hf_id, spec.hf_id.rpartition("/")[2]]
        for alias in aliases.get(name, ()):
            names += [alias, alias.rpartition("/")[2]]
        for n in names:
            if n:
                out.setdefault(n.strip().lower(), name)
    return out


def _config_int(cfg: dict, key: str, path: Path | str, default: int | None = None) -> int:
    """A positive integer field of a config.json, or one TunerError naming it and its value."""
    if key not in cfg or cfg[key] is None:
        if default is None:
            raise TunerError(f"{path}: not a Llama-style decoder config (missing {key!r}).")
        return default
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) \
            or int(value) <= 0:
        raise TunerError(f"{path}: {key} must be a positive integer, got {value!r}.")
    return int(value)


def _config_count(cfg: dict, keys: tuple[str, ...], path: Path | str) -> int:
    """The first of `keys` present as a non-negative integer (null/absent = 0)."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) \
                or int(value) < 0:
            raise TunerError(f"{path}: {key} must be a non-negative integer, got {value!r}.")
        return int(value)
    return 0


def _decoder_config(cfg: dict) -> dict:
    """The decoder's fields: multimodal configs (Gemma-3, Llama-4, Mistral-3) keep them under
    text_config; model-type defaults fill what the file leaves out."""
    text = cfg.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" not in cfg:
        merged = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config")}
        merged.update(text)
        cfg = merged
    defaults = _MODEL_TYPE_DEFAULTS.get(str(cfg.get("model_type", "")), {})
    return {**defaults, **{k: v for k, v in cfg.items() if v is not None}}


def _context_tokens(cfg: dict, path: Path | str) -> int:
    """max_position_embeddings, or original_max_position_embeddings x factor for YaRN /
    dynamic / LongRoPE rope scaling (rope_scaling, or transformers 5's rope_parameters) when
    that is larger (the scaled context)."""
    ctx = _config_int(cfg, "max_position_embeddings", path, default=4096)
    # transformers 5 writes rope_scaling's fields into rope_parameters (with rope_theta)
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, dict):
        kind = str(rope.get("rope_type") or rope.get("type") or "")
        factor, original = rope.get("factor"), rope.get("original_max_position_embeddings")
        if kind in ("yarn", "dynamic", "longrope") and isinstance(factor, int | float) \
                and isinstance(original, int) and factor > 0 and original > 0:
            ctx = max(ctx, int(original * factor))
    return ctx


def _window_layers(cfg: dict, num_layers: int, path: Path | str) -> tuple[int, int]:
    """(sliding_window tokens, layers that use it) from layer_types, sliding_window_pattern,
    Gemma-2's alternation, Qwen2's use_sliding_window/max_window_layers, or a window on every
    layer (Mistral-7B-v0.1); or Llama-4's chunked local attention (_chunked_layers)."""
    window = _config_count(cfg, ("sliding_window",), path)
    if window == 0 and _config_count(cfg, ("attention_chunk_size",), path):
        return _chunked_layers(cfg, num_layers, path)
    if window == 0 or cfg.get("use_sliding_window") is False:
        return 0, 0
    typed = _layer_type_count(cfg, num_layers, path, "sliding_attention")
    if typed is not None:
        return window, typed
    pattern = _config_count(cfg, ("sliding_window_pattern",), path)
    if pattern:  # Gemma-3: every pattern-th layer is global, the rest slide
        return window, num_layers - num_layers // pattern
    if cfg.get("model_type") == "gemma2":  # even layers slide
        return window, (num_layers + 1) // 2
    if cfg.get("use_sliding_window") is True and "max_window_layers" in cfg:
        return window, max(num_layers - _config_count(cfg, ("max_window_layers",), path), 0)
    return window, num_layers


def _layer_type_count(cfg: dict, num_layers: int, path: Path | str, kind: str) -> int | None:
    """How many of the config's `layer_types` are `kind` (None where it lists none); a list
    whose length is not num_hidden_layers is refused."""
    types = cfg.get("layer_types")
    if not (isinstance(types, list) and types):
        return None
    if len(types) != num_layers:
        raise TunerError(f"{path}: layer_types lists {len(types)} layers, "
                         f"num_hidden_layers is {num_layers}.")
    return sum(1 for t in types if t == kind)


def _chunked_layers(cfg: dict, num_layers: int, path: Path | str) -> tuple[int, int]:
    """(attention_chunk_size, layers that use it) of Llama-4: its RoPE layers attend within
    their chunk, every no_rope_layer_interval-th (NoPE) layer to every token (vLLM's llama4.py:
    ChunkedLocalAttention where no_rope_layers[i] is 1; transformers' Llama4TextConfig fills
    an empty list with 3 of every 4). Priced as a window of the chunk: vLLM 0.14 and later
    free the blocks before a chunk (ChunkedLocalAttentionSpec under the hybrid KV cache
    manager), so a chunked layer holds at most the chunk (0 to chunk tokens: an upper bound);
    earlier releases keep every token (arch_support.check_engine_runs warns)."""
    chunk = _config_count(cfg, ("attention_chunk_size",), path)
    typed = _layer_type_count(cfg, num_layers, path, "chunked_attention")
    if typed is not None:
        return chunk, typed
    rope = cfg.get("no_rope_layers")
    if isinstance(rope, list) and rope:
        return chunk, sum(1 for i, r in enumerate(rope) if i < num_layers and r)
    interval = _config_int(cfg, "no_rope_layer_interval", path, default=4)
    return chunk, num_layers - num_layers // interval


#: architectures (config.json `architectures`) whose decoder a ModelSpec describes: softmax
#: attention (GQA or MLA, sliding windows allowed) on every layer, a gated MLP or MoE FFN.
#: Another name is priced the same way with a note (config_notes): the shape may be wrong.
LLAMA_STYLE_ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Mistral3ForConditionalGeneration",
    "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
    "Llama4ForCausalLM", "Llama4ForConditionalGeneration", "MllamaForConditionalGeneration",
    "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration",
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
    "GptOssForCausalLM", "Phi3ForCausalLM", "PhiMoEForCausalLM", "OlmoForCausalLM",
    "Olmo2ForCausalLM", "OlmoeForCausalLM", "GraniteForCausalLM", "GraniteMoeForCausalLM",
    "CohereForCausalLM", "Cohere2ForCausalLM", "GlmForCausalLM", "Glm4ForCausalLM",
    "Glm4MoeForCausalLM", "InternLM2ForCausalLM", "InternLM3ForCausalLM", "YiForCausalLM",
    "SmolLM3ForCausalLM", "StableLmForCausalLM", "ExaoneForCausalLM", "Exaone4ForCausalLM",
    "MiniCPMForCausalLM", "Ernie4_5_ForCausalLM", "Ernie4_5_MoeForCausalLM",
    "MiniMaxM2ForCausalLM",
})
#: the Gated DeltaNet hybrids' architectures (the names vLLM's model registry gives
#: qwen3_next.py and qwen3_5.py): attention on every full_attention_interval-th layer, a Gated
#: DeltaNet on the others (_gated_deltanet), MoE or dense MLP
GATED_DELTANET_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
})
#: config.json `model_type`s / `architectures` whose MLP has no gate (up, activation, down)
_NON_GATED_TYPES = frozenset({"starcoder2", "gpt_neox", "phi", "nemotron", "nemotron_h", "persimmon",
                              "gpt_bigcode", "gpt2", "gptj", "opt", "falcon", "bloom", "mpt",
                              "codegen"})
_NON_GATED_ARCHITECTURES = frozenset({
    "Starcoder2ForCausalLM", "GPTNeoXForCausalLM", "PhiForCausalLM", "NemotronForCausalLM",
    "PersimmonForCausalLM", "GPTBigCodeForCausalLM", "GPT2LMHeadModel", "GPTJForCausalLM",
    "OPTForCausalLM", "FalconForCausalLM", "BloomForCausalLM", "MPTForCausalLM",
    "CodeGenForCausalLM"})
#: activations only ever used without a gate (Nemotron, Persimmon: squared ReLU)
_NON_GATED_ACTS = frozenset({"relu2", "squared_relu"})
#: layer_types entries that keep a KV cache of every (or every windowed) token
_ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention",
                                    "attention"})
#: model types that mix state-space / linear-attention layers with (or without) attention
_HYBRID_TYPES = frozenset({"jamba", "qwen3_next", "mamba", "mamba2", "falcon_mamba",
                           "falcon_h1", "zamba", "zamba2", "bamba", "nemotron_h",
                           "granitemoehybrid", "lfm2", "minimax", "minimax_m1", "plamo2",
                           "recurrent_gemma", "rwkv"})


def _model_types(raw: dict, cfg: dict) -> set[str]:
    """The config's model_type and its text decoder's (llama4 / llama4_text)."""
    return {str(t).lower() for t in (raw.get("model_type"), cfg.get("model_type")) if t}


def _architectures(raw: dict) -> list[str]:
    archs = raw.get("architectures")
    return [str(a) for a in archs] if isinstance(archs, list) else []


def _arch_label(raw: dict) -> str:
    return "/".join(_architectures(raw)) or str(raw.get("model_type") or "this model")


def _is_llama4(cfg: dict) -> bool:
    return "interleave_moe_layer_step" in cfg or "intermediate_size_mlp" in cfg \
        or str(cfg.get("model_type", "")).startswith("llama4")


def _llama4_moe_layers(cfg: dict, layers: int, path: Path | str) -> int:
    """How many of Llama-4's layers are MoE: `moe_layers` where listed, else every
    interleave_moe_layer_step-th (transformers' Llama4TextConfig: layers step-1, 2*step-1, ...)."""
    listed = cfg.get("moe_layers")
    if isinstance(listed, list):
        return len({i for i in listed if isinstance(i, int) and 0 <= i < layers})
    step = _config_int(cfg, "interleave_moe_layer_step", path, default=1)
    return len(range(step - 1, layers, step))


def _gated_mlp(raw: dict, cfg: dict) -> bool:
    """Whether the MLP is gated (gate, up, down): False for the architectures and model types
    known to be up-activation-down (StarCoder2, GPT-NeoX, Phi-2, Nemotron), or a squared-ReLU
    activation; gated otherwise (Llama-style)."""
    act = str(cfg.get("hidden_act") or cfg.get("hidden_activation") or "").lower()
    return not (_model_types(raw, cfg) & _NON_GATED_TYPES
                or set(_architectures(raw)) & _NON_GATED_ARCHITECTURES
                or act in _NON_GATED_ACTS)


def _gated_equivalent(width: int) -> int:
    """The gated MLP width of a non-gated one's parameters and FLOPs: 3 x w' = 2 x width."""
    return max(round(2 * width / 3), 1) if width else 0


def _hybrid_layers(cfg: dict) -> tuple[int, str] | None:
    """(layers that keep a KV cache, what the others are) of a hybrid config, or None: from
    layer_types, full_attention_interval (Qwen3-Next), attn_layer_period/offset (Jamba) or
    hybrid_override_pattern (Nemotron-H; '*' marks an attention layer)."""
    layers = cfg.get("num_hidden_layers")
    n = layers if isinstance(layers, int) and layers > 0 else None
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        other = sorted({str(t) for t in types} - _ATTENTION_LAYER_TYPES)
        if other:
            return sum(1 for t in types if t in _ATTENTION_LAYER_TYPES), "/".join(other)
        return None
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 1 and n:
        return n // interval, "linear attention"
    period = cfg.get("attn_layer_period")
    if isinstance(period, int) and period > 1 and n:
        offset = cfg.get("attn_layer_offset") if isinstance(cfg.get("attn_layer_offset"), int) \
            else 0
        return sum(1 for i in range(n) if i % period == offset), "Mamba"
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*"), "Mamba"
    kinds = cfg.get("attn_type_list")  # MiniMax-Text-01 / M1: 0 lightning, 1 softmax
    if isinstance(kinds, list) and 0 in kinds:
        return sum(1 for k in kinds if k == 1), "lightning (linear) attention"
    blocks = cfg.get("layers_block_type")  # Nemotron-H as transformers 5 writes it
    if isinstance(blocks, list) and blocks and set(map(str, blocks)) - _ATTENTION_LAYER_TYPES \
            - {"mlp", "moe"}:
        other = sorted(set(map(str, blocks)) - _ATTENTION_LAYER_TYPES - {"mlp", "moe"})
        return sum(1 for b in blocks if b in _ATTENTION_LAYER_TYPES), "/".join(other)
    return None


#: model types of the Gated DeltaNet hybrids tuner prices (Qwen3-Next, Qwen3.5's text decoders)
_GDN_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                        "qwen3_5_moe_text"})
#: the GDN config keys the layer's shape needs
_GDN_KEYS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
             "linear_value_head_dim", "linear_conv_kernel_dim")


def _gated_deltanet(raw: dict, cfg: dict, path: Path | str) -> dict[str, int]:
    """The ModelSpec fields of a Gated DeltaNet hybrid (Qwen3-Next, Qwen3.5): its linear
    layers (layer_types' "linear_attention", else all but every full_attention_interval-th,
    as vLLM's qwen3_next.py reads them) and the layer's head shapes; {} for a model without
    such layers. Any other hybrid (Mamba, MiniMax's lightning attention, ...) is refused
    (_refuse_hybrid)."""
    gdn = _model_types(raw, cfg) & _GDN_TYPES or "linear_num_value_heads" in cfg
    layers = cfg.get("num_hidden_layers")
    if not gdn or not isinstance(layers, int) or layers <= 0:
        _refuse_hybrid(raw, cfg, path)
        return {}
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise TunerError(f"{path}: layer_types lists {len(types)} layers, "
                             f"num_hidden_layers is {layers}.")
        other = {str(t) for t in types} - {"linear_attention", "full_attention"}
        if other:
            raise TunerError(f"{path}: {_arch_label(raw)} lists layer types tuner does not "
                             f"price ({', '.join(sorted(other))}); it prices full_attention "
                             "and linear_attention (Gated DeltaNet) layers.")
        linear = sum(1 for t in types if t == "linear_attention")
    else:
        interval = _config_int(cfg, "full_attention_interval", path, default=4)
        linear = layers - layers // interval  # layer i attends where (i + 1) % interval == 0
    if linear == 0:
        return {}
    shape = {f"linear_{k[7:]}": _config_int(cfg, k, path) for k in _GDN_KEYS}
    ssm = str(cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype") or "").lower()
    # vLLM's HybridAttentionMamba config copies the config's mamba_ssm_dtype into
    # mamba_ssm_cache_dtype; the conv state stays at the model dtype
    bits = 32 if ssm in ("float32", "fp32") else 16
    return dict(linear_attention_layers=linear, linear_ssm_state_bits=bits, **shape)


#: model types whose hybrid layers are Mamba2 mixers beside attention, each with its MLP / MoE
#: (vLLM granitemoehybrid.py). Bamba (the same structure) stays refused: vLLM dropped
#: BambaForCausalLM after 0.23.0 (registry _PREVIOUSLY_SUPPORTED_MODELS), and tuner has no
#: release ceiling to refuse the releases that cannot load it; Nemotron-H (mixer-only and
#: FFN-only blocks), Falcon-H1 (attention and Mamba side by side) and Zamba2 (a shared
#: attention block) are not this structure.
_MAMBA2_TYPES = frozenset({"granitemoehybrid"})
#: their architectures (vLLM's registry: granitemoehybrid.py), for notes that name the mixer
MAMBA2_HYBRID_ARCHITECTURES = frozenset({"GraniteMoeHybridForCausalLM"})
#: a Granite-4.0 layer_types entry -> whether the layer attends (the names the checkpoints
#: write, "attention" / "mamba", and transformers 5's, "full_attention" / "linear_attention")
_MAMBA2_LAYER_KINDS = {"attention": True, "full_attention": True, "mamba": False,
                       "linear_attention": False}


def _linear_layers(raw: dict, cfg: dict, path: Path | str) -> dict:
    """The ModelSpec fields of a priced hybrid (a Gated DeltaNet or Mamba2 one), {} for a
    model whose layers all attend; any other hybrid is refused (_refuse_hybrid)."""
    if _model_types(raw, cfg) & _MAMBA2_TYPES:
        return _mamba2_hybrid(raw, cfg, path)
    if _model_types(raw, cfg) & _NEMOTRON_H_TYPES:
        return _nemotron_h(raw, cfg, path)
    return _gated_deltanet(raw, cfg, path)


#: Nemotron-H / Nemotron-Nano-v2 (vLLM nemotron_h.py): hybrid_override_pattern makes each of
#: num_hidden_layers blocks ONE sublayer behind its own RMSNorm: 'M' a Mamba2 mixer, '*'
#: attention, '-' a non-gated squared-ReLU MLP (up, down), 'E' an MoE (Nemotron-3)
_NEMOTRON_H_TYPES = frozenset({"nemotron_h"})
NEMOTRON_H_ARCHITECTURES = frozenset({"NemotronHForCausalLM"})
#: layers_block_type (transformers 5's spelling of the pattern) -> the pattern's character
_NEMOTRON_H_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _nemotron_h_pattern(raw: dict, cfg: dict, path: Path | str) -> str:
    """A Nemotron-H config's block pattern, one character a block (hybrid_override_pattern,
    else layers_block_type spelled as it), checked as vLLM's NemotronHConfig checks it:
    num_hidden_layers characters of 'M', '*', '-' (and 'E')."""
    pattern = cfg.get("hybrid_override_pattern")
    blocks = cfg.get("layers_block_type")
    if not (isinstance(pattern, str) and pattern) and isinstance(blocks, list) and blocks:
        other = {str(b) for b in blocks} - set(_NEMOTRON_H_BLOCKS)
        if other:
            raise TunerError(f"{path}: layers_block_type lists block types tuner does not "
                             f"price ({', '.join(sorted(other))}).")
        pattern = "".join(_NEMOTRON_H_BLOCKS[str(b)] for b in blocks)
    if not (isinstance(pattern, str) and pattern):
        raise TunerError(f"{path}: {_arch_label(raw)} has no hybrid_override_pattern, so which "
                         "of its blocks are Mamba2, attention and MLP is not known.")
    layers = _config_int(cfg, "num_hidden_layers", path)
    if len(pattern) != layers:
        raise TunerError(f"{path}: hybrid_override_pattern has {len(pattern)} blocks, "
                         f"num_hidden_layers is {layers}.")
    other = set(pattern) - set("M*-E")
    if other:
        raise TunerError(f"{path}: hybrid_override_pattern holds block types tuner does not "
                         f"price ({', '.join(sorted(other))}); it prices 'M', '*' and '-'.")
    return pattern


def _nemotron_h_blocks(raw: dict, cfg: dict, path: Path | str) -> tuple[int, int]:
    """(mixer blocks 'M' and '*', MLP blocks '-') of a dense Nemotron-H: tuner's layer is a
    mixer and an FFN, so num_layers is the mixer blocks and the MLP blocks' weights are spread
    over them (model_from_config_dict)."""
    pattern = _nemotron_h_pattern(raw, cfg, path)
    return pattern.count("M") + pattern.count("*"), pattern.count("-")


def _nemotron_h(raw: dict, cfg: dict, path: Path | str) -> dict:
    """A Nemotron-H config's Mamba2 blocks and the mixer's shape as vLLM's nemotron_h.py reads
    them (MambaMixer2 of mamba_num_heads x mamba_head_dim, n_groups groups of ssm_state_size,
    a conv_kernel-tap conv1d; `expand` is not read); defaults those of the 0.10.2 wheel's
    NemotronHConfig. linear_ssm_state_bits is the temporal state's width from 0.13.0 to
    0.19.1 (the config's mamba_ssm_cache_dtype: 32 bits where it says float32, else 16); the
    config's dtype and the "nemotron_h" rule are kept so that vLLM's plan reads the release's
    width (tuner.core.memory.vllm_ssm_state_bits: the model dtype before 0.13.0, a silent
    config float32 from 0.20.0). The MoE variants ('E') are refused in one line."""
    pattern = _nemotron_h_pattern(raw, cfg, path)
    if "E" in pattern:
        raise TunerError(
            f"{path}: {_arch_label(raw)} has MoE blocks ('E' in hybrid_override_pattern: "
            "Nemotron-3), each standing alone between the mixer blocks (with a latent "
            "projection where moe_latent_size is set), which are not modelled: tuner prices "
            "the dense Nemotron-H / Nemotron-Nano-v2 Mamba2 hybrids ('M', '*', '-') only, so "
            "it does not support this model.")
    mamba, attn, mlp = pattern.count("M"), pattern.count("*"), pattern.count("-")
    if not (mamba and attn and mlp):
        raise TunerError(
            f"{path}: {_arch_label(raw)}'s hybrid_override_pattern has {mamba} Mamba2, {attn} "
            f"attention and {mlp} MLP blocks: tuner prices Nemotron-H patterns with all "
            "three, so it does not support this model.")
    heads = _config_int(cfg, "mamba_num_heads", path, default=128)
    key = "n_groups" if "n_groups" in cfg else "mamba_n_groups"
    conv = "conv_kernel" if "conv_kernel" in cfg else "mamba_d_conv"
    ssm = str(cfg.get("mamba_ssm_cache_dtype") or "").lower()
    return dict(linear_mixer="mamba2", linear_attention_layers=mamba,
                linear_num_key_heads=_config_int(cfg, key, path, default=8),
                linear_key_head_dim=_config_int(cfg, "ssm_state_size", path, default=128),
                linear_num_value_heads=heads,
                linear_value_head_dim=_config_int(cfg, "mamba_head_dim", path, default=64),
                linear_conv_kernel_dim=_config_int(cfg, conv, path, default=4),
                linear_ssm_state_bits=32 if ssm in ("float32", "fp32") else 16,
                linear_ssm_dtype=ssm, linear_ssm_dtype_rule="nemotron_h")


def _mamba2_hybrid(raw: dict, cfg: dict, path: Path | str) -> dict:
    """A GraniteMoeHybrid config's Mamba2 layers (layer_types "mamba", the others attention)
    and the mixer's shape, read as vLLM's granitemoehybrid.py reads it: intermediate =
    mamba_expand x hidden = mamba_n_heads x mamba_d_head (d_head "auto": intermediate / heads),
    mamba_n_groups groups of mamba_d_state, a mamba_d_conv-tap conv1d; defaults as
    transformers' GraniteMoeHybridConfig. The state is at the model dtype (vLLM's
    mamba_ssm_cache_dtype "auto": no hook reads the config for this family). {} where every
    layer attends (Granite-4.0-Micro)."""
    layers = _config_int(cfg, "num_hidden_layers", path)
    types = cfg.get("layer_types", cfg.get("layers_block_type"))
    if not isinstance(types, list) or not types:
        raise TunerError(f"{path}: {_arch_label(raw)} lists no layer_types, so which of its "
                         "layers are Mamba2 and which attend is not known.")
    if len(types) != layers:
        raise TunerError(f"{path}: layer_types lists {len(types)} layers, "
                         f"num_hidden_layers is {layers}.")
    other = {str(t) for t in types} - set(_MAMBA2_LAYER_KINDS)
    if other:
        raise TunerError(f"{path}: {_arch_label(raw)} lists layer types tuner does not price "
                         f"({', '.join(sorted(other))}); it prices attention and mamba layers.")
    mamba = sum(1 for t in types if not _MAMBA2_LAYER_KINDS[str(t)])
    if mamba == 0:
        return {}
    if mamba == layers:
        raise TunerError(f"{path}: {_arch_label(raw)} has no attention layer (all {layers} "
                         "are Mamba2): tuner prices hybrids whose attention layers page a KV "
                         "cache beside the recurrent state, so it does not support this model.")
    hidden = _config_int(cfg, "hidden_size", path)
    heads = _config_int(cfg, "mamba_n_heads", path, default=128)
    intermediate = _config_int(cfg, "mamba_expand", path, default=2) * hidden
    d_head = cfg.get("mamba_d_head", "auto")
    d_head = intermediate // heads if d_head in ("auto", None) \
        else _config_int(cfg, "mamba_d_head", path)
    if heads * d_head != intermediate:
        raise TunerError(f"{path}: mamba_n_heads x mamba_d_head ({heads} x {d_head}) must equal "
                         f"mamba_expand x hidden_size ({intermediate}), as transformers and "
                         "vLLM require.")
    return dict(linear_mixer="mamba2", linear_attention_layers=mamba,
                linear_num_key_heads=_config_int(cfg, "mamba_n_groups", path, default=1),
                linear_key_head_dim=_config_int(cfg, "mamba_d_state", path, default=256),
                linear_num_value_heads=heads, linear_value_head_dim=d_head,
                linear_conv_kernel_dim=_config_int(cfg, "mamba_d_conv", path, default=4),
                linear_ssm_state_bits=16)


def _refuse_hybrid(raw: dict, cfg: dict, path: Path | str) -> None:
    """One TunerError for a model whose layers are not all attention (Qwen3-Next's Gated
    DeltaNet, Jamba's and Nemotron-H's Mamba, ...): tuner's KV, memory and kernel models put a
    KV cache and softmax attention on every layer, and a per-request recurrent state is not
    modelled, so such a model would be priced as a different one."""
    hybrid = _hybrid_layers(cfg)
    mamba_keys = any(str(k).startswith(("mamba_", "ssm_", "linear_num_")) for k in cfg)
    if hybrid is None and not mamba_keys and not _model_types(raw, cfg) & _HYBRID_TYPES:
        return
    layers = cfg.get("num_hidden_layers")
    if hybrid is not None and isinstance(layers, int) and layers > 0:
        attn, kind = hybrid
        what = (f"only {attn} of its {layers} layers are attention (the others {kind}), so "
                f"pricing every layer as attention would overstate its KV cache "
                f"{layers / max(attn, 1):.0f}x")
    else:
        what = "it mixes state-space / linear-attention layers with attention"
    raise TunerError(
        f"{path}: {_arch_label(raw)} is a hybrid model: {what}. Of the hybrids tuner prices "
        "only the Gated DeltaNet family (Qwen3-Next, Qwen3.5) and Granite-4.0-H's Mamba2 "
        "layers; other Mamba / SSM layers are not modelled, so it does not support this model.")


def _ernie_moe_layout(cfg: dict, layers: int, width: int, path: Path | str) -> tuple[int, int, int]:
    """(dense layers, shared experts, their total width) of an ERNIE-4.5 MoE config: layer i
    is MoE where (i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i <=
    moe_layer_end_index (vLLM's ernie45_moe.py; transformers' Ernie4_5_MoeConfig defaults:
    start 1, end -1 = the last layer, interval 1); moe_num_shared_experts experts as wide as
    a routed one run beside them (21B-A3B: 2)."""
    start = _config_count(cfg, ("moe_layer_start_index",), path) if "moe_layer_start_index" \
        in cfg else 1
    end = cfg.get("moe_layer_end_index", -1)
    if isinstance(end, bool) or not isinstance(end, int):
        raise TunerError(f"{path}: moe_layer_end_index must be an integer, got {end!r}.")
    end = layers - 1 if end == -1 else end
    interval = _config_int(cfg, "moe_layer_interval", path, default=1)
    moe_layers = sum(1 for i in range(layers) if (i + 1) % interval == 0 and start <= i <= end)
    shared = _config_count(cfg, ("moe_num_shared_experts",), path)
    return layers - moe_layers, shared, shared * width


#: model types whose layers tuner's shape cannot describe, and why (a one-line refusal)
_UNMODELLED_TYPES = {
    "gemma3n": "its per-layer embeddings, AltUp and LAuReL blocks, the KV cache its last "
               "layers share with earlier ones, and its audio and MobileNet vision towers have "
               "no counterpart in a decoder of identical attention + MLP layers",
}


def _refuse_unmodelled(raw: dict, cfg: dict, path: Path | str) -> None:
    """One TunerError for a config whose layers are not a stack of identical attention + MLP
    layers in a way the shape cannot express (Gemma-3n; per-layer FFN widths; ERNIE-4.5-VL's
    separate text and vision experts), rather than a misread field or a wrong figure."""
    types = {t.removesuffix("_text") for t in _model_types(raw, cfg)}
    for t, why in _UNMODELLED_TYPES.items():
        if t in types or any(a.lower().startswith(t) for a in _architectures(raw)):
            raise TunerError(f"{path}: {_arch_label(raw)} is not supported: {why}, so tuner "
                             "would price it as a different model.")
    for key in ("intermediate_size", "moe_num_experts", "num_attention_heads",
                "num_key_value_heads"):
        if isinstance(cfg.get(key), list):
            raise TunerError(f"{path}: {_arch_label(raw)} is not supported: its {key} differs "
                             f"by layer or modality ({cfg[key][:4]}...), and tuner prices "
                             "models whose every layer has one shape.")


def _vision_params(v: dict) -> int | None:
    """Parameters of a ViT vision encoder from its vision_config (transformer layers and patch
    embedding; projector and position embeddings left out), or None where the config lacks a
    figure. A silu encoder is gated (Pixtral, Qwen2.5-VL), another one not (SigLIP, mllama)."""
    d, ff, patch = (v.get(k) for k in ("hidden_size", "intermediate_size", "patch_size"))
    n = v.get("num_hidden_layers", v.get("depth"))
    if not all(isinstance(x, int) and x > 0 for x in (d, ff, n, patch)):
        return None
    n += v.get("num_global_layers") if isinstance(v.get("num_global_layers"), int) else 0
    mlp = (3 if str(v.get("hidden_act", "")).lower() in ("silu", "swish") else 2) * d * ff
    channels = next((v[k] for k in ("num_channels", "in_channels") if isinstance(v.get(k), int)),
                    3)
    frames = v.get("temporal_patch_size") if isinstance(v.get("temporal_patch_size"), int) else 1
    total = n * (4 * d * d + mlp) + channels * frames * patch * patch * d
    merge, out = v.get("spatial_merge_size"), v.get("out_hidden_size")
    if isinstance(merge, int) and isinstance(out, int) and merge > 0 and out > 0:
        wide = d * merge * merge  # Qwen2.5-VL's patch merger: an MLP over merge^2 patches
        total += wide * wide + wide * out
    return total


def _tower_params(raw: dict) -> int:
    """The vision tower's parameters (_vision_params) of a multimodal config.json, 0 where it
    has no vision_config or that config lacks the figures."""
    vision = raw.get("vision_config")
    return (_vision_params(vision) or 0) if isinstance(vision, dict) else 0


def config_notes(raw: dict) -> list[str]:
    """What a config.json's ModelSpec leaves out or approximates, one phrase each (shape_note
    prints them): an architecture outside LLAMA_STYLE_ARCHITECTURES, a non-gated MLP's
    equivalent width, a vision encoder's weights, mllama's cross-attention layers, Llama-4's
    chunked attention."""
    if not isinstance(raw, dict):
        return []
    cfg = _decoder_config(raw)
    notes = []
    archs = _architectures(raw)
    unknown = [a for a in archs if a not in LLAMA_STYLE_ARCHITECTURES
               and a not in _NON_GATED_ARCHITECTURES and a not in GATED_DELTANET_ARCHITECTURES
               and a not in MAMBA2_HYBRID_ARCHITECTURES and a not in NEMOTRON_H_ARCHITECTURES]
    nemotron_h = bool(_model_types(raw, cfg) & _NEMOTRON_H_TYPES)
    if nemotron_h:
        try:
            mixers, mlps = _nemotron_h_blocks(raw, cfg, "")
            mamba = _nemotron_h(raw, cfg, "")["linear_attention_layers"]
        except TunerError:
            mixers = mlps = mamba = 0  # the spec's own reading says what is wrong
        width = cfg.get("intermediate_size")
        if mixers and isinstance(width, int):
            notes.append(
                f"a Mamba2 hybrid of one-sublayer blocks: {mamba} Mamba2 and {mixers - mamba} "
                f"attention blocks are its layers, whose chunked SSD scan and conv1d are an "
                f"ESTIMATE (a spec-sheet roofline: no measured kernel); its {mlps} MLP blocks "
                f"(up and down, {width} wide) are spread over them as a gated MLP of the same "
                f"parameters and FLOPs, {_gated_equivalent(width * mlps / mixers)} wide a layer")
    if any(a in MAMBA2_HYBRID_ARCHITECTURES for a in archs):
        # priced as a Mamba2 hybrid (_mamba2_hybrid), not as the Llama-style fallback
        try:
            mamba = _mamba2_hybrid(raw, cfg, "").get("linear_attention_layers", 0)
        except TunerError:
            mamba = 0  # the spec's own reading says what is wrong
        which = (f"{mamba} of its {cfg.get('num_hidden_layers')} layers are Mamba2" if mamba
                 else "its Mamba2 layers")
        notes.append(f"a Mamba2 hybrid: {which}, whose chunked SSD scan and conv1d are an "
                     "ESTIMATE (a spec-sheet roofline: no measured kernel); their projections "
                     "and the attention layers are priced as any decoder's")
    if any(a in GATED_DELTANET_ARCHITECTURES for a in archs):
        try:
            linear = _gated_deltanet(raw, cfg, "").get("linear_attention_layers", 0)
        except TunerError:
            linear = 0  # the spec's own reading says what is wrong
        layers = cfg.get("num_hidden_layers")
        which = (f"{linear} of its {layers} layers are Gated DeltaNet" if linear else
                 "its Gated DeltaNet layers")
        notes.append(f"a Gated DeltaNet hybrid: {which}, whose recurrent scan and conv1d are "
                     "an ESTIMATE (a spec-sheet roofline: no measured kernel); their "
                     "projections and the attention layers are priced as any decoder's")
    if unknown:
        notes.append(f"architecture {'/'.join(unknown)} is not one tuner knows; priced as a "
                     "Llama-style decoder (attention and a gated MLP on every layer): check "
                     "its parameter count against the model card")
    width = cfg.get("intermediate_size")
    if not _gated_mlp(raw, cfg) and isinstance(width, int) and not nemotron_h:
        notes.append(f"its MLP is not gated (up and down, {width} wide): priced as a gated "
                     f"MLP of the same parameters and FLOPs ({_gated_equivalent(width)} wide)")
    cross = cfg.get("cross_attention_layers")
    layers = cfg.get("num_hidden_layers")
    if isinstance(cross, list) and cross and isinstance(layers, int):
        notes.append(f"its {len(cross)} cross-attention layers (of {layers}) are priced as "
                     f"self-attention layers: KV per token ~{100 * len(cross) / (layers - len(cross)):.0f} "
                     "% high; vLLM 0.11 and later no longer serve mllama (V0's encoder-decoder "
                     "path was removed)")
    chunk = cfg.get("attention_chunk_size")
    if isinstance(chunk, int) and chunk > 0 and not cfg.get("sliding_window"):
        layers = cfg.get("num_hidden_layers")
        try:
            _, chunked = _chunked_layers(cfg, layers, "") if isinstance(layers, int) else (0, 0)
        except TunerError:
            chunked = 0
        notes.append(f"its chunked local attention ({chunk:,}-token chunks on {chunked} of "
                     f"{layers} layers) is priced as a {chunk:,}-token sliding window, as vLLM "
                     "0.14 and later keep it (an upper bound: a chunk layer holds 0 to "
                     f"{chunk:,} tokens); vLLM before 0.14 keeps every token on every layer")
    vision = raw.get("vision_config")
    if isinstance(vision, dict):
        n = _vision_params(vision)
        size = (f"~{n / 1e9:.2f} B params, {2 * n / GIB:.1f} GiB at 16-bit" if n
                else "its size not given in vision_config")
        notes.append(f"text decoder: the vision encoder ({size}) counts in the weights "
                     "where the engine loads it for a text-only job (SGLang always; vLLM "
                     "until the release skips it under the zero --limit-mm-per-prompt "
                     "tuner's exports set), not in the parameters or the compute; its "
                     "start-up profiling is not counted"
                     if n else f"text decoder only: the vision encoder ({size}) is not "
                     "counted in the weights, nor its start-up activations")
    return notes


def model_from_config_dict(cfg: dict, *, where: str, name: str, source: str,
                           hf_id: str = "") -> ModelSpec:
    """A ModelSpec from the fields of a Hugging Face config.json; `where` names the file in
    errors. Reads dense GQA shapes and MoE (Mixtral, Qwen-MoE, gpt-oss, DeepSeek, ERNIE-4.5's
    moe_* keys, Llama-4's interleaved MoE layers and shared expert), MLA (DeepSeek) and
    sliding-window (Gemma-2/3, gpt-oss, Mistral; Llama-4's chunks as a window) fields; a
    non-gated MLP is stored at its gated-equivalent width (see ModelSpec), and a hybrid
    linear-attention / Mamba model (_refuse_hybrid) or one of per-layer shapes such as
    Gemma-3n (_refuse_unmodelled) is refused."""
    if not isinstance(cfg, dict):
        raise TunerError(f"{where}: a config.json holds a JSON object, got {type(cfg).__name__}.")
    raw, cfg = cfg, _decoder_config(cfg)
    path = where
    linear = _linear_layers(raw, cfg, path)
    heads = _config_int(cfg, "num_attention_heads", path)
    hidden = _config_int(cfg, "hidden_size", path)
    kv_heads = _config_int(cfg, "num_key_value_heads", path, default=heads)
    if heads % kv_heads:
        raise TunerError(f"{path}: num_attention_heads ({heads}) must be a multiple of "
                         f"num_key_value_heads ({kv_heads}).")
    layers = _config_int(cfg, "num_hidden_layers", path)
    kv_lora = _config_count(cfg, ("kv_lora_rank",), path)
    rope_dim = _config_count(cfg, ("qk_rope_head_dim",), path)
    if kv_lora:  # MLA: a query/key head is qk_nope + qk_rope wide, values v_head_dim
        head_dim = _config_int(cfg, "qk_nope_head_dim", path) + rope_dim
        v_head_dim = _config_int(cfg, "v_head_dim", path, default=head_dim)
    elif _model_types(raw, cfg) & _NEMOTRON_H_TYPES:
        # head_dim, else the remote-code config's attention_head_dim, else 128 (the 0.10.2
        # wheel's NemotronHConfig default): Nano-9B-v2's 40 heads of 128 are not 4480 / 40
        head_dim = _config_int(cfg, "head_dim", path, default=_config_int(
            cfg, "attention_head_dim", path, default=128))
        v_head_dim = 0
    else:
        head_dim = _config_int(cfg, "head_dim", path, default=max(hidden // heads, 1))
        v_head_dim = 0
    _refuse_unmodelled(raw, cfg, path)
    experts = _config_count(cfg, ("num_local_experts", "num_experts", "n_routed_experts",
                                  "moe_num_experts"), path)
    moe: dict[str, int] = {}
    intermediate = _config_int(cfg, "intermediate_size", path,
                               default=_config_count(cfg, ("moe_intermediate_size",), path) or None)
    if not experts and _model_types(raw, cfg) & _MAMBA2_TYPES:
        # a dense Granite-4.0 layer's MLP is its shared_mlp (vLLM granitemoehybrid.py)
        intermediate = _config_count(cfg, ("shared_intermediate_size",), path) or intermediate
    if experts:
        top_k = _config_count(cfg, ("num_experts_per_tok", "experts_per_token", "moe_k"), path)
        if not 0 < top_k <= experts:
            raise TunerError(f"{path}: an MoE config ({experts} experts) needs "
                             f"num_experts_per_tok between 1 and {experts}, got {top_k}.")
        width = _config_count(cfg, ("moe_intermediate_size",), path) or intermediate
        shared_n = _config_count(cfg, ("n_shared_experts",), path)
        shared_width = shared_n * width
        # Qwen2-MoE; GraniteMoeShared / GraniteMoeHybrid: shared_intermediate_size
        shared_key = ("shared_expert_intermediate_size", "shared_intermediate_size")
        if _config_count(cfg, shared_key, path):
            shared_n = 1
            shared_width = _config_count(cfg, shared_key, path)
        dense = _config_count(cfg, ("first_k_dense_replace",), path)
        step = _config_count(cfg, ("decoder_sparse_step",), path) or 1
        mlp_only = cfg.get("mlp_only_layers") or []
        if step > 1 or mlp_only:  # Qwen-MoE: dense where not every step-th layer, or listed
            dense = sum(1 for i in range(layers) if i in mlp_only or (i + 1) % step)
        if "moe_num_experts" in cfg:  # ERNIE-4.5: moe_layer_* name the MoE layers
            dense, shared_n, shared_width = _ernie_moe_layout(cfg, layers, width, path)
        if _is_llama4(cfg):
            # Llama-4: MoE on every interleave-th layer (Maverick 2: half, Scout 1: all), the
            # others dense at intermediate_size_mlp; each MoE layer adds one always-on shared
            # expert as wide as a routed one (transformers' Llama4TextMoe.shared_expert)
            dense = layers - _llama4_moe_layers(cfg, layers, path)
            intermediate = _config_int(cfg, "intermediate_size_mlp", path, default=intermediate)
            shared_n, shared_width = 1, width
        if dense > layers:
            raise TunerError(f"{path}: first_k_dense_replace ({dense}) exceeds "
                             f"num_hidden_layers ({layers}).")
        moe = dict(num_experts=experts, experts_per_token=top_k, moe_intermediate_size=width,
                   num_shared_experts=shared_n, shared_expert_intermediate_size=shared_width,
                   first_k_dense_layers=dense)
    if linear and _model_types(raw, cfg) & _NEMOTRON_H_TYPES:
        # Nemotron-H: a layer is a mixer block ('M' or '*'); the '-' blocks' MLPs, one per
        # block, are spread over them at the width of equal weights and FLOPs (then made the
        # gated equivalent below): 8B's 24 MLPs of 21504 over 28 layers, 12288 gated
        layers, mlp_blocks = _nemotron_h_blocks(raw, cfg, path)
        intermediate = intermediate * mlp_blocks / layers
    if not _gated_mlp(raw, cfg):
        # up + down (2 x hidden x W) priced as a gated MLP of equal parameters, FLOPs, bytes
        # and activation memory, 3 x hidden x 2W/3: every predictor's gated formula holds
        intermediate = _gated_equivalent(intermediate)
        if moe:
            moe["moe_intermediate_size"] = _gated_equivalent(moe["moe_intermediate_size"])
            moe["shared_expert_intermediate_size"] = _gated_equivalent(
                moe["shared_expert_intermediate_size"])
    window, window_layers = _window_layers(cfg, layers, path)
    spec = ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=_config_int(cfg, "vocab_size", path),
        max_position=_context_tokens(cfg, path),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        hf_id=hf_id,
        source=source,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope_dim if kv_lora else 0,
        q_lora_rank=_config_count(cfg, ("q_lora_rank",), path) if kv_lora else 0,
        v_head_dim=v_head_dim,
        **_sparse_attention(cfg, path, kv_lora),
        sliding_window=window,
        sliding_window_layers=window_layers,
        # vLLM's qwen3_next.py reads attn_output_gate with a default of True (Qwen3.5's
        # attention is the same class); a Mamba2 hybrid's attention has no such gate
        attn_output_gate=(bool(linear) and not linear.get("linear_mixer")
                          and cfg.get("attn_output_gate", True) is not False),
        **_checkpoint_precision(cfg, path),
        **moe,
        **linear,
        vision_params=_tower_params(raw),
    )
    q = cfg.get("quantization_config") or cfg.get("compression_config") or {}
    names = [str(x) for key in ("modules_to_not_convert", "ignore", "exclude_modules")
             for x in (q.get(key) or [])]
    return with_unconverted(spec, names, key_said="modules_to_not_convert")


def _layer_modules(spec: ModelSpec) -> list[tuple[str, int]]:
    """(module name as a Llama-style checkpoint names it, parameters) of every attention
    projection and dense MLP projection (an MoE layer's routed experts are left out: their
    names differ by family). An MLA model's are DeepSeek's (deepseek_v2.py): q_a_proj /
    q_b_proj (q_proj without q_lora), kv_a_proj_with_mqa, kv_b_proj, o_proj, and its MoE
    layers' shared experts (mlp.shared_experts.*, dense MLPs every token runs, counted with
    the dense MLPs): Kimi-K2-Thinking's INT4 checkpoint keeps both at 16 bits
    ("re:.*self_attn.*", "re:.*shared_experts.*" in its ignore list)."""
    h, heads, d, dv = spec.hidden_size, spec.num_heads, spec.head_dim, spec.value_head_dim
    kv = spec.num_kv_heads
    attn = [("q_proj", h * heads * d), ("k_proj", h * kv * d), ("v_proj", h * kv * dv),
            ("o_proj", heads * dv * h)]
    shared = []
    if spec.is_mla:
        ql, kl, rope = spec.q_lora_rank, spec.kv_lora_rank, spec.qk_rope_head_dim
        q = ([("q_a_proj", h * ql), ("q_b_proj", ql * heads * d)] if ql
             else [("q_proj", h * heads * d)])
        attn = q + [("kv_a_proj_with_mqa", h * (kl + rope)),
                    ("kv_b_proj", kl * heads * (d - rope + dv)), ("o_proj", heads * dv * h)]
        shared = [(f"shared_experts.{n}", h * spec.shared_expert_intermediate_size)
                  for n in ("gate_proj", "up_proj", "down_proj")
                  if spec.shared_expert_intermediate_size]
    mlp = [(n, h * spec.intermediate_size) for n in ("gate_proj", "up_proj", "down_proj")]
    dense = set(range(spec.num_dense_layers)) if spec.is_moe else set(range(spec.num_layers))
    out = []
    for i in range(spec.num_layers):
        out += [(f"model.layers.{i}.self_attn.{n}", c) for n, c in attn]
        out += [(f"model.layers.{i}.mlp.{n}", c) for n, c in (mlp if i in dense else shared)]
    return out


def _module_matches(name: str, pattern: str) -> bool:
    """A quantization config's exclusion entry against a module name: "re:" a regular
    expression (compressed-tensors), a "*" wildcard (gpt-oss's "model.layers.*.self_attn":
    transformers matches the entries as patterns) matching the module or a parent of it, else
    the module itself, a parent of it, or its last part."""
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], name) is not None
        except re.error:
            return False
    if "*" in pattern:
        return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*")
    return name == pattern or name.startswith(pattern + ".") or name.endswith("." + pattern)


def with_unconverted(spec: ModelSpec, patterns: list[str], key_said: str) -> ModelSpec:
    """`spec` with the share of its matmul weights that a quantized checkpoint leaves at 16
    bits (its exclusion list, `patterns`) said in checkpoint_quantization, which the memory
    plan and the timing read (weight_bytes_per_param); `spec` itself where none is left out
    (lm_head alone is always 16-bit here)."""
    if spec.checkpoint_bits >= 16 or not patterns:
        return spec
    total = {"attn": 0, "mlp": 0}
    kept = {"attn": 0, "mlp": 0}
    for n, c in _layer_modules(spec):
        kind = "attn" if ".self_attn." in n else "mlp"
        total[kind] += c
        if any(_module_matches(n, p) for p in patterns):
            kept[kind] += c
    if not (kept["attn"] or kept["mlp"]):
        return spec
    share = 100.0 * (kept["attn"] + kept["mlp"]) / spec.linear_params_total
    # the split by projection kind: their GEMMs run at the 16-bit rate (unconverted_split)
    attn, mlp = (100.0 * kept[k] / total[k] if total[k] else 0.0 for k in ("attn", "mlp"))
    return replace(spec, checkpoint_quantization=(
        f"{spec.checkpoint_quantization}, {share:.2f} % of matmul weights at 16 bits "
        f"({key_said}; attention projections {attn:.2f} %, dense MLPs {mlp:.2f} % at 16 "
        f"bits)"))


def _sparse_attention(cfg: dict, path: Path | str, kv_lora: int) -> dict:
    """DeepSeek sparse attention's indexer (index_topk, index_n_heads, index_head_dim), read
    where an MLA config has index_topk; {} otherwise."""
    topk = _config_count(cfg, ("index_topk",), path)
    if not (kv_lora and topk):
        return {}
    return {"index_topk": topk, "index_n_heads": _config_int(cfg, "index_n_heads", path),
            "index_head_dim": _config_int(cfg, "index_head_dim", path)}


#: quantization_config methods whose weight precision is fixed by the method itself
_QUANT_METHOD_BITS = {"fp8": 8, "fbgemm_fp8": 8, "mxfp4": 4}


def _checkpoint_precision(cfg: dict, path: Path | str) -> dict:
    """{checkpoint_bits, checkpoint_quantization} from config.json's quantization_config
    (or compression_config): the precision vLLM serves the checkpoint's weights at. FP8
    (DeepSeek-V3's e4m3 in 128x128 blocks, FBGEMM, ModelOpt FP8, compressed-tensors 8-bit),
    4-bit (AWQ, GPTQ, MXFP4, NVFP4, compressed-tensors 4-bit), bitsandbytes; anything else is
    refused by name rather than priced as 16-bit."""
    q = cfg.get("quantization_config") or cfg.get("compression_config")
    if not q:
        return {}
    if not isinstance(q, dict):
        raise TunerError(f"{path}: quantization_config must be an object, got {q!r}.")
    method = str(q.get("quant_method") or q.get("quant_algo") or "").lower()
    bits: object = _QUANT_METHOD_BITS.get(method)
    detail = method
    if method == "fp8" and isinstance(q.get("weight_block_size"), list):
        detail = "fp8, blocks " + "x".join(str(b) for b in q["weight_block_size"])
    elif method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round", "auto_round"):
        bits = q.get("bits", q.get("w_bit"))
        detail = f"{method}, {bits}-bit" + _group_detail(q.get("group_size", q.get("q_group_size")))
    elif method == "modelopt":
        algo = str(q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo") or "")
        bits = {"FP8": 8, "NVFP4": 4, "W4A8_AWQ": 4}.get(algo.upper())
        detail = f"modelopt {algo}"
    elif method == "compressed-tensors":
        groups = [g for g in (q.get("config_groups") or {}).values() if isinstance(g, dict)]
        widths = {(g.get("weights") or {}).get("num_bits") for g in groups} - {None}
        bits = max(widths) if widths else None
        kinds = {str((g.get("weights") or {}).get("type", "")) for g in groups} - {""}
        sizes = {(g.get("weights") or {}).get("group_size") for g in groups} - {None}
        detail = (f"compressed-tensors, {bits}-bit {'/'.join(sorted(kinds))}".rstrip()
                  + (_group_detail(min(sizes)) if len(sizes) == 1 else ""))
    elif method == "bitsandbytes":
        bits = 4 if q.get("load_in_4bit") else 8 if q.get("load_in_8bit") else None
        detail = f"bitsandbytes, {bits}-bit" + (
            ", double quant" if bits == 4 and q.get("bnb_4bit_use_double_quant") else "")
    if bits not in (4, 8):
        raise TunerError(
            f"{path}: quantization_config {method or q!r} "
            f"{'at ' + str(bits) + ' bits ' if bits else ''}is not one tuner prices (FP8, "
            "AWQ/GPTQ, MXFP4/NVFP4, compressed-tensors, bitsandbytes at 8 or 4 bits); give a "
            "config.json without it and --weight-bits for the precision vLLM will serve.")
    return {"checkpoint_bits": int(bits), "checkpoint_quantization": detail}


def _group_detail(group: object) -> str:
    """", group N" for a quantization group size the config names (scale_bytes_per_weight
    reads it back); "" where it names none."""
    if isinstance(group, bool) or not isinstance(group, int):
        return ""
    return f", group {group}"


def _read_config_json(path: Path) -> dict:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TunerError(f"Cannot read model config {path}: {exc}.") from None
    if not isinstance(cfg, dict):
        raise TunerError(f"{path}: a config.json holds a JSON object, got {type(cfg).__name__}.")
    return cfg


def model_from_hf_config(path: str | Path, *, hf_id: str = "") -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (file or directory holding one); every shape
    field is checked (a positive integer, heads divisible by KV heads) with one clear error."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    cfg = _read_config_json(path)
    name = hf_id or str(cfg.get("_name_or_path") or path.parent.name or path.stem)
    return model_from_config_dict(cfg, where=str(path), name=name, source=str(path), hf_id=hf_id)


class HubConfigUnavailable(TunerError):
    """A repo's config.json could not be read (offline, no network, or a gated repo), though
    the repo may exist: get_model may then lend it a catalog entry's shape by its name.
    `reason`: why it could not be read."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


#: suffixes of a repo name that keep its base model's shape: the weights' FP8 form (its
#: precision is kept apart), and a tuned variant (-Instruct, -chat-hf, -Instruct-v0.3)
_FP8_SUFFIX = re.compile(r"-fp8(-dynamic)?$", re.I)
_TUNED_SUFFIX = re.compile(r"-(instruct|chat|hf|it)(-[\w.]+)?$", re.I)
#: words of a repo name that say its weights are quantized, and the bits each implies (None:
#: quantized, bits unsaid): "Qwen2.5-7B-Instruct-AWQ", "Llama-3.3-70B-Instruct-quantized.w8a8"
_QUANT_WORDS: dict[str, int | None] = {
    "awq": 4, "gptq": None, "w4a16": 4, "w4a8": 4, "int4": 4, "4bit": 4, "nvfp4": 4, "nf4": 4,
    "mxfp4": 4, "fp4": 4, "w8a8": 8, "w8a16": 8, "int8": 8, "8bit": 8, "quantized": None,
    "bnb": None, "gguf": None, "exl2": None}
#: trailing quantization words of a repo name ("-AWQ", "-GPTQ-Int4", "-quantized.w8a8")
_QUANT_SUFFIX = re.compile(r"([-_.](" + "|".join(_QUANT_WORDS) + r"|g\d+))+$", re.I)


def _base_name(ref: str) -> str:
    """"meta-llama/Meta-Llama-3.1-8B-Instruct-FP8" -> "llama-3.1-8b": a repo name without its
    owner, FP8, quantization and tuned-variant suffixes, a trailing version or Meta's "Meta-"
    prefix."""
    n = _QUANT_SUFFIX.sub("", _FP8_SUFFIX.sub("", ref.strip().rsplit("/", 1)[-1].lower()))
    n = _TUNED_SUFFIX.sub("", n)
    return re.sub(r"-v\d+(\.\d+)*$", "", n.removeprefix("meta-"))


def quantized_name_bits(ref: str) -> tuple[int | None, list[str]]:
    """(bits, words) where a repo's name says its weights are quantized: the words found
    (`_QUANT_WORDS`) and the bits they imply together, None where they do not say or disagree
    (GPTQ is 4-bit unless the name says 8); (None, []) for a name that says nothing."""
    words = [w for w in re.split(r"[-_./]", ref.strip().rsplit("/", 1)[-1].lower())
             if w in _QUANT_WORDS]
    said = {_QUANT_WORDS[w] for w in words} - {None}
    if not said and "gptq" in words:
        said = {4}
    return (said.pop() if len(said) == 1 else None), words


def catalog_base_model(ref: str, models: dict[str, ModelSpec] | None = None) -> str | None:
    """The catalog entry whose shape a repo `ref` is named after, or None: the same base name
    ("Meta-Llama-3-8B-Instruct" -> llama-3-8b), else a fine-tune named after its base
    ("Hermes-3-Llama-3.1-405B-FP8" -> llama-3.1-405b; the longest such name)."""
    models = load_models() if models is None else models
    aliases = model_aliases(models)
    exact = aliases.get(_FP8_SUFFIX.sub("", ref.strip()).lower())
    if exact is not None:
        return exact
    want = _base_name(ref)
    if not want:
        return None
    for alias, name in aliases.items():
        if want in (name, _base_name(alias)):
            return name
    named = [k for k in models if want.endswith("-" + k)]
    return max(named, key=len) if named else None


def is_fp8_repo(ref: str) -> bool:
    """The repo's name says its weights are FP8 (neuralmagic/...-FP8, ...-FP8-dynamic)."""
    return bool(_FP8_SUFFIX.search(ref.strip()))


def _hf_cache_dir() -> str | None:
    """The Hub cache folder as the environment names it now (huggingface_hub reads HF_HOME /
    HF_HUB_CACHE once, at import); None = the library's default."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return os.environ[var]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return None


def _hf_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hf_config_path(repo_id: str) -> Path:
    """config.json of Hugging Face repo `repo_id`: downloaded with huggingface_hub into the HF
    cache, or, offline (HF_HUB_OFFLINE=1 or no network), the copy already in that cache."""
    try:
        from huggingface_hub import (
            get_hf_file_metadata,
            hf_hub_download,
            hf_hub_url,
            try_to_load_from_cache,
        )
        from huggingface_hub.errors import (
            GatedRepoError,
            HFValidationError,
            RepositoryNotFoundError,
        )
    except ImportError:  # pragma: no cover - a core dependency
        raise TunerError(f"Cannot fetch {repo_id!r}: huggingface_hub is not installed; pass "
                         "the path to its config.json instead.") from None
    cache_dir = _hf_cache_dir()
    how = (f"download it (`hf download {repo_id} config.json`) or pass the path to its "
           "config.json or model folder as --model")
    why = "offline (HF_HUB_OFFLINE is set)"
    unreadable = True  # the repo may exist: offline, no network, or gated
    if not _hf_offline():
        # the library logs each network retry as a warning; the one error below says it all
        import logging

        hub_logger = logging.getLogger("huggingface_hub")
        level = hub_logger.level
        hub_logger.setLevel(logging.ERROR)
        try:
            # one HEAD request first: hf_hub_download retries a dead network for ~25 s when
            # nothing is cached; this fails at once and the cache (or the error) answers
            get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=5)
            return Path(hf_hub_download(repo_id, "config.json", cache_dir=cache_dir,
                                        etag_timeout=5))
        except GatedRepoError:
            why = "the repo is gated (accept its licence on huggingface.co and log in)"
        except RepositoryNotFoundError:
            why = "no such repo on the Hugging Face Hub (or it is private)"
            unreadable = False
        except HFValidationError as exc:
            raise TunerError(f"{repo_id!r} is not a Hugging Face repo id ({exc}).") from None
        except Exception as exc:  # network down, timeouts, HTTP errors: fall back to the cache
            why = (f"cannot reach the Hugging Face Hub ({type(exc).__name__}; HF_HUB_OFFLINE=1 "
                   "skips it)")
        finally:
            hub_logger.setLevel(level)
    cached = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir)
    if isinstance(cached, str):
        return Path(cached)
    msg = (f"No config.json for {repo_id!r}: {why}, and none in the local Hugging Face "
           f"cache{f' ({cache_dir})' if cache_dir else ''}; {how}.")
    raise HubConfigUnavailable(msg, why) if unreadable else TunerError(msg)


def _catalog_repo(key: str, name: str, spec: ModelSpec) -> str:
    """The Hugging Face repo `key` names among catalog entry `name`'s ids (its hf_id and the
    owner/name aliases; case-insensitive, with or without the owner), as the catalog spells it;
    the entry's hf_id for its catalog name or a nickname."""
    raw = _load_catalog_yaml().get(name) or {}
    repos = [spec.hf_id, *(a for a in raw.get("aliases") or [] if "/" in str(a))]
    k = key.lower()
    for repo in repos:
        if repo and k in (repo.lower(), repo.rpartition("/")[2].lower()):
            return repo
    return spec.hf_id


def _local_checkpoint(key: str, path: Path) -> str:
    """What an engine loads for the local `key` (as typed, `~` expanded): the folder itself,
    or the folder holding a config.json file."""
    typed = str(Path(key).expanduser()) if key.startswith("~") else key
    if path.is_dir():
        return typed
    return os.path.dirname(typed) or "."


def _named_after_catalog(repo: str, models: dict[str, ModelSpec], why: str) -> ModelSpec | None:
    """`repo` priced with the shape of the catalog entry it is named after, where its own
    config.json cannot be read (`why`): said in `source`, which shape_note prints.
    An FP8-named repo keeps FP8 weights, as vLLM serves them, and one whose name says its
    bits (-AWQ, -GPTQ-Int4: 4; -quantized.w8a8, -Int8: 8) keeps them; None (the caller's
    "No config.json" error) for a name that says it is quantized without saying the bits
    (-quantized, -bnb), or bits other than the catalog entry's own quantized checkpoint's."""
    name = catalog_base_model(repo, models)
    if name is None:
        return None
    spec = models[name]
    bits, words = quantized_name_bits(repo)
    quant: dict = {}
    said = ""
    if is_fp8_repo(repo) and spec.checkpoint_bits == 16:
        quant = {"checkpoint_bits": 8, "checkpoint_quantization": "fp8 (from the repo name)"}
        said = "; FP8 weights, from the name"
    elif words:
        if bits is None or (spec.checkpoint_bits != 16 and bits != spec.checkpoint_bits):
            return None  # quantized, at bits the name does not settle: guess nothing
        if spec.checkpoint_bits == 16:
            how = "/".join(dict.fromkeys(words))
            quant = {"checkpoint_bits": bits,
                     "checkpoint_quantization": f"{how}, {bits}-bit (from the repo name)"}
            said = f"; {bits}-bit {how} weights, from the name"
    out = replace(spec, hf_id=repo, checkpoint=repo, **quant,
                  source=f"catalog {name}'s shape, {ASSUMED_FROM_NAME} {repo} (its "
                         f"config.json unread: {why}){said}")
    if quant and repo.lower().startswith("meta-llama/") and is_fp8_repo(repo):
        # Meta's own FP8 checkpoints (FBGEMM; Llama-3.1-405B-Instruct-FP8) keep every
        # attention projection and the first and last layers' MLPs in BF16
        last = spec.num_layers - 1
        out = with_unconverted(out, ["re:.*self_attn.*", "model.layers.0.mlp",
                                     f"model.layers.{last}.mlp"],
                               key_said="Meta's FBGEMM FP8 list, from the repo name")
    return out


#: what `source` says of a model priced with a catalog shape its repo name points to
ASSUMED_FROM_NAME = "assumed from the name"


def assumed_shape(spec: ModelSpec) -> str | None:
    """Where `spec`'s shape is assumed from a repo name (its config.json unread): that, and
    how to price its own shape; else None (the shape was read from a config.json)."""
    if ASSUMED_FROM_NAME not in spec.source:
        return None
    return f"{spec.source}; pass its config.json (or go online) to price its own shape"


def shape_note(spec: ModelSpec) -> str | None:
    """One line for the commands that price `spec`, where its shape is assumed from a repo
    name (its config.json unread) or its config.json describes what the shape leaves out or
    approximates (config_notes: a vision encoder, cross-attention layers, a non-gated MLP, an
    unknown architecture), else None."""
    notes = []
    if assumed := assumed_shape(spec):
        notes.append(assumed)
    notes += config_notes(_source_config(spec.source))
    return "model: " + "; ".join(notes) if notes else None


def _source_config(source: str) -> dict:
    """The config.json a ModelSpec was read from (`source`: a path, or a shipped catalog
    config), {} where there is none or it cannot be read now (a note is never an error)."""
    shipped = re.fullmatch(r"catalog \((configs/[^)]+)\)", source)
    try:
        if shipped:
            return _catalog_config(shipped[1].removeprefix("configs/"))[0]
        path = Path(source)
        return json.loads(path.read_text()) if source and path.is_file() else {}
    except (OSError, UnicodeDecodeError, ValueError):
        return {}


def get_model(name_or_path: str, models: dict[str, ModelSpec] | None = None) -> ModelSpec:
    """A catalog model (case-insensitive: its name, HF id, or the id without the owner), a
    path to a Hugging Face config.json or a model folder holding one, or a Hugging Face repo id
    (its config.json fetched into the HF cache, or read from that cache offline).

    `checkpoint` (what every export tells the engine to load) is the model the user named: the
    HF id or alias typed (a catalog entry lends its shape, never its name: -Instruct stays
    -Instruct), the local folder (also the display name; a config's `_name_or_path` says
    where it was copied from, not what it is), or a catalog name's hf_id."""
    models = load_models() if models is None else models
    key = name_or_path.strip()
    if not key:  # Path("") is the current folder: it would be read as a model folder
        raise TunerError("No model given (an empty name); see `tuner models` for the catalog, "
                         "or give a Hugging Face id or a folder with a config.json.")
    for name, spec in models.items():
        if name.lower() == key.lower():
            return replace(spec, checkpoint=spec.hf_id)
    aliases = {a: n for a, n in model_aliases(models).items() if n in models}
    if key.lower() in aliases:
        name = aliases[key.lower()]
        spec = models[name]
        repo = _catalog_repo(key, name, spec)
        return replace(spec, hf_id=repo, checkpoint=repo)
    p = Path(key).expanduser()
    if p.exists():
        checkpoint = _local_checkpoint(key, p)
        return replace(model_from_hf_config(p), name=checkpoint, hf_id="", checkpoint=checkpoint)
    if _HF_ID.match(key) and not key.startswith((".", "/", "~")) and not key.endswith(".json"):
        try:
            path = hf_config_path(key)
        except HubConfigUnavailable as exc:
            spec = _named_after_catalog(key, models, exc.reason)
            if spec is None:
                raise
            return spec
        return replace(model_from_hf_config(path, hf_id=key), checkpoint=key)
    if key.endswith(".json") or key.startswith((".", "/", "~")):
        raise TunerError(f"Model config {key} does not exist (pass a config.json, a folder "
                         "holding one, a catalog name or a Hugging Face repo id).")
    raise TunerError(
        f"Unknown model {name_or_path!r}.{close_matches_hint(name_or_path, models)} "
        "(`tuner models` lists them; or pass a Hugging Face repo id, or a path to a "
        "config.json or a model folder.)"
    )


__all__ = [
    "GPU", "GIB", "GPU_FIELD_RANGES", "HubConfigUnavailable", "MAX_PRICE_USD_PER_H", "ModelSpec",
    "apply_prices", "catalog_base_model", "check_checkpoint_ref", "get_gpu", "get_model",
    "config_notes", "hf_config_path", "is_fp8_repo", "quantized_name_bits", "scale_bytes_per_weight",
    "shape_note",
    "load_gpus", "load_models", "model_aliases", "model_from_config_dict", "model_from_hf_config",
    "parse_price_overrides", "weight_bytes_per_param",
]
