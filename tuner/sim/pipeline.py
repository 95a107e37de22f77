"""Pipeline parallelism as vLLM runs it (issue #27 item 4): the layers split over PP stages
(each a TP group, a stage per machine when a replica does not fit one), up to PP micro-batches
in flight.

A step of the scheduler (every running request advancing once) is, with PP stages and
n = min(PP, sequences in the step) micro-batches of 1/n of the step's work each: every stage
runs every micro-batch through its 1/PP of the layers, so the step takes max(n, PP) stage
times t_model(step / n) / PP = t_model(step / n) (the whole model's time on a micro-batch: a
full pipeline is as fast per token as one GPU group on 1/PP of the batch; fewer micro-batches
than stages leave stages idle, the bubble), plus the micro-batch's hidden states handed from
stage to stage (PP - 1 hops of tokens x 2 x hidden x 2 bytes: vLLM's decoder models hand over
IntermediateTensors of the hidden states AND the residual stream, 16-bit each), over NVLink
inside a machine, else the machines' network: with --provider, the rented instance's published
bandwidth where the price table gives one, of which a stage's TP ranks use their GPUs' share
(vLLM splits the hand-over over them: send_tensor_dict with the TP group as
all_gather_group); otherwise an assumed 100 Gb/s. `t_model` is the cost model of one stage's TP group over the whole
model (a stage's layers are the model's, PP of them in turn).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tuner.core.pricing import machines_per_replica, network_of
from tuner.core.provenance import Provenance
from tuner.core.units import plural
from tuner.predictors.features import BatchFeatures

#: the machines' network when a replica's stages span machines: the catalog states none, so
#: 100 Gb/s (ESTIMATE: a common cloud instance's; 8-GPU training instances have far more)
ASSUMED_NETWORK_BYTES_PER_S = 100e9 / 8
HOP_LATENCY_S = 20e-6  # one send/receive between stages (estimate)


@dataclass(frozen=True, eq=False)
class PipelinedCostModel:
    """A cost model of one stage's TP group, stepped as PP pipeline stages (module docstring)."""

    base: object  # the CostModel of the TP group over the whole model
    pp: int
    hop_bytes_per_token: float  # hidden states + residual: 2 x hidden x 2 bytes (16-bit)
    hop_bytes_per_s: float
    across_machines: bool
    link: str = ""  # what the hand-overs cross, for the provenance ("" : the default wording)

    def _micro(self, f: BatchFeatures) -> BatchFeatures:
        """One micro-batch of each step: 1/n of it, n = min(PP, sequences in the step)."""
        n = np.minimum(float(self.pp), np.maximum(f.seqs_sampled, 1.0))
        return BatchFeatures(f.prefill_tokens / n, f.prefill_sq / n, f.prefill_ctx / n,
                             f.decodes / n, f.decode_kv / n, f.seqs_sampled / n)

    def _hops_s(self, micro: BatchFeatures) -> np.ndarray:
        tokens = micro.prefill_tokens + micro.decodes
        return (self.pp - 1) * (tokens * self.hop_bytes_per_token / self.hop_bytes_per_s
                                + HOP_LATENCY_S)

    def iteration_time_s(self, f: BatchFeatures) -> np.ndarray:
        micro = self._micro(f)
        return self.base.iteration_time_s(micro) + self._hops_s(micro)

    def breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        micro = self._micro(f)
        return {**self.base.breakdown(micro), "pipeline_hops": self._hops_s(micro)}

    def breakdown_ops(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        return self.base.breakdown_ops(self._micro(f))

    def layer_time_s(self, f: BatchFeatures) -> np.ndarray:
        return self.base.layer_time_s(self._micro(f))

    def decode_attention_layer_s(self, f: BatchFeatures) -> np.ndarray:
        return self.base.decode_attention_layer_s(self._micro(f))

    @property
    def transfer_model(self):
        return self.base.transfer_model

    @property
    def provenance(self) -> Provenance:
        p = self.base.provenance
        link = self.link or ("the machines' network, assumed 100 Gb/s (ESTIMATE)"
                             if self.across_machines else "NVLink / PCIe inside the machine")
        return dataclasses.replace(p, detail=(
            f"{p.detail}; pipeline parallel {self.pp} stages: a step is the whole model's time "
            f"on 1/{self.pp} of it (up to {self.pp} micro-batches in flight) plus "
            f"{plural(self.pp - 1, 'hand-over')} of its hidden states and residual over {link}"))

    def describe(self) -> str:
        return str(self.provenance)


def pipelined(cost_model, model, gpu, config):
    """`cost_model` stepped as `config.pp` pipeline stages (itself at PP 1)."""
    if config.pp <= 1:
        return cost_model
    across = machines_per_replica(gpu.gpus_per_machine, config.tp, config.pp) > 1
    bw = ASSUMED_NETWORK_BYTES_PER_S if across else gpu.interconnect_bytes_per_s
    link = ""
    # --provider: the network of the instance the plan rents, where the table publishes it
    inst = network_of(gpu, config.tp, config.dp, config.pp) if across else None
    if inst is not None:
        # each of the stage's TP ranks sends 1/TP of the hidden states over its GPU's share
        bw = config.tp * inst.network_bytes_per_s_per_gpu
        link = (f"the rented instances' network ({inst.network_label}), the {config.tp} "
                f"GPUs' share of it: {bw / 1e9:.3g} GB/s")
    elif across and getattr(gpu, "billing", None) is not None:
        link = ("the machines' network, assumed 100 Gb/s (ESTIMATE: the rented instance "
                "publishes no network figure in the price table)")
    # two tensors per token (hidden states and residual), each hidden x 2 bytes
    return PipelinedCostModel(cost_model, config.pp, 2.0 * 2.0 * model.hidden_size, bw, across,
                              link)
