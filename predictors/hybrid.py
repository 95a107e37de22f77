"""A Gated DeltaNet hybrid (Qwen3-Next, Qwen3.5) priced as two cost models and a roofline.

No kernel table or profile measures a Gated DeltaNet layer, so an iteration is the sum of
  - the attention layers: the source's own cost model of the model cut to its attention layers
    (projections, attention kernels, MLP / MoE, all-reduce; LM head and engine overhead once);
  - the linear layers' matrix multiplies: the same source's model of the linear layers with
    attention shapes whose fused QKV and output GEMMs are those of the layer's in_proj_qkvz
    and out_proj (heads = value heads, head_dim = value dim), its attention kernels dropped;
  - the recurrent part (the chunked gated-delta-rule scan and the causal conv1d): a spec-sheet
    roofline, an ESTIMATE labelled `linear_attention_estimated` in every breakdown and said in
    the provenance.
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
ESTIMATED = "linear_attention_estimated"


def attention_part(model):
    """`model` cut to its attention layers (a plain ModelSpec the cost sources price)."""
    return dataclasses.replace(model, num_layers=model.num_kv_layers, linear_attention_layers=0)


def linear_part(model):
    """`model` cut to its Gated DeltaNet layers, their in_proj_qkvz / out_proj written as
    attention projections: value heads of value dim as query heads, and the KV heads whose
    K and V columns make up the rest of in_proj_qkvz's 2 x key + 2 x value outputs."""
    dv, vh = model.linear_value_head_dim, model.linear_num_value_heads
    key = model.linear_num_key_heads * model.linear_key_head_dim
    kv_heads = max(round((2 * key + vh * dv) / (2 * dv)), 1)
    return dataclasses.replace(model, num_layers=model.linear_attention_layers,
                               linear_attention_layers=0, num_heads=vh,
                               num_kv_heads=kv_heads, head_dim=dv, v_head_dim=0,
                               sliding_window=0, sliding_window_layers=0)


def scan_seconds(model, gpu, tp: int, f: BatchFeatures) -> np.ndarray:
    """Roofline seconds of the recurrent part of every linear layer on one rank: a decode
    reads and writes its request's state (conv + temporal, linear_state_bytes_per_layer_rank);
    a prefill token costs the chunked delta rule's ~6 x key dim x value dim FLOPs per value
    head (state update, inter-chunk output) plus 2 x chunk x (key + value dim) within its chunk."""
    state = model.linear_state_bytes_per_layer_rank(tp)
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    heads = model.linear_num_value_heads / tp
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

    def _gpu_parts(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        out = {k: v for k, v in self.attention.breakdown(f).items() if k != "overhead"}
        for k, v in self.linear.breakdown(f).items():
            if k in ITERATION_GROUPS or k.startswith("attention"):
                continue  # the LM head once; the stand-in attention kernels are not run
            out[k] = out.get(k, 0.0) + v
        out[ESTIMATED] = scan_seconds(self.model, self.gpu, self.tp, f)
        return out

    def breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        parts = self._gpu_parts(f)
        engine = getattr(self.attention, "engine", None)
        if engine is not None:
            gpu = sum_parts(parts, len(f))
            parts["overhead"] = engine.step_time_s(gpu, f, self.tp) - gpu
        else:
            over = self.attention.breakdown(f).get("overhead")
            if over is not None:
                parts["overhead"] = over
        return parts

    def iteration_time_s(self, f: BatchFeatures) -> np.ndarray:
        return sum_parts(self.breakdown(f), len(f))

    def breakdown_ops(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        return group_ops(self.breakdown(f), self.model.num_layers)

    def layer_time_s(self, f: BatchFeatures) -> np.ndarray:
        p = self._gpu_parts(f)
        return sum(v for k, v in p.items() if k not in ITERATION_GROUPS) / self.model.num_layers

    def decode_attention_layer_s(self, f: BatchFeatures) -> np.ndarray:
        return self.attention.decode_attention_layer_s(f)

    @property
    def transfer_model(self):
        return self.attention.transfer_model

    def _note(self) -> str:
        m = self.model
        return (f"hybrid: {m.num_kv_layers} attention layers as priced, "
                f"{m.linear_attention_layers} Gated DeltaNet layers' GEMMs from the same source "
                "and their recurrent scan / conv1d by a spec-sheet roofline (ESTIMATE: no "
                "measured kernel)")

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
