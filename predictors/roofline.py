"""Cost model v0: roofline from the spec sheet with documented efficiency factors.

Each operation of one iteration takes max(FLOPs / (peak * compute_eff), bytes / (HBM * bw_eff)).
The default efficiencies (0.75 compute, 0.75 bandwidth) are calibrated on two public H100
reference figures for Llama-2-7B: per-layer linear ops at 4096 tokens take ~2.2 ms (1.66 TFLOP
at 989 TFLOP/s -> 0.76 of peak) and at 1 token ~0.16 ms (405 MB at 3.35 TB/s -> 0.75 of peak).
Attention kernels reach a lower fraction of peak (FlashAttention-2 prefill ~50 %), and each
iteration pays a fixed CPU/launch overhead (vLLM V1 scheduling + input preparation). These are
estimates, not measurements: `predictors` replaces them with fitted profiles where one exists.
A quantized weight reads its checkpoint scheme's bytes, scales included (opmath.
weight_bytes_per_param: the memory plan's figure, e.g. 1 B per-tensor FP8, 0.5 + 2.5/128 B AWQ-4).
Projections the checkpoint keeps at 16 bits (modules_to_not_convert: Meta's 405B FP8 keeps
attention in BF16) run their FLOPs at the 16-bit tensor rate (opmath.unconverted_shares).

Mixture-of-experts layers (predictors.moe): attention as in a dense layer; the FFN is the
router GEMM, the shared experts (every token) and the routed experts, whose FLOPs count each
token's top-k experts only and whose weight bytes count the distinct experts the step's tokens
touch (E * (1 - (1 - k/E)^B) for B tokens, the uniform-routing estimate), all split over the
expert group of tp * dp GPUs (whole experts with expert parallelism, slices of every expert
without). With dp > 1 each MoE layer all-gathers and reduce-scatters the data-parallel ranks'
hidden states over that group (a ring: (G - 1) / G of the message each way); a group spanning
machines (G > gpus_per_machine) as a two-level collective: the ring over one machine's GPUs
at the NVLink (or PCIe) bandwidth plus the inter-machine ring over the scale-out network
(predictors.moe.scale_out_gather_s: the catalog's scale_out_gbps per GPU, an estimate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tuner.core.provenance import Provenance
from tuner.predictors.features import BatchFeatures, sum_parts
from tuner.predictors.moe import MoEParallel, MoEShape, scale_out_gather_s, scale_out_of
from tuner.predictors.opmath import quantized_bytes_per_param, unconverted_shares
from tuner.predictors.opmath import weight_bytes_per_param as model_weight_bytes_per_param
from tuner.predictors.protocol import group_ops


@dataclass(frozen=True)
class RooflineCostModel:
    """Spec-sheet roofline for a Llama-style decoder on one GPU type (per tensor-parallel rank)."""

    # hardware
    peak_flops: float  # 16-bit dense tensor FLOP/s
    hbm_bytes_per_s: float
    interconnect_bytes_per_s: float
    # model shape
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    # deployment
    tp: int = 1
    weight_bits: int = 16
    kv_bits: int = 16
    fp8_flops: float | None = None  # used for 8-bit weights (W8A8 FP8) where the GPU has FP8
    # bytes read per matmul weight, quantization scales included: the memory plan's figure
    # for the checkpoint's scheme (from_specs); 0 = a 16-bit checkpoint quantized by vLLM
    weight_bytes_per_param: float = 0.0
    # share of the attention projections' and of the dense MLPs' weights the checkpoint keeps
    # at 16 bits (modules_to_not_convert, opmath.unconverted_shares): their FLOPs run at the
    # 16-bit tensor rate (their bytes are in weight_bytes_per_param's mean)
    unconverted_attention: float = 0.0
    unconverted_mlp: float = 0.0
    # bytes per weight the checkpoint did quantize (opmath.quantized_bytes_per_param): what a
    # GEMM's other weights and the routed experts read; 0 = weight_bytes_per_param's mean
    quantized_weight_bytes_per_param: float = 0.0
    # efficiency factors (documented in the module docstring)
    compute_efficiency: float = 0.75
    bandwidth_efficiency: float = 0.75
    attention_efficiency: float = 0.5
    w4_compute_penalty: float = 0.85  # W4A16 kernels (Marlin) dequantize in the GEMM main loop
    iteration_overhead_s: float = 1.5e-3
    per_request_overhead_s: float = 2e-6
    allreduce_latency_s: float = 15e-6
    # mixture of experts (0 experts = dense; see the module docstring)
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_intermediate_size: int = 0  # all shared experts together
    moe_layers: int = 0  # layers with an MoE FFN (the others are dense)
    attention_params: float = 0.0  # Q, K, V, O weights of one layer (0: from the GQA shape)
    # q_proj also emits an output gate as wide as the queries (Qwen3-Next's attn_output_gate)
    attn_output_gate: bool = False
    # KV bytes one token holds in one layer on one rank (0: from the GQA shape; MLA: a latent)
    kv_bytes_per_token: float = 0.0
    # DeepSeek sparse attention (0 = dense): attention reads at most sparse_topk cached tokens
    # per query, after an FP8 indexer of index_flops_per_pair FLOPs per query-key pair has
    # read every cached key (index_bytes_per_token of the per-token KV bytes above)
    sparse_topk: int = 0
    index_bytes_per_token: float = 0.0
    index_flops_per_pair: float = 0.0
    dp: int = 1
    expert_parallel: bool = False
    # machines: an expert group larger than one machine gathers across them over the
    # scale-out network (per-GPU bytes/s, one direction; 0 = never spans: the old rule)
    gpus_per_machine: int = 0
    # > 0: the interconnect bandwidth is that many direct links, one per other GPU of the
    # machine (an AMD Infinity Fabric mesh, GPU.nvlink_mesh): a group uses only its own
    mesh_peers: int = 0
    scale_out_bytes_per_s: float = 0.0
    scale_out_note: str = ""
    name: str = "roofline"

    @classmethod
    def from_specs(cls, gpu, model, *, tp: int = 1, weight_bits: int = 16, kv_bits: int = 16,
                   engine: str = "vllm", **overrides) -> RooflineCostModel:
        """From a tuner GPU and ModelSpec (duck-typed: predictors does not import tuner);
        `engine` lays out the KV cache it reads as the memory plan does."""
        return cls(
            peak_flops=gpu.peak_flops,
            hbm_bytes_per_s=gpu.hbm_bytes_per_s,
            interconnect_bytes_per_s=gpu.interconnect_bytes_per_s,
            fp8_flops=(gpu.fp8_tflops * 1e12) if getattr(gpu, "fp8_tflops", None) else None,
            num_layers=model.num_layers,
            hidden_size=model.hidden_size,
            num_heads=model.num_heads,
            num_kv_heads=model.num_kv_heads,
            head_dim=model.head_dim,
            intermediate_size=model.intermediate_size,
            vocab_size=model.vocab_size,
            tp=tp,
            weight_bits=weight_bits,
            kv_bits=kv_bits,
            weight_bytes_per_param=model_weight_bytes_per_param(model, weight_bits),
            **_unconverted_fields(model, weight_bits),
            name=f"roofline from {gpu.name} spec sheet (not measured){_unmeasured_kind(gpu)}",
            kv_bytes_per_token=_kv_bytes_per_token(model, kv_bits, tp, gpu, engine),
            **_sparse_fields(model),
            **_moe_fields(model),
            **{k: v for k, v in _machine_fields(gpu).items() if k not in overrides},
            **overrides,
        )

    # ---- derived per-rank figures -------------------------------------------------------
    @property
    def _attention_params_per_layer(self) -> float:
        if self.attention_params:
            return self.attention_params / self.tp
        h, d = self.hidden_size, self.head_dim
        q = h * self.num_heads * d
        kv = 2 * h * self.num_kv_heads * d
        o = self.num_heads * d * h
        return (q + kv + o) / self.tp

    @property
    def _linear_params_per_layer(self) -> float:
        """Matmul weights per rank of one dense layer."""
        return self._attention_params_per_layer + 3 * self.hidden_size * self.intermediate_size / self.tp

    @property
    def _moe(self) -> MoEShape | None:
        return MoEShape.of(self) if self.num_experts > 0 else None

    @property
    def _moe_parallel(self) -> MoEParallel:
        return MoEParallel(self.tp, self.dp, self.expert_parallel)

    @property
    def num_moe_layers(self) -> int:
        return self.moe_layers if self.num_experts > 0 else 0

    @property
    def first_k_dense_layers(self) -> int:  # MoEShape.of reads it
        return self.num_layers - self.num_moe_layers

    @property
    def shared_expert_intermediate_size(self) -> int:  # MoEShape.of reads it
        return self.shared_intermediate_size

    @property
    def _gemm_flops_per_s(self) -> float:
        if self.weight_bits == 8 and self.fp8_flops:
            peak = self.fp8_flops
        elif self.weight_bits == 4:
            peak = self.peak_flops * self.w4_compute_penalty
        else:
            peak = self.peak_flops
        return peak * self.compute_efficiency

    @property
    def _bw(self) -> float:
        return self.hbm_bytes_per_s * self.bandwidth_efficiency

    def _link_bytes_per_s(self, group: int) -> float:
        """Per-GPU bandwidth a group of `group` GPUs of one machine exchanges over: the whole
        interconnect on a switch; on a direct mesh only the links to the group's other GPUs."""
        if self.mesh_peers <= 0:
            return self.interconnect_bytes_per_s
        return self.interconnect_bytes_per_s * min(max(group - 1, 1), self.mesh_peers) / self.mesh_peers

    @property
    def kv_bytes_per_token_per_layer(self) -> float:
        if self.kv_bytes_per_token:
            return self.kv_bytes_per_token
        kv_heads = max(1.0, self.num_kv_heads / self.tp)  # heads are split; replicated if < tp
        return 2.0 * kv_heads * self.head_dim * self.kv_bits / 8.0

    # ---- the model ----------------------------------------------------------------------
    @property
    def _weight_bytes_per_param(self) -> float:
        return self.weight_bytes_per_param or model_weight_bytes_per_param(None, self.weight_bits)

    @property
    def _quantized_bytes_per_param(self) -> float:
        return self.quantized_weight_bytes_per_param or self._weight_bytes_per_param

    def _gemm_s(self, params: float, width: float, tokens: np.ndarray,
                params16: float = 0.0) -> np.ndarray:
        """max(compute, memory) of a layer's GEMMs holding `params` weights per rank, whose
        activations per token are `width` 16-bit values; `params16` of those weights are kept
        at 16 bits by the checkpoint and run at the 16-bit tensor rate."""
        if params16:
            compute = 2.0 * tokens * ((params - params16) / self._gemm_flops_per_s
                                      + params16 / (self.peak_flops * self.compute_efficiency))
            # the 16-bit weights read 2 bytes each, the others their quantized bytes (the
            # mean would read gpt-oss's BF16 attention at ~0.55 B a weight)
            weight_bytes = ((params - params16) * self._quantized_bytes_per_param
                            + params16 * 2.0)
        else:
            compute = 2.0 * params * tokens / self._gemm_flops_per_s
            weight_bytes = params * self._weight_bytes_per_param
        return np.maximum(compute, (weight_bytes + tokens * 2.0 * width) / self._bw)

    def breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        """Seconds per iteration for each operation group (all layers summed)."""
        L = self.num_layers
        tokens = f.prefill_tokens + f.decodes
        q_heads = self.num_heads * (2 if self.attn_output_gate else 1)  # + the output gate
        attn_width = 2 * self.hidden_size + (q_heads + 2 * self.num_kv_heads) * self.head_dim / self.tp
        moe = self._moe
        Lm = self.num_moe_layers
        Ld = L - Lm
        attn16 = self.unconverted_attention * self._attention_params_per_layer
        linear = Ld * self._gemm_s(self._linear_params_per_layer,
                                   attn_width + 3 * self.intermediate_size / self.tp, tokens,
                                   attn16 + self.unconverted_mlp * (
                                       self._linear_params_per_layer
                                       - self._attention_params_per_layer))
        ffn_width = Ld * 3 * self.intermediate_size / self.tp
        parts = {}
        if moe is not None:
            par = self._moe_parallel
            # attention, router (replicated) and shared experts: GEMMs over this rank's tokens
            dense_part = (self._attention_params_per_layer + self.hidden_size * self.num_experts
                          + 3 * self.hidden_size * self.shared_intermediate_size / self.tp)
            linear = linear + Lm * self._gemm_s(
                dense_part, attn_width + 3 * self.shared_intermediate_size / self.tp, tokens,
                attn16)
            # routed experts: the tokens of every data-parallel rank, this GPU's experts
            fl, by = moe.expert_flops_bytes(tokens * par.token_factor, par,
                                            weight_bytes=self._quantized_bytes_per_param)
            parts["moe_experts"] = Lm * np.maximum(fl / self._gemm_flops_per_s, by / self._bw)
            if par.gathers:
                msg = tokens * par.token_factor * self.hidden_size * 2.0
                machines = par.machines(self.gpus_per_machine) if self.scale_out_bytes_per_s else 1
                local = self.gpus_per_machine if machines > 1 else par.group
                ring = (local - 1) / local * msg / self._link_bytes_per_s(local)
                if machines > 1:  # two-level: a machine's ring + the inter-machine stage
                    ring = ring + scale_out_gather_s(msg, machines, self.gpus_per_machine,
                                                     self.scale_out_bytes_per_s)
                parts["moe_dispatch"] = Lm * 2.0 * (ring + self.allreduce_latency_s) * (tokens > 0)
            ffn_width = ffn_width + Lm * moe.activation_width(par)
        # norms, SiLU*mul, rotary, residual adds: pure memory traffic (FFN width: layer mean)
        elementwise = tokens * 2.0 * (8 * self.hidden_size + ffn_width / L) / self._bw
        heads = self.num_heads / self.tp
        pairs, read = f.prefill_ctx + 0.5 * f.prefill_sq, f.decode_kv
        if self.sparse_topk:  # each query attends to its top-k: at most k pairs per token
            pairs = np.minimum(pairs, f.prefill_tokens * self.sparse_topk)
            read = np.minimum(read, f.decodes * self.sparse_topk)
        idx_b, idx_f = self.index_bytes_per_token, self.index_flops_per_pair
        attn_flops_p = (4.0 * heads * self.head_dim * pairs
                        + idx_f * (f.prefill_ctx + 0.5 * f.prefill_sq))
        attn_prefill = attn_flops_p / (self.peak_flops * self.attention_efficiency)
        kvb = self.kv_bytes_per_token_per_layer
        attn_decode = np.maximum((read * (kvb - idx_b) + f.decode_kv * idx_b) / self._bw,
                                 (4.0 * heads * self.head_dim * read + idx_f * f.decode_kv)
                                 / (self.peak_flops * self.attention_efficiency))
        if self.tp > 1:
            msg = tokens * self.hidden_size * 2.0
            ring = 2.0 * (self.tp - 1) / self.tp * msg / self._link_bytes_per_s(self.tp)
            allreduce = 2.0 * (ring + self.allreduce_latency_s)
        else:
            allreduce = np.zeros_like(tokens)
        head_params = self.vocab_size * self.hidden_size / self.tp
        lm_head = np.maximum(2.0 * head_params * f.seqs_sampled / (self.peak_flops * self.compute_efficiency),
                             np.where(f.seqs_sampled > 0, head_params * 2.0 / self._bw, 0.0))
        overhead = self.iteration_overhead_s + self.per_request_overhead_s * (f.decodes + f.seqs_sampled)
        return {
            "linear": linear,
            **parts,
            "elementwise": L * elementwise,
            "attention_prefill": L * attn_prefill,
            "attention_decode": L * attn_decode,
            "allreduce": L * allreduce,
            "lm_head": lm_head,
            "overhead": overhead + 0.0 * tokens,
        }

    def iteration_time_s(self, f: BatchFeatures) -> np.ndarray:
        return sum_parts(self.breakdown(f), len(f))

    @property
    def provenance(self) -> Provenance:
        name = self.name
        moe = self._moe
        if moe is not None and self.scale_out_bytes_per_s:
            par = self._moe_parallel
            machines = par.machines(self.gpus_per_machine)
            if par.gathers and machines > 1:
                name += (f"; MoE dispatch/combine over {machines} machines: the inter-machine "
                         f"stage over the scale-out network at {self.scale_out_note} (estimated)")
        return Provenance("roofline", name)

    def describe(self) -> str:
        return str(self.provenance)

    @property
    def transfer_model(self) -> None:
        return None  # no measured copy curve: the simulator uses the spec-sheet host link

    def breakdown_ops(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        return group_ops(self.breakdown(f), self.num_layers)

    # ---- per-layer views (additive: used by tuner.sim.offload for overlap budgets) -----------
    def layer_time_s(self, f: BatchFeatures) -> np.ndarray:
        """Seconds of ONE decoder layer per iteration (linear, elementwise, attention,
        all-reduce); excludes the LM head and the per-iteration overhead."""
        parts = self.breakdown(f)
        per_layer = sum(v for k, v in parts.items() if k not in ("lm_head", "overhead"))
        return per_layer / self.num_layers

    def decode_attention_layer_s(self, f: BatchFeatures) -> np.ndarray:
        """Seconds of ONE layer's decode attention per iteration (what CPU attention replaces)."""
        return self.breakdown(f)["attention_decode"] / self.num_layers


def _unconverted_fields(model, weight_bits: int) -> dict:
    """RooflineCostModel's 16-bit shares of a quantized checkpoint (opmath.unconverted_shares)."""
    attn, mlp = unconverted_shares(model, weight_bits)
    if not (attn or mlp):
        return {}
    return {"unconverted_attention": attn, "unconverted_mlp": mlp,
            "quantized_weight_bytes_per_param": quantized_bytes_per_param(model, weight_bits)}


def _sparse_fields(model) -> dict:
    """RooflineCostModel's sparse-attention fields for a tuner ModelSpec ({} when dense)."""
    if not getattr(model, "index_topk", 0):
        return {}
    return {"sparse_topk": model.index_topk,
            "index_bytes_per_token": model.index_bytes_per_token_per_layer,
            "index_flops_per_pair": 2.0 * model.index_n_heads * model.index_head_dim}


def _unmeasured_kind(gpu) -> str:
    """What the roofline assumes for a GPU of no measured architecture (an AMD Instinct: vLLM /
    SGLang on ROCm): the efficiencies above, fitted on H100 figures, carried to its kernels
    unchecked. A GPU of a measured architecture priced by the roofline (--profile-mode
    roofline, a config the tables do not cover) gets no such note."""
    if getattr(gpu, "architecture", None):
        return ""
    r = RooflineCostModel
    return (f"; no GPU of its kind is measured: {r.compute_efficiency:.2f} of its spec FLOP/s "
            f"and {r.bandwidth_efficiency:.2f} of its HBM bandwidth, the efficiencies fitted on "
            "H100 figures, assumed for its engine's kernels and unchecked")


def _kv_bytes_per_token(model, kv_bits: int, tp: int, gpu=None, engine: str = "vllm") -> float:
    """The memory plan's KV bytes per token, layer and rank for a tuner ModelSpec (MLA: one
    latent per token, a sparse-MLA FP8 cache laid out as `engine`'s backend on `gpu` keeps
    it); 0 for a duck-typed model without those fields (GQA formula)."""
    if not hasattr(model, "is_mla"):
        return 0.0
    from tuner.core.memory import kv_bytes_per_token_per_layer_rank

    return float(kv_bytes_per_token_per_layer_rank(model, kv_bits, tp, gpu=gpu, engine=engine))


def _machine_fields(gpu) -> dict:
    """The machine shape and scale-out network of a duck-typed tuner GPU (none: never spans)."""
    per = int(getattr(gpu, "gpus_per_machine", 0) or 0)
    if per <= 0:
        return {}
    bw, note = scale_out_of(gpu)
    mesh = per - 1 if getattr(gpu, "nvlink_mesh", False) and getattr(gpu, "nvlink_gbps", None) else 0
    return {"gpus_per_machine": per, "scale_out_bytes_per_s": bw, "scale_out_note": note,
            "mesh_peers": mesh}


def _moe_fields(model) -> dict:
    """RooflineCostModel's MoE fields from a tuner ModelSpec (duck-typed); {} for a dense one."""
    moe = MoEShape.of(model)
    out = {}
    attn = getattr(model, "attention_params_per_layer", None)
    if attn:
        out["attention_params"] = float(attn)
    if getattr(model, "attn_output_gate", False):
        out["attn_output_gate"] = True
    if moe is None:
        return out
    return dict(out, num_experts=moe.num_experts, experts_per_token=moe.experts_per_token,
                moe_intermediate_size=moe.moe_intermediate_size,
                shared_intermediate_size=moe.shared_intermediate_size, moe_layers=moe.moe_layers)
