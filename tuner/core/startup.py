"""Engine start-up: what every replica spends before its first step (issue #23, point 5).

A short job on many GPUs is dominated by it: a 2-minute schedule on 32 GPUs still pays each
engine's weight loading, ``torch.compile`` and CUDA-graph capture, on every rented GPU. The
replicas start in parallel, so the job's makespan is ``start-up + schedule`` and its bill pays
every GPU for both (tuner.sim.simulator adds it; ``--startup-s`` overrides it, 0 = none).

    start-up = weights_load_s + compile_s + graph_capture_s          (one replica; all alike)

**Weights** = the checkpoint's bytes at the served precision (``ModelSpec.weight_bytes``, plus
a VLM's vision tower, ``vision_weight_bytes``, which the engine loads for text too; an
8-bit plan that vLLM quantizes online from a 16-bit checkpoint reads twice that, not modelled)
over the load bandwidth of the instance's storage. Not 1/TP of them per GPU: vLLM's default
safetensors loader has *every* tensor-parallel rank read the whole checkpoint and keep its
slice, so the ranks of one instance read the same files (once from the disk, the page cache
serves the rest) and the time does not shrink with TP:

* vLLM PR #10647 "[Core] Integrate fastsafetensors loader for loading model weights"
  (github.com/vllm-project/vllm/pull/10647, Nov 2024), weights loaded from **local NVMe** on
  A100 with the default safetensors loader: Llama-2-7b-hf TP 1 7.29 s (13.5 GB bf16:
  1.85 GB/s); Llama-2-13b-hf TP 1 16.04 s (26.0 GB: 1.62 GB/s), TP 2 14.35 s (1.81 GB/s of
  checkpoint: halving each rank's share did not halve the time). Used: 1.75 GB/s (their mean).
* vLLM issue #5405 (github.com/vllm-project/vllm/issues/5405), a maintainer on a 144 GB
  checkpoint at TP 4: the four processes each load the model, "in the end it has to load 436GB
  from disk in total" at the disk's read speed.
* **Network block storage**: Run:ai Model Streamer benchmarks (run.ai/blog/run-ai-model-
  streamer-performance-benchmarks, Oct 2024; NVIDIA developer blog "Reducing Cold Start
  Latency for LLM Inference with NVIDIA Run:ai Model Streamer"): vLLM's default safetensors
  loader read Meta-Llama-3-8B (16.1 GB bf16) from an AWS EBS gp3 volume on a g5.12xlarge in
  47.99 s = 0.33 GB/s. (Their streamer reached 7.53 s from an io2 volume; faster loaders,
  fastsafetensors and the streamer, are not modelled.)

Local NVMe is the default (the checkpoint is on the instance's disk before the job starts:
downloading it is not priced). No provider in tuner/core/data/providers.yaml publishes a
checkpoint read bandwidth, so every provider gets the default (:data:`PROVIDER_STORAGE` maps
one to a storage kind where a source says which it has); ``storage="network"`` picks the
network figure.

**torch.compile and CUDA graphs**, per decoder layer: vLLM V1 (the default engine from 0.8.0)
compiles the model with ``torch.compile`` (Dynamo traces every layer; Inductor compiles the
pieces between attention ops) and captures piecewise CUDA graphs (one per piece and batch size),
so both grow with the layers:

* vLLM PR #11005 "[torch.compile] add dynamo time tracking" (github.com/vllm-project/vllm/
  pull/11005, Dec 2024), Meta-Llama-3-8B (32 layers): "Dynamo bytecode transform time:
  4.60 s", "Compiling a graph for general shape takes 14.77 s", "torch.compile takes 19.37 s
  in total" (0.61 s/layer), "Graph capturing finished in 15 secs" (0.47 s/layer); without
  torch.compile (V0's default) "Graph capturing finished in 10 secs" (0.31 s/layer).
* vLLM issue #19824 "[Feature]: Improve startup time UX" (github.com/vllm-project/vllm/
  issues/19824, Jun 2025), Llama-70B-FP8 at TP 8 (80 layers): "~15s to convert dynamo
  bytecode", "~70s to run torch.compile" (85 s: 1.06 s/layer), "~60s to capture the
  cudagraphs" (0.75 s/layer), "~10s to load weights --- from hot page cache" (and ~60 s of a
  P2P access check that VLLM_SKIP_P2P_CHECK=1 skips: not modelled).
* vLLM's own comment where it logs the capture (vllm/v1/worker/gpu_model_runner.py,
  ``capture_model``): "This usually takes 5~20 seconds."

Used (geometric means of the two models): compile 0.80 s/layer, capture 0.60 s/layer; V0
(releases before 0.8.0) no compile, capture 0.31 s/layer. Both fits are within about 30 % of
the four figures. A **warm compile cache** (``compile_cache=True``: ~/.cache/vllm/
torch_compile_cache copied from an earlier run, as vLLM's docs/design/torch_compile.md
suggests) replaces compiling by loading: Meta-Llama-3-8B "Dynamo bytecode transform time:
5.03 s" plus "Directly load the compiled graph(s) ... took 4.190 s" (vLLM PR #16848,
github.com/vllm-project/vllm/pull/16848, Apr 2025): 9.2 s; issue #20264 reports "torch.compile
takes 7.51 s in total" from the cache. Used: 9.2 s whatever the model.

Not counted (so this is a lower bound of a real start): process spawn and imports, NCCL
set-up, the memory-profiling run, downloading the checkpoint, provisioning the instance.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.engines import GENERATIONS, parse_version
from tuner.core.errors import TunerError
from tuner.core.pricing import machines_per_replica

GB = 1e9


@dataclass(frozen=True)
class Storage:
    """Where the checkpoint is read from, and how fast vLLM's default loader reads it."""

    name: str
    title: str
    bytes_per_s: float
    source: str


