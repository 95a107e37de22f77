"""torch callables for each profiled operation at a model's real shapes.

`OpFactory.build(case)` returns (fn, timer_kind): fn runs the op once on tensors allocated
up front (allocation is not timed). Weights are random, created once per operation and reused.
Attention uses torch's scaled_dot_product_attention (FlashAttention / memory-efficient kernels on
CUDA, the fused CPU kernel on CPU) with grouped-query heads as the model has them; a prefill
chunk attends causally to itself and to all `context` tokens before it.
"""

from __future__ import annotations

from collections.abc import Callable

from tuner.profilers.plan import GROUP_SIZE
from tuner.profilers.quant import dequantize, quantize
from tuner.profilers.schema import Case


class OpFactory:
    def __init__(self, torch, device: str, dtype, model):
        self.torch = torch
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        self.dtype = dtype
        self.m = model
        self._weights: dict[str, object] = {}
        self._rope: dict[int, tuple] = {}

    # ---- helpers --------------------------------------------------------------------------
    def _w(self, name: str, rows: int, cols: int):
        w = self._weights.get(name)
        if w is None:
            w = self.torch.randn(rows, cols, device=self.device, dtype=self.dtype) * 0.02
            self._weights[name] = w
        return w

    def _x(self, *shape, dtype=None, device=None):
        return self.torch.randn(*shape, device=device or self.device, dtype=dtype or self.dtype)

    def release(self) -> None:
        self._weights.clear()
        self._rope.clear()
        if self.is_cuda:  # pragma: no cover - GPU
            self.torch.cuda.empty_cache()

    # ---- dispatch -------------------------------------------------------------------------
    def build(self, case: Case) -> tuple[Callable[[], object], str]:
        op = case.operation
        if op.startswith("linear.") or op == "lm_head":
            return self._linear(case), "device"
        if op in ("norm", "activation", "rotary", "add"):
            return getattr(self, f"_{op}")(case.tokens), "device"
        if op == "attn.prefill":
            return self._prefill(case.tokens, case.context), "device"
        if op == "attn.decode":
            return self._decode(case.batch, case.kv_len), "device"
        if op.startswith("copy."):
            return self._copy(case), "host_sync"
        if op in ("quant", "dequant"):
            return self._quant(case)
        raise ValueError(f"no runner for {op}")

    # ---- per-layer ops --------------------------------------------------------------------
    def _linear(self, case: Case):
        from tuner.predictors.opmath import linear_dims

        F = self.torch.nn.functional
        k, n = linear_dims(case.operation, self.m)
        w = self._w(case.operation, n, k)
        x = self._x(case.tokens, k)
        return lambda: F.linear(x, w)

    def _norm(self, t: int):
        torch = self.torch
        h = self.m.hidden_size
        x = self._x(t, h)
        w = torch.ones(h, device=self.device, dtype=self.dtype)
        if hasattr(torch.nn.functional, "rms_norm"):
            return lambda: torch.nn.functional.rms_norm(x, (h,), w, 1e-6)

        def rms():  # pragma: no cover - torch < 2.4
            v = x.float().pow(2).mean(-1, keepdim=True)
            return (x.float() * torch.rsqrt(v + 1e-6)).to(x.dtype) * w

        return rms

    def _activation(self, t: int):
        F = self.torch.nn.functional
        gu = self._x(t, 2 * self.m.intermediate_size)
        ffn = self.m.intermediate_size

        def act():
            g, u = gu[:, :ffn], gu[:, ffn:]
            return F.silu(g) * u

        return act

    def _rotary(self, t: int):
        torch = self.torch
        d = self.m.head_dim
        q = self._x(t, self.m.num_heads, d)
        k = self._x(t, self.m.num_kv_heads, d)
        pos = torch.arange(t, device=self.device, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=self.device, dtype=torch.float32) / d))
        ang = torch.outer(pos, inv)
        cos = torch.cat((ang.cos(), ang.cos()), -1).to(self.dtype)[:, None, :]
        sin = torch.cat((ang.sin(), ang.sin()), -1).to(self.dtype)[:, None, :]
        half = d // 2

        def rot(x):
            return torch.cat((-x[..., half:], x[..., :half]), -1)

        return lambda: (q * cos + rot(q) * sin, k * cos + rot(k) * sin)

    def _add(self, t: int):
        a = self._x(t, self.m.hidden_size)
        b = self._x(t, self.m.hidden_size)
        return lambda: a + b

    # ---- attention ------------------------------------------------------------------------
    def _sdpa(self):
        F = self.torch.nn.functional
        gqa = self.m.num_heads != self.m.num_kv_heads
        if gqa:
            return lambda q, k, v, **kw: F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
        return F.scaled_dot_product_attention

    def _prefill(self, c: int, ctx: int):
        torch = self.torch
        d, nh, nkv = self.m.head_dim, self.m.num_heads, self.m.num_kv_heads
        q = self._x(1, nh, c, d)
        k = self._x(1, nkv, c + ctx, d)
        v = self._x(1, nkv, c + ctx, d)
        sdpa = self._sdpa()
        if ctx == 0:
            return lambda: sdpa(q, k, v, is_causal=True)
        if self.is_cuda:  # pragma: no cover - GPU: bottom-right causal bias keeps flash kernels
            from torch.nn.attention.bias import causal_lower_right

            mask = causal_lower_right(c, c + ctx)
        else:  # the CPU fused kernel takes a boolean mask
            mask = torch.ones(c, c + ctx, dtype=torch.bool, device=self.device).tril(ctx)
        return lambda: sdpa(q, k, v, attn_mask=mask)

    def _decode(self, b: int, kv: int):
        d, nh, nkv = self.m.head_dim, self.m.num_heads, self.m.num_kv_heads
        q = self._x(b, nh, 1, d)
        k = self._x(b, nkv, kv, d)
        v = self._x(b, nkv, kv, d)
        sdpa = self._sdpa()
        return lambda: sdpa(q, k, v)

    # ---- copies ---------------------------------------------------------------------------
    def _copy(self, case: Case):
        torch = self.torch
        n = case.size_bytes
        u8 = torch.uint8
        if case.operation == "copy.host":
            src = torch.ones(n, dtype=u8)
            dst = torch.empty(n, dtype=u8)
            return lambda: dst.copy_(src)
        pinned = case.variant == "pinned"  # pragma: no cover - GPU below
        host = torch.ones(n, dtype=u8, pin_memory=pinned)
        dev = torch.empty(n, dtype=u8, device=self.device)
        if case.operation == "copy.h2d":
            return lambda: dev.copy_(host, non_blocking=pinned)
        return lambda: host.copy_(dev, non_blocking=pinned)

    # ---- (de)quantization -----------------------------------------------------------------
    def _quant(self, case: Case):
        torch = self.torch
        where = case.variant.split("/")[-1]
        on_cpu = where == "cpu"
        dev = torch.device("cpu") if on_cpu else self.device
        dtype = torch.float32 if on_cpu or not self.is_cuda else self.dtype
        esize = torch.empty((), dtype=dtype).element_size()
        numel = max(GROUP_SIZE, case.size_bytes // esize)
        x = self._x(numel, dtype=dtype, device=dev)
        kind = "device" if dev.type == "cuda" else "cpu"
        if case.operation == "quant":
            return (lambda: quantize(x, case.bits, GROUP_SIZE)), kind
        q, mn, scale, n = quantize(x, case.bits, GROUP_SIZE)
        return (lambda: dequantize(q, mn, scale, case.bits, n, dtype=dtype)), kind
