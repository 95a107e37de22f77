"""What to measure: the feature grids of every operation at one model's shapes (no torch here).

Token counts run 1...8192, dense near powers of two and at tile multiples (Sarathi-Serve §4.3:
a matmul over 257 rows can cost a third more than over 256, so the grid holds 2^i and 2^i + 1
and multiples of 128). Attention runs over (chunk, context) for prefill and (batch, KV length)
for decode; copies over 4 KiB...8 GiB (capped by free memory); (de)quantization over tensor
sizes for 8 and 4 bits; CPU ops over intra-op and inter-op thread counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.predictors.opmath import LINEAR_OPS, flops_bytes, linear_dims
from tuner.profilers.schema import Case

KIB, MIB, GIB = 1024, 1024**2, 1024**3
GROUP_SIZE = 64  # FlexGen's default quantization group (LM-Offload, Alg. 2)


@dataclass(frozen=True)
class PlanLimits:
    """Caps that keep a profile within the device's memory and the time budget."""

    device: str  # "cuda" | "cpu"
    quick: bool = False
    max_tokens: int = 8192
    max_copy_bytes: int = 8 * GIB
    max_quant_bytes: int = 256 * MIB
    max_prefill_work: float = float("inf")  # chunk * (context + chunk / 2)
    max_decode_kv_tokens: int = 1 << 22  # batch * kv_len
    max_context: int = 32768
    cpu_threads: tuple[int, ...] = (1,)
    interop_threads: tuple[int, ...] = (1,)
    families: frozenset[str] = field(default_factory=lambda: frozenset(FAMILIES))


FAMILIES = ("linear", "elementwise", "lm_head", "attention", "copy", "quant", "threads")


def token_grid(max_tokens: int = 8192, quick: bool = False) -> list[int]:
    """1...max_tokens: powers of two, 2^i + 1 (tile quantisation), 3 * 2^i, multiples of 128."""
    pw = [1 << i for i in range(14)]
    pts = set(pw)
    pts.update(3 << i for i in range(12))
    if quick:
        pts.update((129, 257, 513, 1025))
    else:
        pts.update((1 << i) + 1 for i in range(4, 13))
        pts.update(128 * k for k in range(1, 17))
        pts.update(1024 * k for k in range(1, 9))
        pts.update((5, 12, 24, 48, 80, 96, 160, 192, 320, 448))
    return sorted(t for t in pts if 1 <= t <= max_tokens)