STORAGES = {
    "nvme": Storage("nvme", "local NVMe", 1.75 * GB,
                    "vLLM PR #10647: default safetensors loader from local NVMe on A100, "
                    "Llama-2-7b 7.29 s (1.85 GB/s), Llama-2-13b 16.04 s (1.62 GB/s), at TP 2 "
                    "14.35 s (1.81 GB/s); mean 1.75 GB/s"),
    "network": Storage("network", "network block storage", 0.33 * GB,
                       "Run:ai Model Streamer benchmarks (Oct 2024): vLLM's default "
                       "safetensors loader, Meta-Llama-3-8B (16.1 GB) from AWS EBS gp3 in "
                       "47.99 s = 0.33 GB/s"),
}
DEFAULT_STORAGE = "nvme"
#: provider (tuner/core/data/providers.yaml name) -> STORAGES key, only where a source says
#: which storage its instances load checkpoints from; none does yet, so all use the default
PROVIDER_STORAGE: dict[str, str] = {}

#: V1 (vLLM >= 0.8.0): cold torch.compile and piecewise CUDA-graph capture, s per decoder layer
V1_SINCE = GENERATIONS[1].since  # tuner.core.engines: V1 the default engine
V1_COMPILE_S_PER_LAYER = 0.80
V1_CAPTURE_S_PER_LAYER = 0.60
V0_CAPTURE_S_PER_LAYER = 0.31  # V0: no torch.compile by default
WARM_COMPILE_S = 9.2  # a populated torch.compile cache: Dynamo + loading the compiled graphs
COMPILE_SOURCE = ("vLLM PR #11005 (Meta-Llama-3-8B, 32 layers: torch.compile 19.37 s, graph "
                  "capture 15 s) and issue #19824 (Llama-70B-FP8 TP 8, 80 layers: ~85 s "
                  "Dynamo + compile, ~60 s capture): 0.80 and 0.60 s per layer")
WARM_SOURCE = ("vLLM PR #16848: Meta-Llama-3-8B from a warm compile cache, Dynamo 5.03 s + "
               "loading the compiled graphs 4.19 s")
V0_SOURCE = "vLLM PR #11005: V0 without torch.compile, graph capture 10 s for 32 layers"
OVERRIDE_SOURCE = "given (--startup-s)"
#: what an estimated start-up leaves out, said beside it (the figure is a lower bound)
NOT_COUNTED = ("estimated, a lower bound: downloading the checkpoint, provisioning the "
               "machine, process start and NCCL set-up not counted")


@dataclass(frozen=True)
class Startup:
    """One replica's start-up, in seconds; every replica starts at once, so it is the job's."""

    weights_load_s: float
    graph_capture_s: float
    compile_s: float
    total_s: float
    weight_bytes: float = 0.0  # the checkpoint bytes one machine reads (a stage of them per machine)
    load_bytes_per_s: float = 0.0
    storage: str = ""  # STORAGES key ("" when given)
    engine: str = ""  # "V1" / "V0" ("" when given)
    compile_cache: bool = False
    given: bool = False  # total_s set by the user (--startup-s); no breakdown
    weights_source: str = ""
    compile_source: str = ""

    @classmethod
    def fixed(cls, seconds: float) -> Startup:
        """A start-up the user states (``--startup-s``); 0 = none."""
        s = check_startup_s(seconds)
        return cls(weights_load_s=0.0, graph_capture_s=0.0, compile_s=0.0, total_s=s,
                   given=True, weights_source=OVERRIDE_SOURCE, compile_source=OVERRIDE_SOURCE)

    def describe(self) -> str:
        """'41 s (weights 9.2 s: 16.1 GB at 1.75 GB/s from local NVMe, CUDA graphs 19 s,
        torch.compile 26 s; estimated, a lower bound: downloading the checkpoint, ... not
        counted)'."""
        from tuner.core.units import fmt_duration

        if self.given:
            return f"{fmt_duration(self.total_s)} (given with --startup-s)"
        where = STORAGES[self.storage].title if self.storage in STORAGES else self.storage
        parts = [f"weights {fmt_duration(self.weights_load_s)}: {self.weight_bytes / GB:,.1f} GB "
                 f"at {self.load_bytes_per_s / GB:.3g} GB/s from {where}",
                 f"CUDA graphs {fmt_duration(self.graph_capture_s)}"]
        if self.compile_s > 0:
            parts.append(f"torch.compile {fmt_duration(self.compile_s)}"
                         + (" from a warm cache" if self.compile_cache else ""))
        # a model of public figures, not a measurement, and a floor: a rented machine also
        # spends these before its first step (see the module docstring), unpriced here
        return f"{fmt_duration(self.total_s)} ({', '.join(parts)}; {NOT_COUNTED})"

    def to_dict(self) -> dict:
        return {**asdict(self), "description": self.describe()}


