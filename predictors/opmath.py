"""FLOPs and bytes of each profiled operation at a model's shapes (plain numpy, no torch).

The profiler writes these next to each measured time (columns `flops`, `bytes_moved`), and the
roofline transfer (predictors.transfer) uses them to turn a learned efficiency curve into a time
on another GPU or another model shape. `model` is duck-typed (a tuner ModelSpec or anything with
num_layers, hidden_size, num_heads, num_kv_heads, head_dim, intermediate_size, vocab_size).

Operation names (the `operation` column of a profile):
  linear.qkv, linear.o, linear.gate_up, linear.down   per-layer projections over `tokens`
  norm, activation, rotary, add                        per-layer element-wise ops over `tokens`
  lm_head                                              final projection over sampled rows
  attn.prefill                                         one chunk of `tokens` after `context`
  attn.decode                                          `batch` requests of `kv_len` KV tokens each
  copy.h2d, copy.d2h, copy.host                        `size_bytes` copied (variant pinned/pageable)
  quant, dequant                                       group-wise min-max of `size_bytes` of input
  cpu.matmul, cpu.attn.decode                          CPU ops vs intra/inter-op threads
"""

from __future__ import annotations

import numpy as np

from tuner.core.catalog import scale_bytes_per_weight, unconverted_split
from tuner.core.catalog import weight_bytes_per_param as _scheme_weight_bytes_per_param

# Per-layer operations whose cost depends only on the tokens in the step, and how many times
# each runs per layer (two RMSNorms and two residual adds per decoder layer).
TOKEN_OPS: dict[str, int] = {
    "linear.qkv": 1, "linear.o": 1, "linear.gate_up": 1, "linear.down": 1,
    "norm": 2, "activation": 1, "rotary": 1, "add": 2,
}
LINEAR_OPS = ("linear.qkv", "linear.o", "linear.gate_up", "linear.down")
ELEMENTWISE_OPS = ("norm", "activation", "rotary", "add")
ATTENTION_OPS = ("attn.prefill", "attn.decode")
COPY_OPS = ("copy.h2d", "copy.d2h", "copy.host")
QUANT_OPS = ("quant", "dequant")

# Roofline classes an efficiency curve is learned for (predictors.transfer).
EFFICIENCY_CLASS: dict[str, str] = {
    **{op: "gemm" for op in (*LINEAR_OPS, "lm_head")},
    **{op: "elementwise" for op in ELEMENTWISE_OPS},
    "attn.prefill": "attn.prefill",
    "attn.decode": "attn.decode",
    "copy.h2d": "copy.h2d",
    "copy.d2h": "copy.d2h",
    "copy.host": "copy.host",
}


LINK_CLASSES = ("copy.h2d", "copy.d2h")


def efficiency_class(op: str, variant: str = "") -> str | None:
    """Roofline class of an operation; host<->device copies keep pinned and pageable apart."""
    if op in QUANT_OPS:  # per kernel and bit width: int4 packs two codes per byte
        return f"{op}.{variant.split('/')[0]}" if variant else op
    if op in LINK_CLASSES and variant:
        return f"{op}.{variant}"
    return EFFICIENCY_CLASS.get(op)


def class_peaks(cls: str, specs) -> tuple[float, float]:
    """(peak FLOP/s, peak bytes/s) a class is measured against on a device (DeviceSpecs or
    its dict): host<->device copies against the host link, the rest against memory."""
    get = specs.get if isinstance(specs, dict) else (lambda k: getattr(specs, k))
    mem, link = get("mem_bytes_per_s"), get("link_bytes_per_s")
    if cls.startswith(LINK_CLASSES):
        return get("peak_flops"), float(link or mem)
    return get("peak_flops"), mem


def shape_dict(model) -> dict[str, int]:
    """The shape fields that decide every op's cost (stored in a profile's provenance)."""
    return {k: int(getattr(model, k)) for k in (
        "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
        "intermediate_size", "vocab_size")}


def linear_dims(op: str, model, tp: int = 1) -> tuple[int, int]:
    """(in_features K, out_features N) of a projection, per tensor-parallel rank."""
    h, d = model.hidden_size, model.head_dim
    q, kv = model.num_heads * d, model.num_kv_heads * d
    if op == "linear.qkv":
        # Qwen3-Next's output gate: q_proj emits a gate as wide as the queries (attn_output_gate)
        gate = q if getattr(model, "attn_output_gate", False) else 0
        return h, (q + gate + 2 * kv) // tp
    if op == "linear.o":
        return q // tp, h
    if op == "linear.gate_up":
        return h, 2 * model.intermediate_size // tp
    if op == "linear.down":
        return model.intermediate_size // tp, h
    if op == "lm_head":
        return h, model.vocab_size // tp
    raise ValueError(f"not a projection: {op}")


