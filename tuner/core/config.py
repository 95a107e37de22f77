"""ServingConfig: one point of the search space, flat like vLLM's EngineArgs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tuner.core.errors import TunerError

# Scheduler presets of InferMax's unified scheduler (seed 001, Alg. 1).
SCHEDULERS = (
    "vllm",  # vLLM V1: chunked prefill, one budget for decodes + prefill chunks, decodes first
    "vllm-v0",  # vLLM V0 default: prefill-first, no hybrid batches, no chunking
    "sarathi",  # Sarathi-Serve (seed 004, Alg. 3): stall-free hybrid batching, chunk = budget
    "vllm-noevict",  # eviction-free variants reserve prompt + output at admission
    "vllm-v0-noevict",
    "sarathi-noevict",
)
ORDERINGS = ("fcfs", "shortest-prompt", "longest-output", "binpack", "blend")


@dataclass(frozen=True)
class ServingConfig:
    """Every knob of one serving deployment. Defaults follow vLLM V1's offline defaults."""

    gpu: str
    tp: int = 1  # tensor-parallel degree (GPUs per replica)
    dp: int = 1  # data-parallel replicas; the workload is split across them
    scheduler: str = "vllm"
    chunk_size: int = 8192  # token budget per step (vLLM max_num_batched_tokens); = prefill chunk
    max_running: int = 256  # R_max (vLLM max_num_seqs)
    weight_bits: int = 16
    kv_bits: int = 16
    kv_offload_layers: int = 0
    weight_offload_fraction: float = 0.0
    cpu_threads_intra: int = 0
    cpu_threads_inter: int = 0
    ordering: str = "fcfs"
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    attention_on_cpu: bool = False  # decode attention of the KV-offloaded layers runs on the CPU

    @property
    def num_gpus(self) -> int:
        return self.tp * self.dp

    @property
    def eviction_free(self) -> bool:
        return self.scheduler.endswith("-noevict")

    def validate(self) -> ServingConfig:
        """Raise TunerError on values no engine accepts; return self for chaining."""
        if self.scheduler not in SCHEDULERS:
            raise TunerError(f"Unknown scheduler {self.scheduler!r}; choose one of {', '.join(SCHEDULERS)}.")
        if self.ordering not in ORDERINGS:
            raise TunerError(f"Unknown ordering {self.ordering!r}; choose one of {', '.join(ORDERINGS)}.")
        if self.tp not in (1, 2, 4, 8):
            raise TunerError(f"Tensor parallel degree must be 1, 2, 4 or 8, got {self.tp}.")
        if self.dp < 1:
            raise TunerError(f"Data-parallel replicas must be >= 1, got {self.dp}.")
        if self.chunk_size < 1 or self.max_running < 1:
            raise TunerError("chunk_size and max_running must be positive.")
        if self.weight_bits not in (4, 8, 16) or self.kv_bits not in (4, 8, 16):
            raise TunerError("weight_bits and kv_bits must be 4, 8 or 16.")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise TunerError("gpu_memory_utilization must be in (0, 1].")
        if not 0.0 <= self.weight_offload_fraction <= 1.0:
            raise TunerError("weight_offload_fraction must be in [0, 1].")
        if self.kv_offload_layers < 0:
            raise TunerError("kv_offload_layers must be >= 0.")
        if self.block_size < 1:
            raise TunerError("block_size must be >= 1.")
        if self.cpu_threads_intra < 0 or self.cpu_threads_inter < 0:
            raise TunerError("cpu_threads_intra and cpu_threads_inter must be >= 0 (0: chosen "
                             "by LM-Offload's Alg. 3).")
        if not isinstance(self.attention_on_cpu, bool):
            raise TunerError(f"attention_on_cpu must be true or false, got {self.attention_on_cpu!r}.")
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ServingConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise TunerError(f"Unknown ServingConfig field(s): {', '.join(sorted(unknown))}.")
        return cls(**d)
