"""Cost model from measured vLLM / SGLang kernel tables (NVIDIA AIConfigurator, predictors/data).

    cm = table_cost_model(model, gpu, tp=1)               # measured / transferred tables, or None
    cm = table_cost_model(model, gpu, framework="sglang")  # SGLang's kernels where shipped
    tables = KernelTables.load("H100")                    # or build from tables directly:
    cm = MeasuredTableCostModel.build(model, gpu, tables, tp=1)
    cm.iteration_time_s(features)                          # vectorised over many iterations

Three modules: predictors.aic_tables loads the tables and looks kernels up in them,
predictors.aic_transfer moves them to a GPU without tables, and this one prices iterations from
them (the interpolation both use lives in predictors.tables).

Where the numbers come from (all per tensor-parallel rank, per layer unless said):
  linear     measured GEMM latency at the model's shapes: QKV (n=(H+2K)d/tp, k=h), O (n=h,
             k=Hd/tp), gate+up (n=2I/tp, k=h), down (n=h, k=I/tp); the LM head (n=V/tp, k=h)
             at m = sampled rows, once per step; a quantized checkpoint's projections kept at
             16 bits (modules_to_not_convert, opmath.unconverted_shares) from the BF16 table
  attention  measured context attention (prefill) priced by the step's causal query-key pairs;
             measured generation attention (decode) by (decode count, mean KV length)
  allreduce  measured vLLM custom all-reduce, 2 per layer at m x h bf16 bytes, CUDA-graph
             timing up to vLLM's largest captured batch (512 tokens), eager above
  elementwise  norms, rotary, SiLU*mul, residual adds: NOT in the tables; spec-sheet memory
             traffic at 75 % of peak bandwidth (estimated, labelled so in the breakdown)
  moe        mixture-of-experts layers (predictors.moe): attention GEMMs as above, the router
             GEMM (n=num_experts, k=h, replicated) and the shared experts' GEMMs from the GEMM
             table; the routed experts from AIConfigurator's measured vLLM fused-MoE table at the
             model's (hidden, expert width, top-k, experts) and the deployment's expert split
             (moe_tp, moe_ep), at the tokens of every data-parallel rank, routing
             aic_tables.MOE_DISTRIBUTION; a shape or split the table lacks is priced from the nearest
             measured one times the roofline ratio of the two (estimated, said so in the
             provenance). With dp > 1 the all-gather and reduce-scatter of the ranks' tokens
             from the NCCL tables; a group spanning machines (tp * dp > gpus_per_machine) as
             a two-level collective: the tables at one machine's GPUs plus the inter-machine
             ring over the catalog's scale-out bandwidth (predictors.moe, estimated).

Interpolation: log latency is interpolated linearly in the log of each size between measured
points (GEMM: n and k at build time, m at run time; attention: batch and length), the last
measured segment's slope continued above, the smallest time held below (predictors.tables,
log-log family).

The hot path is one np.interp per curve (GEMM per layer summed into one curve over m, LM head,
prefill attention, all-reduce) plus one bilinear lookup for decode attention: pricing 500k
iterations takes tens of milliseconds (benchmarks/fidelity.py --speed).

GPUs without tables are transferred from the measured GPU of their architecture through
spec-sheet ratios (predictors.aic_transfer); the same rule applied between two measured GPUs
gives its error (`transfer_check`, `python -m predictors.aic`).

SGLang (`framework="sglang"`): a GPU with AIConfigurator SGLang tables (predictors/data/
aic-sglang) is priced from them (GEMM, attention, custom all-reduce with CUDA-graph timing up to
SGLang's default --cuda-graph-max-bs; NCCL, MoE and MLA from the GPU's vLLM tables, said so);
any other GPU from the vLLM tables (own or transferred), with the provenance saying "SGLang
priced with vLLM's kernel tables (no SGLang tables for <GPU>)".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from tuner.core.engines import generation_of, parse_version
from tuner.core.provenance import Provenance
from tuner.predictors.aic_tables import FRAMEWORKS, MEASURED, KernelTables, data_dir, has_tables
from tuner.predictors.aic_transfer import (
    achievable_fraction,
    spec_peaks,
    transfer_source,
    transfer_tables,
    typical_fractions,
)
from tuner.predictors.features import BatchFeatures, sum_parts
from tuner.predictors.moe import (
    SCALE_OUT_HOP_LATENCY_S,
    MoEParallel,
    MoEShape,
    scale_out_gather_s,
    scale_out_of,
)
from tuner.predictors.opmath import (
    quantized_bytes_per_param,
    unconverted_shares,
    weight_bytes_per_param,
)
from tuner.predictors.protocol import group_ops
from tuner.predictors.tables import IntTable, UniformLogCurve, UniformLogGrid, loglog_curve

# vLLM captures CUDA graphs up to this many tokens (cudagraph_capture_sizes' maximum in the
# resolved config of the vLLM 0.19 fidelity run); larger steps run eager
CUDA_GRAPH_MAX_TOKENS = 512
# vLLM V0 (0.5 - 0.7) captures decode batches up to 256 sequences (model_runner.py's
# _BATCH_SIZES_TO_CAPTURE: [1, 2, 4] + 8..256 by 8) and runs prefill steps eager
V0_CUDA_GRAPH_MAX_TOKENS = 256
# vLLM's custom all-reduce takes messages up to 8 MiB (CustomAllreduce max_size default); larger
# ones go to NCCL
CUSTOM_ALLREDUCE_MAX_BYTES = 8 * 1024 * 1024
ELEMENTWISE_BW_EFFICIENCY = 0.75  # estimated, as in predictors.roofline


def _quant_ratio(m: np.ndarray, n: int, k: int, bits: int, weight_bytes_per_param: float,
                 gpu) -> np.ndarray:
    """Roofline time of an m x k x n GEMM with `bits`-bit weights over its BF16 time on `gpu`:
    W8 runs at FP8 rate where the GPU has FP8 (W8A8) else at BF16 rate (W8A16); W4 at 0.85 of
    BF16 (Marlin dequantizes in the main loop, as predictors.roofline); each weight reads
    `weight_bytes_per_param` bytes, its scheme's scales included (opmath.weight_bytes_per_param,
    the memory plan's figure)."""
    bf16 = gpu.bf16_tflops * 1e12
    fp8 = (getattr(gpu, "fp8_tflops", None) or 0.0) * 1e12
    peak = (fp8 or bf16) if bits == 8 else bf16 * 0.85
    bw = gpu.hbm_gbps * 1e9
    flops = 2.0 * m * n * k
    act = 2.0 * (m * k + m * n)
    q = np.maximum(flops / peak, (n * k * weight_bytes_per_param + act) / bw)
    b = np.maximum(flops / bf16, (n * k * 2.0 + act) / bw)
    return q / b


