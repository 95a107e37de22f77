"""Mixture-of-experts arithmetic shared by the cost models (roofline, measured tables).

An MoE layer is attention (as in a dense layer) plus an FFN of `num_experts` routed experts, of
which each token uses `experts_per_token` (top-k), plus shared experts every token uses, plus a
router GEMM (hidden -> num_experts). Every expert is resident in GPU memory (the weights are
the total parameters); a step's compute is the active ones'.

Parallelism (vLLM's FusedMoE, `vllm/model_executor/layers/fused_moe/config.py`
FusedMoEParallelConfig): the expert layers of a deployment with tensor parallel `tp` and data
parallel `dp` form one group of G = tp * dp GPUs. Without expert parallelism every expert is
split across the G GPUs (moe_tp = G: each GPU holds a 1/G slice of every expert's
intermediate dimension); with it (`enable_expert_parallel`) whole experts are split (moe_ep = G:
each GPU holds num_experts / G experts). With dp > 1 each MoE layer first gathers the hidden
states of every data-parallel rank's tokens, so the experts on one GPU see the tokens of all
dp ranks, and afterwards hands each rank its tokens' outputs back: vLLM's default all2all
backend (`allgather_reducescatter`) does this with an all-gather before the experts and a
reduce-scatter after them, over the G GPUs, of the gathered tokens' hidden states (16-bit).
With dp == 1 the tokens are already on every rank; the experts' partial outputs are summed by
the same all-reduce that follows a dense FFN under tensor parallelism.

Decode reads expert weights: a step of B tokens touches, under uniform routing, an expected
E * (1 - (1 - k/E)^B) distinct experts of E (each expert is missed by one token with
probability 1 - k/E, independently per token); only those experts' weights are read. This is
the uniform-routing estimate (real routers are skewed, which touches fewer experts).

An expert group larger than one machine (tp * dp > the GPU's gpus_per_machine: DeepSeek-V3 at
TP 8 x DP 4 on 8-GPU machines) gathers across machines: priced as a two-level collective, the
machine's own all-gather / reduce-scatter over its gpus_per_machine GPUs (NVLink) plus an
inter-machine ring over the scale-out network (each GPU's NIC carries its rail's share of the
message: (n - 1) / n of message / gpus_per_machine over n machines), at the catalog's
scale_out_gbps per GPU, plus SCALE_OUT_HOP_LATENCY_S per ring step (scale_out_gather_s).
NCCL's own flat ring crosses the machines' boundary with up to twice those bytes at n = 2:
the two-level figure is the lower, an estimate either way (said so in the provenance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tuner.core.catalog import FALLBACK_SCALE_OUT_GBPS_PER_MACHINE

# one inter-machine ring step: NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc)
# costs a network hop at hwLat[NET][Ring][LL128] = 4.0 us, plus the per-step network post
# overhead getNetOverhead() = 1.0 us on x86 Intel hosts: 5 us (an estimate: NCCL picks LL /
# Simple by message size, 2.7 / 14 us a step)
SCALE_OUT_HOP_LATENCY_S = 5e-6


def machines_spanned(group: int, gpus_per_machine: int | None) -> int:
    """Machines an expert group of `group` GPUs spans (1 where gpus_per_machine is unknown)."""
    if not gpus_per_machine or group <= gpus_per_machine:
        return 1
    return -(-group // gpus_per_machine)


def scale_out_of(gpu) -> tuple[float, str]:
    """(per-GPU scale-out bytes/s, provenance note) of a duck-typed tuner GPU: its catalog
    figure (GPU.scale_out_bytes_per_s), else the fallback estimate shared by its machine."""
    bw = getattr(gpu, "scale_out_bytes_per_s", None)
    if bw:
        return float(bw), str(getattr(gpu, "scale_out_note", f"{bw / 1e9:.3g} GB/s per GPU"))
    per = int(getattr(gpu, "gpus_per_machine", 8) or 8)
    bw = FALLBACK_SCALE_OUT_GBPS_PER_MACHINE * 1e9 / per
    return bw, (f"{bw / 1e9:.3g} GB/s per GPU, an estimate ({FALLBACK_SCALE_OUT_GBPS_PER_MACHINE * 8:g}"
                f" Gb/s per machine of {per} GPUs)")


def scale_out_gather_s(message_bytes, machines: int, gpus_per_machine: int,
                       bytes_per_s: float) -> np.ndarray:
    """Seconds of the inter-machine stage of one two-level all-gather (or reduce-scatter) of a
    gathered buffer of `message_bytes` over `machines` machines of `gpus_per_machine` GPUs:
    a ring over the machines in which each GPU's NIC carries (n - 1) / n of its rail's
    1 / gpus_per_machine of the message, at `bytes_per_s` per NIC, plus
    SCALE_OUT_HOP_LATENCY_S per ring step (n - 1 steps); 0 for an empty message."""
    msg = np.asarray(message_bytes, dtype=np.float64)
    n = float(machines)
    if n <= 1:
        return np.zeros_like(msg)
    wire = (n - 1.0) / n * msg / float(gpus_per_machine) / bytes_per_s
    return np.where(msg > 0, wire + (n - 1.0) * SCALE_OUT_HOP_LATENCY_S, 0.0)


def expected_distinct_experts(tokens, num_experts: int, experts_per_token: int) -> np.ndarray:
    """Expected number of distinct experts that `tokens` tokens routed top-k of E touch under
    uniform routing: E * (1 - (1 - k/E)^tokens) (the uniform-routing estimate)."""
    t = np.asarray(tokens, dtype=np.float64)
    E, k = float(num_experts), float(min(experts_per_token, num_experts))
    if E <= 0:
        return np.zeros_like(t)
    return E * -np.expm1(t * np.log1p(-k / E)) if k < E else np.where(t > 0, E, 0.0)


@dataclass(frozen=True)
class MoEParallel:
    """How one deployment splits its expert layers (see the module docstring)."""

    tp: int
    dp: int
    expert_parallel: bool

    @property
    def group(self) -> int:
        """GPUs the expert layers are split over: tp * dp."""
        return self.tp * self.dp

    @property
    def moe_tp(self) -> int:
        return 1 if self.expert_parallel else self.group

    @property
    def moe_ep(self) -> int:
        return self.group if self.expert_parallel else 1

    @property
    def token_factor(self) -> int:
        """Tokens entering a GPU's experts per token of its own replica's step: with dp > 1 the
        layer gathers every data-parallel rank's tokens (replicas assumed equally loaded)."""
        return self.dp

    @property
    def gathers(self) -> bool:
        """The layer all-gathers / reduce-scatters across data-parallel ranks (dp > 1)."""
        return self.dp > 1

    def machines(self, gpus_per_machine: int | None) -> int:
        """Machines the expert group spans (machines_spanned)."""
        return machines_spanned(self.group, gpus_per_machine)

    def describe(self, num_experts: int) -> str:
        how = (f"expert parallel over {self.group} GPU(s), {num_experts // self.group} experts "
               "each" if self.expert_parallel else f"experts tensor-split over {self.group} GPU(s)")
        if self.gathers:
            how += f"; all-gather + reduce-scatter of the {self.dp} data-parallel ranks' tokens"
        return how