def check_startup_s(seconds: float) -> float:
    """A given start-up in seconds: finite and >= 0 (one TunerError otherwise)."""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        raise TunerError(f"--startup-s must be a number of seconds, got {seconds!r}.") from None
    if not math.isfinite(s) or s < 0:
        raise TunerError(f"--startup-s must be a finite number of seconds >= 0, got {seconds!r}.")
    return s


def storage_for(provider: str | None = None, storage: str | None = None) -> Storage:
    """The storage a replica loads its checkpoint from: `storage` when given, else the
    provider's where :data:`PROVIDER_STORAGE` knows it, else :data:`DEFAULT_STORAGE`."""
    key = storage or PROVIDER_STORAGE.get((provider or "").lower()) or DEFAULT_STORAGE
    if key not in STORAGES:
        raise TunerError(f"Unknown weight storage {key!r}; one of {', '.join(STORAGES)}.")
    return STORAGES[key]


def startup_for(model: ModelSpec, gpu: GPU | None, config: ServingConfig,
                engine_version: str | None = None, provider: str | None = None, *,
                storage: str | None = None, compile_cache: bool = False) -> Startup:
    """One replica's start-up for (model, gpu, config) under vLLM `engine_version` (None: the
    newest), its checkpoint on `provider`'s storage (None: the GPU's --provider billing, if
    any); see the module docstring for the figures and their sources."""
    if provider is None and gpu is not None and gpu.billing is not None:
        provider = gpu.billing.provider
    st = storage_for(provider, storage)
    # a VLM's vision tower is read too where the engine builds it for a text-only job
    # (tuner.core.memory.vision_weight_bytes_per_rank: not where vLLM's zero limits skip it)
    from tuner.core.memory import vision_weight_bytes_per_rank

    tower = vision_weight_bytes_per_rank(model, config, engine_version) * config.tp
    nbytes = float(model.weight_bytes(config.weight_bits) + tower)
    # pipeline stages on different machines load their layers from their own disks at once;
    # each stage captures and compiles its own layers, the stages in parallel
    per_machine = gpu.gpus_per_machine if gpu is not None else config.tp * config.pp
    machines = machines_per_replica(per_machine, config.tp, config.pp)
    load_s = nbytes / machines / st.bytes_per_s
    v = parse_version(engine_version)
    layers = math.ceil(model.num_layers / config.pp)
    if v is not None and v < V1_SINCE:
        engine, capture_s, compile_s, csrc = "V0", V0_CAPTURE_S_PER_LAYER * layers, 0.0, V0_SOURCE
    else:
        engine = "V1"
        capture_s = V1_CAPTURE_S_PER_LAYER * layers
        compile_s = WARM_COMPILE_S if compile_cache else V1_COMPILE_S_PER_LAYER * layers
        csrc = COMPILE_SOURCE + ("; warm cache: " + WARM_SOURCE if compile_cache else "")
    return Startup(weights_load_s=load_s, graph_capture_s=capture_s, compile_s=compile_s,
                   total_s=load_s + capture_s + compile_s, weight_bytes=nbytes / machines,
                   load_bytes_per_s=st.bytes_per_s, storage=st.name, engine=engine,
                   compile_cache=compile_cache, weights_source=st.source, compile_source=csrc)


def resolve_startup(model: ModelSpec, gpu: GPU | None, config: ServingConfig,
                    startup_s: float | None = None,
                    engine_version: str | None = None) -> Startup:
    """`startup_s` given (``--startup-s``, 0 allowed): that; None: :func:`startup_for`."""
    if startup_s is not None:
        return Startup.fixed(startup_s)
    return startup_for(model, gpu, config, engine_version)


__all__ = ["DEFAULT_STORAGE", "PROVIDER_STORAGE", "STORAGES", "Startup", "Storage",
           "check_startup_s", "resolve_startup", "startup_for", "storage_for"]