# ---- the cost model -----------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class MeasuredTableCostModel:
    """Per-iteration GPU time from measured kernel tables at one model's shapes (per TP rank),
    precomputed into 1-D curves; plus an optional engine-overhead profile (host time)."""

    num_layers: int
    # linear: per-layer GEMMs summed, and the LM head, over the table's m grid (log-log)
    log_m: np.ndarray
    log_linear_s: np.ndarray
    log_head_s: np.ndarray
    # prefill attention over causal pairs, decode attention over (batch, KV length)
    log_pairs: np.ndarray
    log_ctx_s: np.ndarray
    log_gen_b: np.ndarray
    log_gen_s: np.ndarray
    log_gen_t: np.ndarray  # [batch, length]
    # one all-reduce over the step's token count (custom graph / eager / NCCL as vLLM picks
    # them), empty at tp 1
    log_ar_tokens: np.ndarray
    log_ar_s: np.ndarray
    elementwise_s_per_token: float  # per layer, estimated from spec-sheet bandwidth
    tp: int
    source_note: str  # where the kernel times come from (provenance detail)
    kind: str  # "tables" | "transferred" (tuner.core.provenance kinds)
    engine: object | None = None  # predictors.engine_overhead.EngineProfile
    transfer_error: dict | None = None  # {"median_pct", "worst_pct", "pairs"} of the rule
    fidelity: dict | None = None  # this GPU's row of the fidelity suite summary, if any
    # mixture of experts (moe_layers 0 = dense): per MoE layer, over this replica's step
    # tokens, the routed experts (log_moe_*) and the data-parallel all-gather + reduce-scatter
    # (log_a2a_*, empty unless dp > 1); log_linear_s is then the layers' mean of the rest
    moe_layers: int = 0
    log_moe_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0))
    log_moe_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    log_a2a_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0))
    log_a2a_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # MLA (DeepSeek): the layer's whole attention block from the measured module tables,
    # projections included (log_linear_s then holds none of them): decode in log_gen_* (by
    # batch and KV length), prefill by (chunks, chunk length) in log_mla_ctx_*, attention to
    # a chunk's earlier context at mla_pair_s per query-key pair; empty for a GQA model
    log_mla_ctx_b: np.ndarray = field(default_factory=lambda: np.zeros(0))
    log_mla_ctx_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    log_mla_ctx_t: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    mla_pair_s: float = 0.0
    sparse_topk: int = 0  # DeepSeek sparse attention: query-key pairs per token at most
    name: str = "measured kernel tables"
    framework: str = "vllm"  # the engine it prices ("vllm" | "sglang"), whichever tables
    _cache: dict = field(default_factory=dict, repr=False, init=False, compare=False)

    def __post_init__(self):
        # derived lookup structures (pure functions of the fields above)
        if len(self.log_mla_ctx_b):
            self._cache["mla_ctx"] = UniformLogGrid.from_grid(
                self.log_mla_ctx_b, self.log_mla_ctx_s, self.log_mla_ctx_t)
        self._cache["gen"] = UniformLogGrid.from_grid(self.log_gen_b, self.log_gen_s, self.log_gen_t)
        self._cache["tokens"] = IntTable.from_curve(*self._combined_token_curve())
        self._cache["head"] = IntTable.from_curve(self.log_m, self.log_head_s)
        self._cache["ctx"] = UniformLogCurve.from_curve(self.log_pairs, self.log_ctx_s)

    def _combined_token_curve(self) -> tuple[np.ndarray, np.ndarray]:
        L = self.num_layers
        m = np.exp(self.log_m)
        if self.tp > 1:  # the all-reduce's switch points as grid points
            m = np.unique(np.concatenate([m, np.exp(self.log_ar_tokens)]))
        if self.moe_layers:  # the MoE table's measured token counts too
            m = np.unique(np.concatenate([m, np.exp(self.log_moe_tokens),
                                          np.exp(self.log_a2a_tokens)]))
            m = m[m >= 1.0]
        lin = loglog_curve(m, self.log_m, self.log_linear_s)
        t = L * (lin + self.elementwise_s_per_token * m)
        if self.tp > 1:
            t = t + 2.0 * L * loglog_curve(m, self.log_ar_tokens, self.log_ar_s)
        if self.moe_layers:
            t = t + self.moe_layers * self._moe_s(m)
        return np.log(m), np.log(t)

    def _moe_s(self, tokens: np.ndarray) -> np.ndarray:
        """Seconds of one MoE layer's routed experts + data-parallel gather/scatter."""
        t = loglog_curve(tokens, self.log_moe_tokens, self.log_moe_s)
        if len(self.log_a2a_tokens):
            t = t + loglog_curve(tokens, self.log_a2a_tokens, self.log_a2a_s)
        return t

    @classmethod
    def build(cls, model, gpu, tables: KernelTables, *, tp: int = 1, weight_bits: int = 16,
              kv_bits: int = 16, engine_version: str | None = None, engine=None,
              transfer_error: dict | None = None, dp: int = 1,
              expert_parallel: bool = False, framework: str = "vllm") -> MeasuredTableCostModel:
        """Curves for `model` (duck-typed ModelSpec) on `gpu` at tensor parallelism `tp` (and,
        for an MoE model, data parallelism `dp` and expert parallelism: predictors.moe).
        `framework`: the engine priced ("vllm" | "sglang"); `engine_version` is its release.
        Tables of another framework (SGLang priced with vLLM's) are said so in the provenance,
        and their version choices ignore `engine_version` (a release of another engine)."""
        own = tables.framework == framework
        table_version = engine_version if own else None
        if weight_bits not in (16, 8, 4):
            raise ValueError(f"no kernel model for {weight_bits}-bit weights")
        notes = []
        fp8 = weight_bits == 8 and tables.has_gemm("fp8") and getattr(gpu, "fp8_tflops", None)
        dtype = "fp8" if fp8 else "bf16"
        h, H, K, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
        inter, vocab = model.intermediate_size, model.vocab_size
        Hr, Kr = max(1, H // tp), max(1, K // tp)  # KV heads replicate when fewer than tp
        moe = MoEShape.of(model)
        L = model.num_layers
        mla = _mla_fields(model, tables, tp, weight_bits, kv_bits) \
            if getattr(model, "is_mla", False) else None
        # an MLA model's attention projections are priced inside its module tables
        # Qwen3-Next's output gate widens q_proj by the queries' width (attn_output_gate)
        Hq = 2 * Hr if getattr(model, "attn_output_gate", False) else Hr
        attn_shapes = [] if mla else [((Hq + 2 * Kr) * d, h), (h, Hr * d)]
        ffn_shapes = [(2 * inter // tp, h), (h, inter // tp)]
        m = tables.gemm_m_grid(dtype)
        # the checkpoint's projections kept at 16 bits (modules_to_not_convert): their GEMMs
        # run the BF16 kernel, the others read the quantized bytes alone
        attn16, mlp16 = unconverted_shares(model, weight_bits)
        wq_quant = quantized_bytes_per_param(model, weight_bits)
        hm = tables.gemm_m_grid("bf16")

        def bf16_on_m(n, k):  # the BF16 table's time at the m grid of the priced dtype
            t = tables.gemm_s(n, k, "bf16")
            return t if dtype == "bf16" else np.exp(np.interp(np.log(m), np.log(hm), np.log(t)))

        def gemms(shapes, dt=dtype, share16=0.0):
            """Summed time of `shapes` at every m, `share16` of their weights at 16 bits."""
            if weight_bits == 16:
                return sum(tables.gemm_s(n, k, dt) for n, k in shapes)
            out = 0.0
            for n, k in shapes:
                if fp8:
                    t = tables.gemm_s(n, k, dt)
                else:
                    # no measured kernel at this precision (INT8 / 4-bit weight GEMMs, or FP8
                    # on a GPU without it): the measured BF16 time times the spec-sheet
                    # roofline ratio
                    t = tables.gemm_s(n, k, "bf16") * _quant_ratio(m, n, k, weight_bits,
                                                                   wq_quant, gpu)
                if share16:  # each such module is a whole GEMM at 16 bits: the layers' mean
                    t = (1.0 - share16) * t + share16 * bf16_on_m(n, k)
                out = out + t
            return out

        if moe is None and attn16 == mlp16:  # one share (none: the sum as it always was)
            linear = gemms(attn_shapes + ffn_shapes, share16=attn16)
        elif moe is None:
            linear = gemms(attn_shapes, share16=attn16) + gemms(ffn_shapes, share16=mlp16)
        else:
            # attention in every layer, the dense FFN in the leading dense layers, router +
            # shared experts in the MoE layers: the layers' mean (the routed experts apart)
            s_inter = moe.shared_intermediate_size
            shared = gemms([(2 * s_inter // tp, h), (h, s_inter // tp)]) if s_inter else 0.0
            router = tables.gemm_s(moe.num_experts, h, "bf16")  # vLLM keeps the gate 16-bit
            linear = (L * gemms(attn_shapes, share16=attn16)
                      + moe.dense_layers * gemms(ffn_shapes, share16=mlp16)
                      + moe.moe_layers * (router + shared)) / L
        if weight_bits not in (16,) and not fp8:
            notes.append(f"W{weight_bits} GEMMs estimated from measured BF16 x roofline ratio")
        if attn16 or mlp16:
            notes.append(f"the checkpoint's 16-bit projections ({100 * attn16:.1f} % of "
                         f"attention, {100 * mlp16:.1f} % of dense MLP weights) at the BF16 "
                         "GEMM table")
        head = tables.gemm_s(max(1, vocab // tp), h, "bf16")  # vLLM keeps the LM head 16-bit
        head = np.exp(np.interp(np.log(m), np.log(hm), np.log(head)))
        kv_fp8 = kv_bits == 8 and tables.has_attention(kv_fp8=True)
        if mla:
            pairs, ctx = np.array([1.0, 2.0]), np.array([1e-9, 2e-9])  # unused: the module's
            b, s, gen = mla.pop("gen")
            notes.append(mla.pop("note"))
        else:
            pairs, ctx = tables.context_attention(Hr, Kr, d, kv_fp8)
            b, s, gen = tables.generation_attention(Hr, Kr, d, kv_fp8)
        if kv_bits < 16 and not kv_fp8 and not mla:
            # decode attention reads the KV cache: memory-bound, in proportion to its bytes
            gen = gen * (kv_bits / 16.0)
            notes.append(f"KV{kv_bits} decode attention estimated from measured BF16 by bytes")
        empty = np.zeros(0)
        ar_tok, ar_s, ar_note = empty, empty, ""
        if tp > 1:
            ar_tok, ar_s, ar_note = _allreduce_curve(
                tables, tp, 2.0 * h, m, table_version,
                _graph_max_tokens(framework, gpu, tp, engine_version),
                custom=custom_allreduce_on(gpu, tp))
        # norms (2, fused with residual add), rotary on q and k, SiLU*mul: bytes per token
        ffn_width = 3 * inter // tp
        moe_fields = {}
        if moe is not None:
            par = MoEParallel(tp, dp, expert_parallel)
            # the table's FP8 experts are per-tensor FP8: a block-quantized checkpoint
            # (DeepSeek's 128x128 blocks) runs vLLM's block-FP8 kernels, not those
            block = "blocks" in getattr(model, "checkpoint_quantization", "")
            moe_fields, moe_notes, moe_width = _moe_curves(moe, par, tables, gpu, weight_bits,
                                                            fp8 and not block, wq_quant)
            if fp8 and block:
                moe_notes.append("the table's FP8 experts are per-tensor FP8, not the "
                                 "checkpoint's block-FP8 kernels: priced as above")
            notes.extend(moe_notes)
            ffn_width = (moe.dense_layers * ffn_width + moe.moe_layers * moe_width) / L
        ew_bytes = 2.0 * (2 * 4 * h + 2 * (Hr + Kr) * d + ffn_width)
        ew = ew_bytes / (gpu.hbm_gbps * 1e9 * ELEMENTWISE_BW_EFFICIENCY)
        prov = tables.describe() + ar_note
        if not own:
            prov += (f"; {FRAMEWORKS[framework]} priced with {tables.label}'s kernel tables (no "
                     f"{FRAMEWORKS[framework]} tables for {gpu.name})")
        prov += _older_engine_note(table_version, tables.gemm_version, tables.label,
                                   tables.attention_backends)
        if tables.transfer and transfer_error:
            prov += (f"; transfer error {transfer_error['median_pct']:.1f} % (median over "
                     f"{transfer_error['pairs']} pairs of measured GPUs, worst pair "
                     f"{transfer_error['worst_pct']:.0f} %)")
        prov += "".join(f"; {n}" for n in notes)
        prov += "; norms/rotary/activation estimated from spec-sheet bandwidth"
        return cls(num_layers=model.num_layers, log_m=np.log(m), log_linear_s=np.log(linear),
                   log_head_s=np.log(head), log_pairs=np.log(pairs), log_ctx_s=np.log(ctx),
                   log_gen_b=np.log(b), log_gen_s=np.log(s), log_gen_t=np.log(gen),
                   log_ar_tokens=ar_tok, log_ar_s=ar_s,
                   elementwise_s_per_token=ew, tp=tp,
                   source_note=prov, kind="tables" if tables.measured else "transferred",
                   engine=engine, transfer_error=transfer_error,
                   fidelity=fidelity_summary(framework=framework).get(gpu.name),
                   framework=framework,
                   **moe_fields, **(mla or {}))

    # ---- pricing -------------------------------------------------------------------------
    def gpu_breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        """Seconds of GPU work per iteration by operation group (all layers summed)."""
        L = self.num_layers
        tokens = f.prefill_tokens + f.decodes
        linear = loglog_curve(tokens, self.log_m, self.log_linear_s)
        head = loglog_curve(f.seqs_sampled, self.log_m, self.log_head_s)
        if "mla_ctx" in self._cache:
            ctx = self._mla_prefill_s(f)
        else:
            pairs = f.prefill_ctx + 0.5 * (f.prefill_sq + f.prefill_tokens)
            ctx = loglog_curve(pairs, self.log_pairs, self.log_ctx_s)
        gen = self._gen.time_s(f.decodes, f.decode_kv)
        if self.tp > 1:
            allreduce = 2.0 * L * loglog_curve(tokens, self.log_ar_tokens, self.log_ar_s)
        else:
            allreduce = np.zeros_like(tokens)
        out = {"linear": L * linear, "lm_head": head, "attention_prefill": L * ctx,
               "attention_decode": L * gen, "allreduce": allreduce,
               "elementwise_estimated": L * self.elementwise_s_per_token * tokens}
        if self.moe_layers:
            out["moe_experts"] = self.moe_layers * loglog_curve(tokens, self.log_moe_tokens,
                                                          self.log_moe_s)
            if len(self.log_a2a_tokens):
                out["moe_dispatch"] = self.moe_layers * loglog_curve(tokens, self.log_a2a_tokens,
                                                               self.log_a2a_s)
        return out

    @property
    def _gen(self) -> UniformLogGrid:
        return self._cache["gen"]

    def _mla_prefill_s(self, f: BatchFeatures) -> np.ndarray:
        """One layer's MLA block over the step's prefill chunks: the module table at (chunks,
        mean chunk length), chunks = tokens^2 / sum of squares (exact for equal chunks), plus
        attention to the chunks' earlier context (under sparse attention at most top-k pairs
        per token) at the table's per-pair time."""
        tokens = f.prefill_tokens
        chunks = np.where(tokens > 0, tokens * tokens / np.maximum(f.prefill_sq, 1.0), 0.0)
        before = f.prefill_ctx
        if self.sparse_topk:
            before = np.minimum(before, tokens * self.sparse_topk)
        return self._cache["mla_ctx"].time_s(chunks, tokens) + self.mla_pair_s * before


    def gpu_time_s(self, f: BatchFeatures) -> np.ndarray:
        """Sum of gpu_breakdown, fast: everything that depends on the step's token count alone
        (GEMMs, norms, all-reduce) is one precomputed curve (the same values at its grid
        points; log-log interpolation in between)."""
        c = self._cache
        t = c["tokens"].time_s(f.prefill_tokens + f.decodes)
        t += c["head"].time_s(f.seqs_sampled)
        pf = np.flatnonzero(f.prefill_tokens > 0)
        if pf.size and "mla_ctx" in c:
            t += self.num_layers * self._mla_prefill_s(f)
        elif pf.size:
            pairs = f.prefill_ctx[pf] + 0.5 * (f.prefill_sq[pf] + f.prefill_tokens[pf])
            t[pf] += self.num_layers * c["ctx"].time_s(pairs)
        t += self.num_layers * c["gen"].time_s(f.decodes, f.decode_kv)
        return t

    def breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        parts = self.gpu_breakdown(f)
        if self.engine is not None:
            gpu = sum_parts(parts, len(f))
            parts["overhead"] = self.engine.step_time_s(gpu, f, self.tp) - gpu
        return parts

    def iteration_time_s(self, f: BatchFeatures) -> np.ndarray:
        gpu = self.gpu_time_s(f)
        return gpu if self.engine is None else self.engine.step_time_s(gpu, f, self.tp)

    def describe(self) -> str:
        eng = f"; engine overhead: {self.engine.summary()}" if self.engine is not None else ""
        return self.source_note + eng

    @property
    def provenance(self) -> Provenance:
        """kind "tables" (measured AIConfigurator kernels) or "transferred"; error_pct: the
        fidelity suite's median |makespan error| on this GPU where it has runs, else (for a
        transfer) the transfer rule's median error over the measured GPU pairs."""
        fid = self.fidelity or {}
        # a GPU's runs check the engine profile they were simulated with, not another one
        checked = fid.get("engine")
        same = bool(fid) and (checked is None or self.engine is None
                              or checked == self.engine.name)
        err = fid.get("median_abs_pct") if same else None
        if err is None and self.transfer_error:
            err = self.transfer_error.get("median_pct")
        detail = self.describe()
        if not fid:
            detail += "; no public end-to-end run on this GPU checks it yet"
        elif same and fid.get("fitted") is False:  # published figures, fitted on nothing
            detail += (f"; checked on {fid['gpu']} against {fid['runs']} {fid['unit']} "
                       f"(fitted on nothing): median |makespan error| "
                       f"{fid['median_abs_pct']:.1f} %, worst {fid['worst_abs_pct']:.1f} %, "
                       f"predicted too short on {fid['too_short']} of {fid['runs']} "
                       f"(median {fid['median_pct']:+.1f} %)")
        elif same:
            detail += (f"; fidelity suite on {fid['gpu']}: {fid['runs']} "
                       f"{fid.get('unit', 'run(s)')}, leave-one-out "
                       f"median |makespan error| {fid['median_abs_pct']:.1f} %, "
                       f"worst {fid['worst_abs_pct']:.1f} %")
            if fid.get("itl_runs"):
                detail += (f", median |ITL error| {fid['itl_median_abs_pct']:.1f} %, worst "
                           f"{fid['itl_worst_abs_pct']:.1f} % (the decode step)")
        else:
            detail += (f"; the public runs on {fid['gpu']} check the {checked} engine profile, "
                       "not this one")
            other = fid.get("other_engines") or {}
            if self.engine is not None and self.engine.name in other.get("engines", ()):
                # published figures of this profile, kept beside the headline (fitted on nothing)
                detail += (f"; {other['runs']} published figure(s) check {self.engine.name} "
                           f"there (fitted on nothing): median makespan error "
                           f"{other['median_pct']:+.1f} %, worst |error| "
                           f"{other['worst_abs_pct']:.1f} %, predicted too short on "
                           f"{other['too_short']} of {other['runs']}")
        return Provenance(self.kind, detail, None if err is None else float(err),
                          engine=None if self.framework == "vllm" else self.framework)

    @property
    def transfer_model(self) -> None:
        return None  # the tables hold no host<->device copies: the spec-sheet host link

    def breakdown_ops(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        return group_ops(self.breakdown(f), self.num_layers)

    # per-layer views (tuner.sim.offload uses them for overlap budgets)
    def layer_time_s(self, f: BatchFeatures) -> np.ndarray:
        p = self.gpu_breakdown(f)
        return sum(v for k, v in p.items() if k != "lm_head") / self.num_layers

    def decode_attention_layer_s(self, f: BatchFeatures) -> np.ndarray:
        return self.gpu_breakdown(f)["attention_decode"] / self.num_layers


def _mla_fields(model, tables: KernelTables, tp: int, weight_bits: int, kv_bits: int) -> dict:
    """The MLA fields of MeasuredTableCostModel from the GPU's measured module tables (DeepSeek
    sparse attention's "dsa" tables for a model with an indexer, else "mla"), plus "gen" (the
    decode grid) and "note" (provenance); ValueError where the tables do not cover the model
    (a GPU without them, a transferred table, 4-bit weights or KV): the roofline prices it."""
    kind = "dsa" if getattr(model, "index_topk", 0) else "mla"
    if weight_bits not in (16, 8) or kv_bits not in (16, 8):
        raise ValueError(f"no {kind} module table at {weight_bits}-bit weights / {kv_bits}-bit KV")
    kv_fp8, gemm_fp8 = kv_bits == 8, weight_bits == 8
    if not tables.has_mla(kind, kv_fp8, gemm_fp8):
        raise ValueError(f"{tables.gpu}: no measured {kind} module table")
    heads = max(1, model.num_heads // tp)
    gb, gs, gt, exact_g = tables.mla_module(kind, "gen", heads, kv_fp8, gemm_fp8)
    cb, cs, ct, exact_c = tables.mla_module(kind, "ctx", heads, kv_fp8, gemm_fp8)
    # attention to earlier context: the per-pair time of the prefill grid, fitted as
    # t = a + b * tokens + c * pairs over its cells of >= 512 tokens (relative error weights)
    B, S = np.meshgrid(cb, cs, indexing="ij")
    tokens, pairs, t = (B * S).ravel(), (B * S * (S + 1) / 2.0).ravel(), ct.ravel()
    big = tokens >= 512
    X = np.column_stack([np.ones(big.sum()), tokens[big], pairs[big]]) / t[big, None]
    coef = np.linalg.lstsq(X, np.ones(big.sum()), rcond=None)[0] if big.sum() >= 3 \
        else np.zeros(3)
    info = tables.modules.get(kind, {})
    back = info.get("backends", {}).get("fp8" if kv_fp8 else "bf16", {})
    label = "DeepSeek sparse attention (indexer included)" if kind == "dsa" else "MLA"
    note = (f"{label} attention block (projections included) from AIConfigurator's measured "
            f"vLLM {info.get('version', '?')} module tables: {back.get('generation', '?')} "
            f"decode, {back.get('context', '?')} prefill, {'FP8' if kv_fp8 else 'BF16'} KV, "
            f"{'FP8-block' if gemm_fp8 else 'BF16'} projections")
    if not (exact_g and exact_c):
        note += f" ({heads} local heads scaled from the nearest measured count)"
    return {"gen": (gb, gs, gt), "note": note,
            "log_mla_ctx_b": np.log(cb), "log_mla_ctx_s": np.log(cs), "log_mla_ctx_t": np.log(ct),
            "mla_pair_s": float(max(coef[2], 0.0)),
            "sparse_topk": int(getattr(model, "index_topk", 0))}


def _moe_curves(moe: MoEShape, par: MoEParallel, tables: KernelTables, gpu, weight_bits: int,
                fp8: bool, weight_bytes_per_param: float) -> tuple[dict, list[str], float]:
    """MeasuredTableCostModel's MoE fields, provenance notes and the FFN activation width per
    token of an MoE layer (for the elementwise estimate); `weight_bytes_per_param`: bytes an
    expert weight reads at `weight_bits`, scales included (opmath.quantized_bytes_per_param:
    the 16-bit share a checkpoint keeps is attention or dense MLP, never the experts).
    Raises ValueError where the tables cannot price it (no fused-MoE rows, no NCCL table for
    the expert group)."""
    got = tables.moe_experts(moe, par, fp8, gpu)
    measured_at_bits = got is not None and (fp8 or weight_bits == 16)
    if got is None and fp8:  # no FP8 fused-MoE rows: the BF16 ones x the ratio below
        got = tables.moe_experts(moe, par, False, gpu)
    if got is None:
        raise ValueError(f"{tables.device} has no fused-MoE table")
    tok, t, note = got
    notes = [note + f"; {par.describe(moe.num_experts)}"]
    if not measured_at_bits:
        # no measured kernel at this precision: BF16 x the roofline ratio of the expert kernel,
        # its peak as _quant_ratio's: W8 at FP8 rate where the GPU has FP8 (vLLM's W8A8 and
        # block-FP8 fused MoE), else BF16 (Marlin W8A16); W4 at 0.85 of BF16
        peaks = spec_peaks(gpu)
        fl, b16 = moe.expert_flops_bytes(tok, par, weight_bytes=2.0)
        _, bq = moe.expert_flops_bytes(tok, par, weight_bytes=weight_bytes_per_param)
        pk = peaks["flops"]["fp8"] if weight_bits == 8 else peaks["flops"]["bf16"] * 0.85
        t = t * (np.maximum(fl / pk, bq / peaks["bw"])
                 / np.maximum(fl / peaks["flops"]["bf16"], b16 / peaks["bw"]))
        notes.append(f"W{weight_bits} MoE experts estimated from measured BF16 x roofline ratio")
    # the table's tokens count every data-parallel rank's: per token of this replica's step
    fields = {"moe_layers": moe.moe_layers, "log_moe_tokens": np.log(tok / par.token_factor),
              "log_moe_s": np.log(t)}
    if par.gathers:
        per = getattr(gpu, "gpus_per_machine", None)
        machines = par.machines(per)
        # a group spanning machines: the tables at one machine's GPUs, the rest over the network
        local = per if machines > 1 else par.group
        bytes_per_token = par.token_factor * moe.hidden_size * 2.0
        if local > 1:
            ag = tables.nccl_collective("allgather", local)
            rs = tables.nccl_collective("reducescatter", local)
            if ag is None or rs is None:
                raise ValueError(f"{tables.device} has no NCCL all-gather / reduce-scatter "
                                 f"table for {local} GPUs")
            grid = np.unique(np.concatenate([ag[0], rs[0]])) / bytes_per_token
        else:  # one GPU per machine: nothing gathers inside it
            grid = np.geomspace(256.0, 2.0 ** 28, 21) / bytes_per_token
        grid = grid[grid >= 1.0]
        msg = grid * bytes_per_token
        a2a = (loglog_curve(msg, np.log(ag[0]), np.log(ag[1]))
               + loglog_curve(msg, np.log(rs[0]), np.log(rs[1]))) if local > 1 else 0.0
        if machines > 1:
            bw, bw_note = scale_out_of(gpu)
            a2a = a2a + 2.0 * scale_out_gather_s(msg, machines, per, bw)
            # a machine boundary does not speed a collective up: where the tables measured the
            # whole group inside one machine (a --provider plan over smaller instances, e.g. 8
            # x 1-GPU L4 VMs, whose one-machine PCIe tables are slower than the network
            # estimate's 5 us hops), the spanning group costs at least that
            whole = [tables.nccl_collective(op, par.group)
                     for op in ("allgather", "reducescatter")]
            floor = ""
            if None not in whole:
                one = sum(loglog_curve(msg, np.log(w[0]), np.log(w[1])) for w in whole)
                if np.any(one > a2a):
                    floor = (f"; at least the tables over {par.group} GPUs in one machine (a "
                             "machine boundary does not speed a collective up)")
                a2a = np.maximum(a2a, one)
            notes.append(
                f"MoE dispatch/combine over {machines} machines of {per} GPUs: "
                + (f"NCCL all-gather + reduce-scatter tables over a machine's {per} GPUs, "
                   if local > 1 else "")
                + f"the inter-machine stage estimated (a ring over the scale-out network at "
                f"{bw_note}: (n-1)/n of the message per GPU NIC + "
                f"{SCALE_OUT_HOP_LATENCY_S * 1e6:g} us per step, NCCL's tuning-model latency)"
                + floor)
        else:
            notes.append(f"MoE dispatch/combine: NCCL all-gather + reduce-scatter tables over "
                         f"{par.group} GPUs")
        fields.update(log_a2a_tokens=np.log(grid), log_a2a_s=np.log(a2a))
    return fields, notes, moe.activation_width(par)


def _graph_max_tokens(framework: str, gpu, tp: int, engine_version: str | None = None) -> int:
    """The largest step the engine runs as a CUDA graph: vLLM's CUDA_GRAPH_MAX_TOKENS
    (V0 releases: V0_CUDA_GRAPH_MAX_TOKENS); SGLang's decode batches up to its default
    --cuda-graph-max-bs (tuner.core.sglang: by GPU memory and TP; prefill and larger batches
    run eager)."""
    if framework != "sglang":
        v0 = generation_of(engine_version).generation.key == "v0"
        return V0_CUDA_GRAPH_MAX_TOKENS if v0 else CUDA_GRAPH_MAX_TOKENS
    from tuner.core.sglang import cuda_graph_max_bs_default

    return cuda_graph_max_bs_default(gpu.memory_bytes, tp)


def custom_allreduce_on(gpu, tp: int) -> bool:
    """Whether the engine runs its custom all-reduce on `tp` GPUs of this type (duck-typed
    tuner GPU): vLLM (custom_all_reduce.py) and SGLang, which copies it, turn it off on more
    than two GPUs unless NVLink joins every pair (an NVSwitch board: SXM, not a PCIe card,
    nor cards bridged in pairs), and NCCL carries every all-reduce."""
    return tp <= 2 or (getattr(gpu, "nvlink_gbps", None) is not None
                       and getattr(gpu, "nvlink_all_pairs", True))


def _allreduce_curve(tables: KernelTables, tp: int, bytes_per_token: float, m: np.ndarray,
                     engine_version: str | None, graph_max_tokens: int = CUDA_GRAPH_MAX_TOKENS,
                     custom: bool = True):
    """(log tokens, log seconds, provenance note) of one all-reduce of a step's hidden states:
    the tables' custom all-reduce (vLLM's or SGLang's) up to CUSTOM_ALLREDUCE_MAX_BYTES
    (CUDA-graph timing up to `graph_max_tokens` tokens, eager above), NCCL beyond (custom
    where no NCCL table); NCCL at every size where the engine turns its custom all-reduce off
    (`custom` False: custom_allreduce_on)."""
    nccl = tables.nccl_allreduce(tp)
    if not custom and nccl is not None:
        tok = np.unique(m.astype(np.float64))
        t = loglog_curve(tok * bytes_per_token, np.log(nccl[0]), np.log(nccl[1]))
        return np.log(tok), np.log(t), (
            f"; all-reduce: NCCL table at every size (the engine turns its custom all-reduce "
            f"off on {tp} GPUs without NVLink between every pair)")
    g = tables.allreduce(tp, True, engine_version)
    e = tables.allreduce(tp, False, engine_version)
    if g is None or e is None:
        raise ValueError(f"{tables.device} has no all-reduce table for {tp} GPUs")
    lim_tok = CUSTOM_ALLREDUCE_MAX_BYTES / bytes_per_token
    gt = float(graph_max_tokens)
    tok = np.unique(np.concatenate([m, [gt, gt + 1, np.floor(lim_tok), np.floor(lim_tok) + 1]]))
    msg = tok * bytes_per_token
    graph = loglog_curve(msg, np.log(g[0]), np.log(g[1]))
    eager = loglog_curve(msg, np.log(e[0]), np.log(e[1]))
    t = np.where(tok <= gt, graph, eager)
    said = []
    if tables.framework != "vllm" or graph_max_tokens != CUDA_GRAPH_MAX_TOKENS:
        said.append(f"CUDA-graph timing up to {graph_max_tokens} tokens")
    if nccl is not None:
        t = np.where(msg > CUSTOM_ALLREDUCE_MAX_BYTES,
                     loglog_curve(msg, np.log(nccl[0]), np.log(nccl[1])), t)
        said.append("NCCL table above 8 MiB")
    note = (f"; all-reduce: {tables.label} {g[2]} custom all-reduce table"
            + (f" ({'; '.join(said)})" if said else ""))
    return np.log(tok), np.log(t), note


# ---- transfer error: the rule applied between two measured GPUs ----------------------------
def transfer_check(source: KernelTables, target: KernelTables, source_gpu, target_gpu,
                   model, *, tp: int = 1, achievable: dict | None = None) -> dict:
    """Error of predicting `target`'s measured kernels from `source` via spec-sheet ratios, at
    `model`'s shapes over a grid of iterations (prefill chunks 64..8192 tokens, decode batches
    1..256 at KV lengths 128..8192): median and worst |error| of the per-iteration GPU time.
    `achievable`: the measured GPUs' achievable fractions (achievable_fractions); the target's
    own is left out, as for a GPU without tables (its typical fraction is the others')."""
    if achievable:
        others = {g: f for g, f in achievable["per_gpu"].items() if g != target.gpu}
        achievable = {"per_gpu": others, "typical": typical_fractions(others)}
    moved = transfer_tables(source, source_gpu, target_gpu, achievable)
    real = MeasuredTableCostModel.build(model, target_gpu, target, tp=tp)
    pred = MeasuredTableCostModel.build(model, target_gpu, moved, tp=tp)
    f = reference_iterations()
    a, b = real.iteration_time_s(f), pred.iteration_time_s(f)
    err = np.abs(b / a - 1.0) * 100.0
    return {"source": source.gpu, "target": target.gpu, "median_pct": float(np.median(err)),
            "worst_pct": float(err.max()), "signed_median_pct": float(np.median((b / a - 1) * 100))}


def reference_iterations() -> BatchFeatures:
    """A fixed grid of iterations (prefill-only, decode-only, mixed) for transfer checks."""
    rows = []
    for c in (64, 256, 1024, 2048, 8192):
        rows.append((c, c * c, 0, 0, 0, 1))
    for n in (1, 8, 32, 128, 256):
        for kv in (128, 1024, 8192):
            rows.append((0, 0, 0, n, n * kv, n))
    for n in (16, 128):
        rows.append((512, 512 * 512, 512 * 1024, n, n * 1024, n + 1))
    a = np.array(rows, dtype=np.float64)
    return BatchFeatures(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5])


#: vLLM runs FlashAttention 3 on Hopper from this release (vllm-project/vllm#12093): the 0.7.0
#: wheel's vllm/attention/backends/flash_attn.py picks fa_version 3 where supported (sm_90); the
#: 0.6.6.post1 wheel has no FA3 choice; before it, FlashAttention 2
FA3_ON_HOPPER_SINCE = (0, 7, 0)
#: what the FA2 -> FA3 change measured end to end, in vLLM's own figures of that PR (an H100
#: assumed: FA3 then ran only on Hopper; benchmarks/fidelity.py prints them)
FA2_TO_FA3_MEASURED = ("vllm-project/vllm#12093 measured FA3 1.1-2.7 % faster end to end under "
                       "V0 (11 % under V1 alpha) on a 2,048-token-prompt job")


def _older_engine_note(engine_version: str | None, table_version: str,
                       label: str = "vLLM", attention_backends: dict | None = None) -> str:
    """What pricing an older release with newer kernel tables means ("" when not older): the
    kernel differences known between them (attention backend), and how they are handled."""
    asked, measured = parse_version(engine_version), parse_version(table_version)
    if asked is None or measured is None or asked >= measured:
        return ""
    known = ""
    gen = (attention_backends or {}).get("bf16", {}).get("generation", "")
    if label == "vLLM" and gen.endswith("fa3") and asked < FA3_ON_HOPPER_SINCE:
        known = (f"; known: these tables' attention is FlashAttention 3 ({gen}), vLLM "
                 f"{engine_version} ran FlashAttention 2 on Hopper (FA3 from 0.7.0), priced "
                 f"as FA3: {FA2_TO_FA3_MEASURED}")
    other = "other " if known else ""
    return (f"; {label} {engine_version} priced with the {table_version} kernels (the closest "
            f"version shipped for this GPU): {other}kernel changes between the releases are not "
            "modelled; the engine profile's terms, fitted on that generation's runs where it "
            f"is fitted, absorb what its public runs show{known}")


# ---- shipped summaries: the transfer checks and the fidelity suite -------------------------
TRANSFER_CHECKS_FILE = "transfer_checks.json"
# the model whose shapes the shipped transfer checks use (a typical dense 8B decoder)
CHECK_MODEL = "llama-3-8b"


FIDELITY_FILE = "fidelity_summary.json"


def fidelity_summary(path: Path | None = None, framework: str = "vllm") -> dict:
    """Per catalog GPU: runs, median and worst |makespan error| of benchmarks/fidelity.py
    (written there with --write-summary); {} when absent. framework "sglang": its checks of
    SGLang's published figures (key sglang_per_gpu; "unit" names what was checked)."""
    p = (path or data_dir()) / FIDELITY_FILE
    if not p.is_file():
        return {}
    doc = json.loads(p.read_text())
    if framework != "vllm":
        return {g: dict(v, gpu=g) for g, v in doc.get(f"{framework}_per_gpu", {}).items()}
    # a GPU's own runs first; else the published figures that check it (published_per_gpu)
    merged = {**doc.get("published_per_gpu", {}), **doc.get("per_gpu", {})}
    return {g: dict(v, gpu=g) for g, v in merged.items()}


def transfer_error_summary(path: Path | None = None) -> dict | None:
    """Median and worst |error| of the spec-ratio transfer rule over the measured GPU pairs
    (predictors/data/aic/transfer_checks.json, written by `python -m predictors.aic`)."""
    p = (path or data_dir()) / TRANSFER_CHECKS_FILE
    if not p.is_file():
        return None
    doc = json.loads(p.read_text())
    return doc.get("summary")


def measured_achievable(gpus: dict) -> dict:
    """Every measured GPU's achievable tensor FLOP/s fraction per dtype (its own tables,
    aic_transfer.achievable_fraction) and their median: what achievable_fractions ships."""
    per_gpu = {g: {d: achievable_fraction(KernelTables.load(g), gpus[g], d)
                   for d in ("bf16", "fp8")} for g in MEASURED if g in gpus}
    return {"per_gpu": per_gpu, "typical": typical_fractions(per_gpu)}


@lru_cache(maxsize=2)
def achievable_fractions(path: Path | None = None) -> dict | None:
    """The shipped achievable fractions (TRANSFER_CHECKS_FILE's "achievable", written by
    `python -m predictors.aic`); None where absent (transfers then use spec sheets alone)."""
    p = (path or data_dir()) / TRANSFER_CHECKS_FILE
    if not p.is_file():
        return None
    return json.loads(p.read_text()).get("achievable")


def write_transfer_checks(gpus: dict, models: dict, path: Path | None = None) -> dict:
    """The transfer rule applied between every ordered pair of measured GPUs, at CHECK_MODEL's
    shapes (each target's own achievable fraction left out), written next to the tables with
    the achievable fractions transfers use."""
    names = [g for g in MEASURED if g in gpus]
    achievable = measured_achievable(gpus)
    pairs = []
    for s in names:
        for t in names:
            if s != t:
                pairs.append(transfer_check(KernelTables.load(s), KernelTables.load(t),
                                            gpus[s], gpus[t], models[CHECK_MODEL],
                                            achievable=achievable))
    med = [p["median_pct"] for p in pairs]
    summary = {"median_pct": float(np.median(med)), "worst_pct": float(max(med)),
               "pairs": len(pairs), "model": CHECK_MODEL,
               "what": "per pair: median |error| of per-iteration GPU time over "
                       "reference_iterations(); summary: median and worst of those"}
    doc = {"summary": summary, "pairs": pairs, "achievable": achievable}
    p = (path or data_dir()) / TRANSFER_CHECKS_FILE
    p.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


# ---- choosing tables for a GPU --------------------------------------------------------------
def table_cost_model(model, gpu, *, tp: int = 1, weight_bits: int = 16, kv_bits: int = 16,
                     engine_version: str | None = None, engine="default",
                     gpus: dict | None = None, dp: int = 1, expert_parallel: bool = False,
                     framework: str = "vllm"):
    """MeasuredTableCostModel for a GPU: its own tables where shipped (aic_tables.MEASURED),
    else transferred from the measured GPU of its architecture (`gpu.architecture`,
    aic_transfer.TRANSFER_SOURCE); None where neither applies (no architecture stated) or the
    tables do not cover the config (4-bit weights, a TP size without all-reduce table).
    engine: an EngineProfile, None (GPU time only) or "default" (the default profile).
    dp and expert_parallel shape the expert layers of an MoE model (predictors.moe); a dense
    model's curves do not depend on them. framework: the engine priced, "vllm" or "sglang"
    (SGLang's own tables where the GPU has them, else the vLLM ones above, said so);
    engine_version is that engine's release."""
    if isinstance(engine, str):
        from tuner.predictors.engine_overhead import get_profile

        engine = get_profile(None if engine == "default" else engine)
    src = None if gpu.name in MEASURED else transfer_source(gpu)
    if gpu.name not in MEASURED and src is None:
        return None
    # a search asks for the same (model, GPU, config) many times: build once (~50 ms)
    moe = MoEShape.of(model) is not None
    # the checkpoint's scheme sets the bytes a quantized weight reads and the block-FP8 choice
    key = (_shape_key(model), _gpu_key(gpu), tp, weight_bits, kv_bits, engine_version, engine,
           dp if moe else 1, bool(expert_parallel) and moe, framework,
           weight_bytes_per_param(model, weight_bits), getattr(model, "checkpoint_quantization", ""))
    if key in _BUILT:
        return _BUILT[key]
    try:
        if framework != "vllm" and has_tables(gpu.name, framework):
            tables = KernelTables.load(gpu.name, framework=framework)
            err = None
        elif gpu.name in MEASURED:
            tables = KernelTables.load(gpu.name)
            err = None
        else:
            src_gpu = gpus[src] if gpus is not None else _catalog_gpu(src)
            tables = transfer_tables(KernelTables.load(src), src_gpu, gpu,
                                     achievable_fractions())
            err = transfer_error_summary()
        cm = MeasuredTableCostModel.build(model, gpu, tables, tp=tp, weight_bits=weight_bits,
                                          kv_bits=kv_bits, engine_version=engine_version,
                                          engine=engine, transfer_error=err, dp=dp,
                                          expert_parallel=expert_parallel, framework=framework)
    except (KeyError, ValueError):
        cm = None
    if len(_BUILT) >= 64:
        _BUILT.clear()
    _BUILT[key] = cm
    return cm


_BUILT: dict = {}  # table_cost_model's cache (pure function of its key)


def _shape_key(model) -> tuple:
    return tuple(getattr(model, k, None) for k in (
        "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
        "intermediate_size", "vocab_size", "num_experts", "experts_per_token",
        "moe_intermediate_size", "shared_expert_intermediate_size", "first_k_dense_layers",
        "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "index_topk"))


def _gpu_key(gpu) -> tuple:
    return tuple(getattr(gpu, k, None) for k in (
        "name", "architecture", "bf16_tflops", "fp8_tflops", "hbm_gbps", "host_link_gbps",
        "nvlink_gbps", "nvlink_all_pairs", "gpus_per_machine", "scale_out_gbps"))


@lru_cache(maxsize=8)
def _catalog_gpu(name: str):
    """A transfer source's spec sheet from the shipped catalog (parsed once per process)."""
    from tuner.core.catalog import load_gpus

    return load_gpus()[name]


if __name__ == "__main__":
    from tuner.core.catalog import load_gpus, load_models

    d = write_transfer_checks(load_gpus(), load_models())
    for p in d["pairs"]:
        print(f"{p['source']:>13} -> {p['target']:<13} median {p['median_pct']:5.1f} %  "
              f"worst {p['worst_pct']:5.1f} %  signed median {p['signed_median_pct']:+6.1f} %")
    s = d["summary"]
    print(f"summary over {s['pairs']} pairs: median {s['median_pct']:.1f} %, "
          f"worst pair {s['worst_pct']:.1f} %")
    a = d["achievable"]
    print("achievable tensor FLOP/s (fraction of spec, from each GPU's tables): "
          + ", ".join(f"{g} {v['bf16']:.2f}" + (f" / FP8 {v['fp8']:.2f}" if v.get("fp8") else "")
                      for g, v in a["per_gpu"].items())
          + f"; median {a['typical']['bf16']:.2f} / FP8 {a['typical'].get('fp8', 0):.2f}")