@dataclass(frozen=True)
class MoEShape:
    """The FFN shape of a model's MoE layers (duck-typed from a tuner ModelSpec)."""

    hidden_size: int
    moe_intermediate_size: int
    num_experts: int
    experts_per_token: int
    shared_intermediate_size: int  # all shared experts together (0 = none)
    moe_layers: int
    dense_layers: int

    @classmethod
    def of(cls, model) -> MoEShape | None:
        """None for a dense model."""
        if int(getattr(model, "num_experts", 0) or 0) <= 0:
            return None
        first_dense = int(getattr(model, "first_k_dense_layers", 0) or 0)
        moe_layers = max(model.num_layers - first_dense, 0)
        return cls(hidden_size=model.hidden_size,
                   moe_intermediate_size=int(model.moe_intermediate_size),
                   num_experts=int(model.num_experts),
                   experts_per_token=int(model.experts_per_token),
                   shared_intermediate_size=int(getattr(model, "shared_expert_intermediate_size",
                                                        0) or 0),
                   moe_layers=moe_layers, dense_layers=model.num_layers - moe_layers)

    def activation_width(self, par: MoEParallel) -> float:
        """16-bit activation values per token of an MoE layer's FFN on one GPU: the shared
        experts' (tensor-split) and the routed experts' a token visits, with every data-parallel
        rank's tokens when they are gathered."""
        return (3 * self.shared_intermediate_size / par.tp + 3 * self.experts_per_token
                * self.moe_intermediate_size / par.moe_tp * par.token_factor / par.moe_ep)

    def expert_flops_bytes(self, tokens, par: MoEParallel, weight_bytes: float = 2.0,
                           experts_per_token: int | None = None,
                           hidden_size: int | None = None,
                           moe_intermediate_size: int | None = None,
                           num_experts: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(FLOPs, bytes) on one GPU of one MoE layer's routed experts for `tokens` tokens
        entering the layer across the expert group (all dp ranks): gate+up and down of each
        token's top-k experts, split over moe_tp * moe_ep GPUs (balanced); the weights of the
        distinct experts the tokens touch (uniform-routing estimate) and the activations.
        The keyword overrides describe another shape (the roofline ratio between two)."""
        t = np.asarray(tokens, dtype=np.float64)
        h = hidden_size or self.hidden_size
        inter = (moe_intermediate_size or self.moe_intermediate_size) / par.moe_tp
        E = num_experts or self.num_experts
        k = experts_per_token or self.experts_per_token
        pairs = t * k / par.moe_ep  # (token, expert) pairs this GPU computes
        flops = 2.0 * pairs * 3.0 * h * inter
        experts_read = expected_distinct_experts(t, E, k) / par.moe_ep
        byts = experts_read * 3.0 * h * inter * weight_bytes + 2.0 * pairs * (2.0 * h + 3.0 * inter)
        return flops, byts
