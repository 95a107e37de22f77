"""A linear-mixer hybrid (Qwen3-Next / Qwen3.5's Gated DeltaNet, Granite-4.0-H's Mamba2)
priced as two cost models and a roofline.

No kernel table or profile measures a Gated DeltaNet or Mamba2 layer, so an iteration is the
sum of
  - the attention layers: the source's own cost model of the model cut to its attention layers
    (projections, attention kernels, MLP / MoE, all-reduce; LM head and engine overhead once);
  - the linear layers' matrix multiplies: the same source's model of the linear layers with
    attention shapes whose fused QKV and output GEMMs are those of the layer's fused input
    projection (in_proj_qkvz; a Mamba2's in_proj) and out_proj (heads = value heads / Mamba2
    heads, head_dim = value dim / Mamba2 head dim), its attention kernels dropped;
  - the recurrent part (the chunked gated-delta-rule or SSD scan and the causal conv1d): a
    spec-sheet roofline, an ESTIMATE labelled `linear_attention_estimated` in every breakdown
    and said in the provenance.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tuner.core.provenance import Provenance
from tuner.predictors.features import BatchFeatures, sum_parts
from tuner.predictors.protocol import ITERATION_GROUPS, CostModel, group_ops

#: tokens per chunk of the chunked gated-delta-rule kernel (fla's chunk_gated_delta_rule, the
#: kernel vLLM's qwen3_next.py calls for prefill)
GDN_CHUNK_TOKENS = 64
#: tokens per chunk of Mamba2's chunked SSD scan (mamba_chunk_size: 256 in Granite-4.0's
#: configs and transformers' GraniteMoeHybridConfig default)
MAMBA2_CHUNK_TOKENS = 256
ESTIMATED = "linear_attention_estimated"


def attention_part(model):
    """`model` cut to its attention layers (a plain ModelSpec the cost sources price)."""
    return dataclasses.replace(model, num_layers=model.num_kv_layers, linear_attention_layers=0)


def linear_part(model):
    """`model` cut to its linear layers, their fused input projection / out_proj written as
    attention projections: value heads of value dim as query heads, and the KV heads whose
    K and V columns make up the rest of the input projection's outputs
    (ModelSpec.linear_in_proj_outputs: a Gated DeltaNet's 2 x key + 2 x value, a Mamba2's
    2 x intermediate + 2 x groups x d_state + heads)."""
    dv, vh = model.linear_value_head_dim, model.linear_num_value_heads
    kv_heads = max(round((model.linear_in_proj_outputs - vh * dv) / (2 * dv)), 1)
    return dataclasses.replace(model, num_layers=model.linear_attention_layers,
                               linear_attention_layers=0, num_heads=vh,
                               num_kv_heads=kv_heads, head_dim=dv, v_head_dim=0,
                               sliding_window=0, sliding_window_layers=0,
                               attn_output_gate=False)  # in_proj_qkvz holds the layer's gate


def scan_seconds(model, gpu, tp: int, f: BatchFeatures) -> np.ndarray:
    """Roofline seconds of the recurrent part of every linear layer on one rank: a decode
    reads and writes its request's state (conv + temporal, linear_state_bytes_per_layer_rank);
    a prefill token costs the chunked delta rule's ~6 x key dim x value dim FLOPs per value
    head (state update, inter-chunk output) plus 2 x chunk x (key + value dim) within its chunk;
    a Mamba2 (SSD) prefill token ~4 x d_state x head dim per head (chunk state, output from
    it), 2 x chunk x head dim per head and 2 x chunk x d_state per group (the intra-chunk
    C B^T and its product with x), and its conv1d's 2 x kernel per channel."""
    state = model.linear_state_bytes_per_layer_rank(tp)
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    heads = model.linear_num_value_heads / tp
    if model.is_mamba2:
        q = MAMBA2_CHUNK_TOKENS
        groups = model.linear_state_groups_rank(tp)
        conv = (2 * groups * dk + heads * dv) * 2.0 * model.linear_conv_kernel_dim
        flops_token = heads * (4.0 * dk * dv + 2.0 * q * dv) + groups * 2.0 * q * dk + conv
    else:
        flops_token = heads * (6.0 * dk * dv + 2.0 * GDN_CHUNK_TOKENS * (dk + dv))
    bytes_ = 2.0 * state * f.decodes
    flops = flops_token * f.prefill_tokens + 4.0 * heads * dk * dv * f.decodes
    per_layer = np.maximum(bytes_ / (gpu.hbm_gbps * 1e9), flops / (gpu.bf16_tflops * 1e12))
    return model.linear_attention_layers * per_layer


@dataclass
class HybridCostModel:
    attention: CostModel
    linear: CostModel
    model: object
    gpu: object
    tp: int = 1

    def _gpu_parts(self, f: BatchFeatures) -> tuple[dict[str, np.ndarray], object]:
        """(the GPU parts, the attention model's own overhead or None): each part model's
        breakdown is computed once a call (this runs on every priced batch)."""
        out = dict(self.attention.breakdown(f))  # a copy: the part model's dict stays its own
        over = out.pop("overhead", None)
        for k, v in self.linear.breakdown(f).items():
            if k in ITERATION_GROUPS or k.startswith("attention"):
                continue  # the LM head once; the stand-in attention kernels are not run
            out[k] = out.get(k, 0.0) + v
        out[ESTIMATED] = scan_seconds(self.model, self.gpu, self.tp, f)
        return out, over

    def breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        parts, over = self._gpu_parts(f)
        engine = getattr(self.attention, "engine", None)
        if engine is not None:
            gpu = sum_parts(parts, len(f))
            parts["overhead"] = engine.step_time_s(gpu, f, self.tp) - gpu
        elif over is not None:
            parts["overhead"] = over
        return parts

    def iteration_time_s(self, f: BatchFeatures) -> np.ndarray:
        return sum_parts(self.breakdown(f), len(f))

    def breakdown_ops(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        return group_ops(self.breakdown(f), self.model.num_layers)

    def layer_time_s(self, f: BatchFeatures) -> np.ndarray:
        p, _ = self._gpu_parts(f)
        return sum(v for k, v in p.items() if k not in ITERATION_GROUPS) / self.model.num_layers

    def decode_attention_layer_s(self, f: BatchFeatures) -> np.ndarray:
        return self.attention.decode_attention_layer_s(f)

    @property
    def transfer_model(self):
        return self.attention.transfer_model

    def _note(self) -> str:
        m = self.model
        return (f"hybrid: {m.num_kv_layers} attention layers as priced, "
                f"{m.linear_attention_layers} {m.linear_mixer_label} layers' GEMMs from the same "
                "source and their recurrent scan / conv1d by a spec-sheet roofline (ESTIMATE: "
                "no measured kernel)")

    def describe(self) -> str:
        return f"{self.attention.describe()}; {self._note()}"

    @property
    def provenance(self) -> Provenance:
        p = self.attention.provenance
        return dataclasses.replace(p, detail=f"{p.detail}; {self._note()}")


def hybrid_cost_model(model, gpu, config, resolve_part) -> HybridCostModel:
    """`resolve_part(spec) -> CostModel` prices each part with the caller's source."""
    return HybridCostModel(resolve_part(attention_part(model)), resolve_part(linear_part(model)),
                           model, gpu, max(int(config.tp), 1))