def _sizes(lo: int, hi: int, step: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= step
    return out


def build_plan(model, limits: PlanLimits, dtype_bytes: float) -> list[Case]:
    """Every Case of a profile, cheap ones first within each family."""
    fam = limits.families
    cases: list[Case] = []
    h, d = model.hidden_size, model.head_dim
    toks = token_grid(limits.max_tokens, limits.quick)

    def fb(op, **kw):
        f, b = flops_bytes(op, model, dtype_bytes=dtype_bytes, **kw)
        return float(f), float(b)

    if "linear" in fam:
        for op in LINEAR_OPS:
            k, n = linear_dims(op, model)
            for t in toks:
                f, b = fb(op, tokens=t)
                cases.append(Case(op, tokens=t, shape=f"{t}x{k}->{n}", flops=f, bytes_moved=b))
    if "elementwise" in fam:
        widths = {"norm": f"{h}", "activation": f"2x{model.intermediate_size}",
                  "rotary": f"({model.num_heads}+{model.num_kv_heads})x{d}", "add": f"{h}"}
        for op in ("norm", "activation", "rotary", "add"):
            for t in toks:
                f, b = fb(op, tokens=t)
                cases.append(Case(op, tokens=t, shape=f"{t}x{widths[op]}", flops=f, bytes_moved=b))
    if "lm_head" in fam:
        for t in toks:
            f, b = fb("lm_head", tokens=t)
            cases.append(Case("lm_head", tokens=t, shape=f"{t}x{h}->{model.vocab_size}",
                              flops=f, bytes_moved=b))
    if "attention" in fam:
        cases += _attention_cases(model, limits, fb)
    if "copy" in fam:
        cases += _copy_cases(limits)
    if "quant" in fam:
        cases += _quant_cases(limits, dtype_bytes)
    if "threads" in fam:
        cases += thread_cases(model, limits, dtype_bytes)
    return cases


def _attention_cases(model, limits: PlanLimits, fb) -> list[Case]:
    cases = []
    max_ctx = min(limits.max_context, int(getattr(model, "max_position", 4096)))
    if limits.quick:
        chunks = [16, 64, 256, 1024, 2048]
        contexts = [0, 512, 2048]
    else:
        chunks = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
        contexts = [0, 128, 512, 1024, 2048, 4096, 8192, 16384]
    for c in chunks:
        for k in contexts:
            if c > limits.max_tokens or c + k > max_ctx or c * (k + c / 2) > limits.max_prefill_work:
                continue
            f, b = fb("attn.prefill", tokens=c, context=k)
            cases.append(Case("attn.prefill", tokens=c, context=k,
                              shape=f"q {c}x{model.num_heads}x{model.head_dim}, kv {c + k}x"
                              f"{model.num_kv_heads}", flops=f, bytes_moved=b))
    if limits.quick:
        batches = [1, 4, 16, 64, 256]
        kvs = [16, 128, 1024, 4096]
    else:
        batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        kvs = [16, 64, 256, 1024, 2048, 4096, 8192, 16384]
    for bt in batches:
        for kv in kvs:
            if kv > max_ctx or bt * kv > limits.max_decode_kv_tokens:
                continue
            f, b = fb("attn.decode", batch=bt, kv_len=kv)
            cases.append(Case("attn.decode", batch=bt, kv_len=kv,
                              shape=f"{bt} x kv {kv}x{model.num_kv_heads}x{model.head_dim}",
                              flops=f, bytes_moved=b))
    return cases


def _copy_cases(limits: PlanLimits) -> list[Case]:
    cases = []
    step = 4 if limits.quick else 2
    sizes = _sizes(4 * KIB, limits.max_copy_bytes, step)
    if limits.device == "cuda":
        for direction in ("copy.h2d", "copy.d2h"):
            for mem in ("pinned", "pageable"):
                for s in sizes:
                    cases.append(Case(direction, variant=mem, size_bytes=s, shape=f"{s} B",
                                      bytes_moved=float(s)))
    else:
        for direction in ("copy.h2d", "copy.d2h"):
            cases.append(Case(direction, variant="skipped"))  # recorded with the reason
        for s in sizes:
            cases.append(Case("copy.host", variant="pageable", size_bytes=s, shape=f"{s} B",
                              bytes_moved=float(2 * s)))
    return cases


def _quant_cases(limits: PlanLimits, dtype_bytes: float) -> list[Case]:
    cases = []
    sizes = _sizes(16 * KIB, limits.max_quant_bytes, 4)
    wheres = ("device", "cpu") if limits.device == "cuda" else ("device",)
    for where in wheres:
        # on a CPU the tensor is float32 whatever the profile's dtype (profile.case_dtype,
        # ops.OpFactory._quant): `size_bytes` of it hold 4-byte elements
        elem = 4.0 if where == "cpu" or limits.device != "cuda" else dtype_bytes
        for bits in (8, 4):
            for s in sizes:
                numel = s / elem
                for op in ("quant", "dequant"):
                    cases.append(Case(op, variant=f"int{bits}/{where}", size_bytes=s, bits=bits,
                                      shape=f"{int(numel)} elements, groups of {GROUP_SIZE}",
                                      flops=5.0 * numel,
                                      bytes_moved=numel * (elem + bits / 8.0)))
    return cases


def thread_cases(model, limits: PlanLimits, dtype_bytes: float) -> list[Case]:
    """CPU matmul and CPU decode attention (LM-Offload's offloaded attention, §4) over
    intra-op x inter-op thread counts; each runs THREAD_TASKS independent ops at once."""
    from tuner.predictors.opmath import flops_bytes as _fb

    cases = []
    t = 64
    bt, kv = 8, min(1024, int(getattr(model, "max_position", 4096)))
    k, n = linear_dims("linear.gate_up", model)
    for inter in limits.interop_threads:
        for intra in limits.cpu_threads:
            f, b = _fb("cpu.matmul", model, tokens=t, dtype_bytes=4.0)
            cases.append(Case("cpu.matmul", variant=f"{THREAD_TASKS} tasks", tokens=t,
                              intra_threads=intra, inter_threads=inter, shape=f"{t}x{k}->{n}",
                              flops=THREAD_TASKS * float(f), bytes_moved=THREAD_TASKS * float(b)))
            f, b = _fb("cpu.attn.decode", model, batch=bt, kv_len=kv, dtype_bytes=4.0)
            cases.append(Case("cpu.attn.decode", variant=f"{THREAD_TASKS} tasks", batch=bt,
                              kv_len=kv, intra_threads=intra, inter_threads=inter,
                              shape=f"{bt} x kv {kv}x{model.num_kv_heads}x{model.head_dim}",
                              flops=THREAD_TASKS * float(f), bytes_moved=THREAD_TASKS * float(b)))
    return cases


THREAD_TASKS = 4  # independent ops forked at once (inter-op parallelism has something to run)