def weight_bytes_per_param(model, weight_bits: int) -> float:
    """Bytes a GEMM reads from memory per matmul weight of `model` at `weight_bits`, its
    share of the quantization scales included. The memory plan's own figure
    (ModelSpec.weight_bytes_per_param: the checkpoint's scheme, e.g. DeepSeek-V3's 128x128 FP8
    blocks, AWQ's group-128 scale + zero), so a step reads the bytes the plan holds. A
    duck-typed shape without that method (or None) is a 16-bit checkpoint vLLM quantizes at
    load (tuner.core.catalog.weight_bytes_per_param with no scheme)."""
    per_param = getattr(model, "weight_bytes_per_param", None)
    if callable(per_param):
        return float(per_param(weight_bits))
    return _scheme_weight_bytes_per_param(weight_bits)


def unconverted_shares(model, weight_bits: int) -> tuple[float, float]:
    """(attention, dense MLP): the share of each kind of projection's weights the checkpoint
    keeps at 16 bits at `weight_bits` (its modules_to_not_convert / ignore list,
    catalog.unconverted_split), whose GEMMs run at the 16-bit tensor rate and read 2 bytes a
    weight; (0, 0) for 16-bit weights, weights quantized at load, or a duck-typed shape."""
    scheme = getattr(model, "checkpoint_quantization", "") or ""
    if weight_bits >= 16 or getattr(model, "checkpoint_bits", 16) != weight_bits:
        return 0.0, 0.0
    return unconverted_split(scheme)


def quantized_bytes_per_param(model, weight_bits: int) -> float:
    """Bytes a GEMM reads per weight the checkpoint did quantize (scales included): the
    memory plan's mean (weight_bytes_per_param) less its 16-bit share (unconverted_shares),
    which the timing models price apart; the mean itself where no share is kept."""
    if unconverted_shares(model, weight_bits) == (0.0, 0.0):
        return weight_bytes_per_param(model, weight_bits)
    return weight_bits / 8.0 + scale_bytes_per_weight(weight_bits, model.checkpoint_quantization)


def _arr(v) -> np.ndarray:
    return np.asarray(v, dtype=np.float64)


def flops_bytes(op: str, model, *, tokens=0, context=0, batch=0, kv_len=0, size_bytes=0,
                bits=16, dtype_bytes: float = 2.0, tp: int = 1, weight_bits: int = 16,
                kv_bits: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bytes moved to/from memory) of one call of `op`; feature args may be arrays."""
    e = float(dtype_bytes)
    t = _arr(tokens)
    h, d = model.hidden_size, model.head_dim
    nh = max(model.num_heads // tp, 1)
    nkv = max(model.num_kv_heads // tp, 1)
    ffn = model.intermediate_size // tp
    if op in LINEAR_OPS or op == "lm_head":
        k, n = linear_dims(op, model, tp)
        # vLLM keeps the LM head 16-bit; quantized weights carry their scheme's scales
        wb = e if (weight_bits == 16 or op == "lm_head") else weight_bytes_per_param(model, weight_bits)
        return 2.0 * t * k * n, k * n * wb + t * (k + n) * e
    if op == "norm":
        return 4.0 * t * h, (2.0 * t * h + h) * e
    if op == "activation":
        return 5.0 * t * ffn, 3.0 * t * ffn * e
    if op == "rotary":
        width = (nh + nkv) * d
        return 3.0 * t * width, (2.0 * t * width + 2.0 * t * d) * e
    if op == "add":
        return t * h, 3.0 * t * h * e
    kv_e = e if kv_bits == 16 else kv_bits / 8.0
    if op == "attn.prefill":
        c, k = t, _arr(context)
        flops = 4.0 * nh * d * c * (k + 0.5 * c)
        return flops, 2.0 * c * nh * d * e + 2.0 * (c + k) * nkv * d * kv_e
    if op in ("attn.decode", "cpu.attn.decode"):
        b, kv = _arr(batch), _arr(kv_len)
        return 4.0 * nh * d * b * kv, 2.0 * b * kv * nkv * d * kv_e + 2.0 * b * nh * d * e
    if op in COPY_OPS:
        s = _arr(size_bytes)
        return 0.0 * s, s
    if op in QUANT_OPS:
        numel = _arr(size_bytes) / e
        return 5.0 * numel, numel * (e + _arr(bits) / 8.0)
    if op == "cpu.matmul":
        k, n = linear_dims("linear.gate_up", model, tp)
        return 2.0 * t * k * n, k * n * e + t * (k + n) * e
    raise ValueError(f"unknown operation {op!r}")
