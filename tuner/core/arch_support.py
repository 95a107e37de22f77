"""The first vLLM release that runs a model's architecture, as data.

    model_architecture(spec) -> ModelArch | None    the config.json architecture (and the
                                                     features that need a newer release) of
                                                     a ModelSpec, and where that is known from
    release_refusal(spec, engine_version) -> str | None
                                                     why --engine-version cannot run the model
    check_engine_runs(spec, engine_version) -> str | None
                                                     refuses (TunerError) a release that cannot
                                                     run the model; a warning line where the
                                                     architecture is only assumed from a name

`--engine-version` accepts any vLLM from 0.5.0 on (tuner.core.engines), but an architecture
only runs from the release that registered it: DeepSeek-V3 on 0.6.0 fails at load ("Model
architectures ['DeepseekV3ForCausalLM'] are not supported"). A prediction for that pair
describes a job that cannot run, so it is refused (replaying an old run of a model that release
could not load is a user error), naming the architecture, the release that runs it, where that
is stated, and the option to change.

Only architectures of tuner's model catalog whose first release could be checked are rows here
(VLLM_ARCH_FLOORS, each with its source: the PyPI wheels' vllm/model_executor/models/registry.py,
or __init__.py before 0.6, of the first release and the one before it). Left out, for lack of
a source as solid: Llama-3.2's tied embeddings (priced by the llama3 RoPE row only); SGLang
releases (tuner models one SGLang line and `--engine-version` is vLLM's only). Architectures
older than vLLM 0.5.0 (Llama, Mistral, Mixtral, Qwen2, Phi-3: all in the 0.5.0 wheel's
vllm/model_executor/models/__init__.py) need no row.

A fine-tune shares its base model's architecture (a Llama-3.1 fine-tune keeps
LlamaForCausalLM with llama3 RoPE), so a repo priced with a catalog entry's shape gets that
entry's floor too; but where the shape is only assumed from the repo's name (its config.json
unread: tuner.core.catalog.ASSUMED_FROM_NAME) so is the architecture, and the check warns
instead of refusing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from tuner.core.catalog import ASSUMED_FROM_NAME, ModelSpec
from tuner.core.engines import parse_version
from tuner.core.errors import TunerError

#: features of a config that need a newer release than its architecture alone
ROPE_LLAMA3 = "llama3 RoPE scaling"  # rope_scaling.rope_type "llama3" (Llama 3.1 / 3.2 / 3.3)
HEAD_DIM = "explicit head_dim"  # head_dim set apart from hidden_size / heads (Mistral-Nemo)


@dataclass(frozen=True)
class ArchFloor:
    """The first vLLM release that runs `architecture` (with `feature`, where one is named)."""

    architecture: str  # a config.json `architectures` entry
    since: str  # the first release that runs it, as vLLM numbers it ("0.5.3.post1")
    model: str  # what runs on it, for the message ("DeepSeek-V3")
    source: str  # where that release is stated
    feature: str = ""  # "" = every model of the architecture; else ROPE_LLAMA3 / HEAD_DIM


#: one row per (architecture, feature), each checked against the public statement it cites
VLLM_ARCH_FLOORS: tuple[ArchFloor, ...] = (
    ArchFloor("LlamaForCausalLM", "0.5.3.post1", "Llama 3.1 / 3.2 / 3.3",
              "the 0.5.3.post1 wheel's rotary_embedding.py handles rope_type 'llama3', 0.5.3's "
              "reads rope_scaling['type'] only (vllm-project/vllm#6696)", feature=ROPE_LLAMA3),
    ArchFloor("MistralForCausalLM", "0.5.3", "Mistral-Nemo",
              "the 0.5.3 wheel's models/llama.py reads the config's head_dim, 0.5.2's derives "
              "it from hidden_size (vllm-project/vllm#6548)", feature=HEAD_DIM),
    ArchFloor("DeepseekV3ForCausalLM", "0.6.6", "DeepSeek-V3 / R1",
              "the 0.6.6 wheel's model registry has it, 0.6.5's does not"),
    ArchFloor("Gemma3ForConditionalGeneration", "0.8.0", "Gemma 3",
              "the 0.8.0 wheel's model registry has it, 0.7.3's does not"),
    ArchFloor("Gemma3ForCausalLM", "0.8.0", "Gemma 3 text-only",
              "the 0.8.0 wheel's model registry has it, 0.7.3's does not"),
    ArchFloor("Qwen3ForCausalLM", "0.8.4", "Qwen3",
              "the 0.8.4 wheel's model registry has it, 0.8.3's does not (FP8 dense "
              "checkpoints from 0.8.5: vllm-project/vllm#17630)"),
    ArchFloor("Qwen3MoeForCausalLM", "0.8.4", "Qwen3-MoE",
              "the 0.8.4 wheel's model registry has it, 0.8.3's does not"),
    ArchFloor("GptOssForCausalLM", "0.10.1", "gpt-oss",
              "the 0.10.1 wheel's model registry has it, 0.10.0's does not"),
    ArchFloor("DeepseekV32ForCausalLM", "0.11.0", "DeepSeek-V3.2, sparse attention indexer",
              "the 0.11.0 wheel's model registry has it, 0.10.2's does not"),
    ArchFloor("Qwen3NextForCausalLM", "0.10.2", "Qwen3-Next (Gated DeltaNet hybrid, V1 only)",
              "the 0.10.2 wheel's model registry has it, 0.10.1.1's does not"),
    ArchFloor("NemotronHForCausalLM", "0.9.1",
              "Nemotron-H / Nemotron-Nano-v2 (Mamba2 hybrid; tuner prices it on V1 from 0.10.2)",
              "the 0.9.1 wheel's model registry has it, 0.9.0's does not"),
    ArchFloor("Qwen3_5ForConditionalGeneration", "0.17.0",
              "Qwen3.5 (Gated DeltaNet hybrid, V1 only)",
              "the 0.17.0 wheel's model registry has it, 0.16.0's does not"),
    ArchFloor("Qwen3_5MoeForConditionalGeneration", "0.17.0",
              "Qwen3.5-MoE (Gated DeltaNet hybrid, V1 only)",
              "the 0.17.0 wheel's model registry has it, 0.16.0's does not"),
    ArchFloor("Qwen3_5ForCausalLM", "0.27.0", "Qwen3.5 text-only (Gated DeltaNet hybrid)",
              "the 0.27.0 wheel's model registry has it, 0.26.0's does not (0.17.0 - 0.26.0 "
              "register the multimodal Qwen3_5ForConditionalGeneration only)"),
    ArchFloor("Qwen3_5MoeForCausalLM", "0.27.0",
              "Qwen3.5-MoE text-only (Gated DeltaNet hybrid)",
              "the 0.27.0 wheel's model registry has it, 0.26.0's does not (0.17.0 - 0.26.0 "
              "register the multimodal Qwen3_5MoeForConditionalGeneration only)"),
)

#: the config.json `architectures` entry and RoPE scaling type of each catalog model
#: (tuner/core/data/models.yaml), as its Hugging Face repo's config.json states them; the
#: shipped configs' entries are checked against those files (tests/test_arch_support_s49.py)
CATALOG_ARCHITECTURES: dict[str, tuple[str, str]] = {
    "llama-2-7b": ("LlamaForCausalLM", ""),
    "llama-2-13b": ("LlamaForCausalLM", ""),
    "llama-2-70b": ("LlamaForCausalLM", ""),
    "llama-3-8b": ("LlamaForCausalLM", ""),
    "llama-3-70b": ("LlamaForCausalLM", ""),
    "tiny-llama": ("LlamaForCausalLM", ""),
    "llama-3.1-8b": ("LlamaForCausalLM", "llama3"),
    "llama-3.1-70b": ("LlamaForCausalLM", "llama3"),
    "llama-3.1-405b": ("LlamaForCausalLM", "llama3"),
    "llama-3.2-1b": ("LlamaForCausalLM", "llama3"),
    "llama-3.2-3b": ("LlamaForCausalLM", "llama3"),
    "llama-3.3-70b": ("LlamaForCausalLM", "llama3"),
    "mistral-7b": ("MistralForCausalLM", ""),
    "mistral-large-2407": ("MistralForCausalLM", ""),
    "mistral-nemo-12b": ("MistralForCausalLM", ""),
    "mixtral-8x7b": ("MixtralForCausalLM", ""),
    "mixtral-8x22b": ("MixtralForCausalLM", ""),
    "qwen2.5-7b": ("Qwen2ForCausalLM", ""),
    "qwen2.5-14b": ("Qwen2ForCausalLM", ""),
    "qwen2.5-32b": ("Qwen2ForCausalLM", ""),
    "qwen2.5-72b": ("Qwen2ForCausalLM", ""),
    "qwen3-8b": ("Qwen3ForCausalLM", ""),
    "qwen3-14b": ("Qwen3ForCausalLM", ""),
    "qwen3-32b": ("Qwen3ForCausalLM", ""),
    "qwen3-30b-a3b": ("Qwen3MoeForCausalLM", ""),
    "qwen3-30b-a3b-instruct-2507": ("Qwen3MoeForCausalLM", ""),
    "qwen3-235b-a22b": ("Qwen3MoeForCausalLM", ""),
    "qwen3-next-80b-a3b": ("Qwen3NextForCausalLM", ""),
    "granite-4.0-h-tiny": ("GraniteMoeHybridForCausalLM", ""),
    "nemotron-h-8b-base-8k": ("NemotronHForCausalLM", ""),
    "gemma-3-4b": ("Gemma3ForConditionalGeneration", "linear"),
    "gemma-3-12b": ("Gemma3ForConditionalGeneration", "linear"),
    "gemma-3-27b": ("Gemma3ForConditionalGeneration", "linear"),
    "phi-4": ("Phi3ForCausalLM", ""),
    "gpt-oss-20b": ("GptOssForCausalLM", "yarn"),
    "gpt-oss-120b": ("GptOssForCausalLM", "yarn"),
    "deepseek-v3": ("DeepseekV3ForCausalLM", "yarn"),
    "deepseek-v3.2": ("DeepseekV32ForCausalLM", "yarn"),
}


@dataclass(frozen=True)
class ModelArch:
    """A model's architecture as vLLM dispatches on it."""

    architectures: tuple[str, ...]  # config.json `architectures`
    features: frozenset[str]  # ROPE_LLAMA3 / HEAD_DIM where the config has them
    known_from: str  # "its config.json PATH", "catalog entry NAME", ...
    assumed: bool = False  # only assumed from a repo name (its config.json unread)


def release_key(version: str) -> tuple[int, int, int, int]:
    """'0.5.3.post1' -> (0, 5, 3, 1), '0.10.1.1' -> (0, 10, 1, 1), '0.6.6' -> (0, 6, 6, 0):
    vLLM's post releases (0.5.3.post1 added Llama 3.1's RoPE to 0.5.3) order after their
    release, which tuner.core.engines.parse_version (three parts) cannot tell apart."""
    parse_version(version)  # one message for a string that is no version
    parts = [int(x) for x in re.findall(r"\d+", str(version))[:4]]
    return tuple((parts + [0, 0, 0, 0])[:4])  # type: ignore[return-value]


def _rope_type(cfg: dict) -> str:
    """The rope_scaling type of a config (its text decoder's for a multimodal config;
    transformers 5 writes it as rope_parameters)."""
    for c in (cfg, cfg.get("text_config") or {}):
        for key in ("rope_scaling", "rope_parameters"):
            rope = c.get(key) if isinstance(c, dict) else None
            if isinstance(rope, dict):
                return str(rope.get("rope_type") or rope.get("type") or "")
    return ""


def _features(spec: ModelSpec, rope_type: str) -> frozenset[str]:
    out = set()
    if rope_type == "llama3":
        out.add(ROPE_LLAMA3)
    # head_dim set apart from hidden_size / heads (Mistral-Nemo: 128, not 5120 / 32 = 160);
    # vLLM before 0.5.3 derived it from hidden_size. MLA's head_dim is its own.
    if not spec.is_mla and spec.head_dim * spec.num_heads != spec.hidden_size:
        out.add(HEAD_DIM)
    return frozenset(out)


def _read_config(path: Path) -> dict | None:
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None  # read when the spec was built; gone now: nothing to check against
    return cfg if isinstance(cfg, dict) else None


def model_architecture(spec: ModelSpec) -> ModelArch | None:
    """`spec`'s architecture: from the config.json it was read from (a path or the HF cache),
    from its catalog entry (CATALOG_ARCHITECTURES: a catalog name, HF id or alias), or assumed
    with the catalog entry its repo name points to; None where none of these is at hand."""
    source = spec.source or ""
    if ASSUMED_FROM_NAME in source:
        row = CATALOG_ARCHITECTURES.get(spec.name)
        if row is None:
            return None
        return ModelArch((row[0],), _features(spec, row[1]),
                         f"catalog entry {spec.name}, assumed from the repo name", assumed=True)
    if source.startswith("catalog"):
        row = CATALOG_ARCHITECTURES.get(spec.name)
        if row is None:
            return None
        return ModelArch((row[0],), _features(spec, row[1]), f"catalog entry {spec.name}")
    path = Path(source)
    if not source or not path.is_file():
        return None
    cfg = _read_config(path)
    archs = cfg.get("architectures") if cfg else None
    if not isinstance(archs, list) or not archs:
        return None
    return ModelArch(tuple(str(a) for a in archs), _features(spec, _rope_type(cfg)),
                     f"its config.json {path}")


def floors_for(arch: ModelArch) -> list[ArchFloor]:
    """The rows of VLLM_ARCH_FLOORS that apply to `arch`."""
    return [f for f in VLLM_ARCH_FLOORS if f.architecture in arch.architectures
            and (not f.feature or f.feature in arch.features)]


def release_refusal(spec: ModelSpec, engine_version: str | None,
                    arch: ModelArch | None = None) -> str | None:
    """Why vLLM `engine_version` cannot run `spec` (the newest floor it is below), or None
    (it can, the release is the newest, or tuner knows no floor for the model). `arch`:
    model_architecture(spec), where the caller has it."""
    if parse_version(engine_version) is None:
        return None
    arch = arch or model_architecture(spec)
    if arch is None:
        return None
    need = [f for f in floors_for(arch) if release_key(engine_version) < release_key(f.since)]
    if not need:
        return None
    f = max(need, key=lambda r: release_key(r.since))
    what = f.architecture + (f" with {f.feature}" if f.feature else "")
    return (f"--engine-version {engine_version}: vLLM {engine_version} cannot run "
            f"{spec.checkpoint or spec.name}, a {f.model} model ({what}; architecture from "
            f"{arch.known_from}): vLLM runs it from {f.since} (source: {f.source}). Give "
            f"--engine-version {f.since} or later, or leave it out (the newest).")


#: vLLM keeps chunked local attention (Llama-4) under the hybrid KV cache manager, freeing
#: the blocks before a chunk, from this release on: 0.13.0's vllm/envs.py defaults
#: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE to "0" (vllm/config turns the manager off,
#: so every layer keeps every token), 0.14.0's to "1" (the PyPI wheels)
CHUNKED_KV_FREED_SINCE = "0.14.0"


def _chunk_tokens(spec: ModelSpec) -> int:
    """attention_chunk_size of the config.json `spec` was read from (its text decoder's), 0
    where it has none or the file is not at hand."""
    path = Path(spec.source or "")
    cfg = _read_config(path) if spec.source and path.is_file() else None
    for c in (cfg or {}, (cfg or {}).get("text_config") or {}):
        chunk = c.get("attention_chunk_size") if isinstance(c, dict) else None
        if isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0:
            return chunk
    return 0


def chunked_kv_warning(spec: ModelSpec, engine_version: str | None) -> str | None:
    """A warning line where `engine_version` keeps every token on a chunked-attention layer
    that tuner prices as a window of the chunk (tuner.core.catalog._chunked_layers), else
    None."""
    if parse_version(engine_version) is None or not spec.num_window_layers:
        return None
    if release_key(engine_version) >= release_key(CHUNKED_KV_FREED_SINCE):
        return None
    chunk = _chunk_tokens(spec)
    if not chunk:
        return None
    return (f"--engine-version {engine_version}: vLLM before {CHUNKED_KV_FREED_SINCE} keeps "
            f"every token's KV on {spec.checkpoint or spec.name}'s chunked-attention layers "
            "(it turns the hybrid KV cache manager off for them unless "
            "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1); tuner prices them as "
            f"{chunk:,}-token windows, as {CHUNKED_KV_FREED_SINCE} and later keep them, so the "
            f"KV of requests longer than {chunk:,} tokens is understated for this release.")


def check_engine_runs(spec: ModelSpec, engine_version: str | None) -> str | None:
    """Refuse (TunerError) an `engine_version` that cannot run `spec`'s architecture; where
    the architecture is only assumed from the repo's name, return the reason as a warning line
    for the caller to print instead (the name may mislead); a warning line too where the
    release keeps more KV than tuner prices (chunked_kv_warning); None where the release runs
    it as priced."""
    if parse_version(engine_version) is None:
        return None  # the newest release runs every architecture tuner knows
    arch = model_architecture(spec)  # read once (a config.json path is read from disk)
    why = release_refusal(spec, engine_version, arch)
    if why is None:
        return chunked_kv_warning(spec, engine_version)
    if arch is not None and arch.assumed:
        return (f"{why} (Its config.json was not read: pass it, or go online, to check the "
                "model's own architecture.)")
    raise TunerError(why)


__all__ = ["CATALOG_ARCHITECTURES", "CHUNKED_KV_FREED_SINCE", "HEAD_DIM", "ROPE_LLAMA3",
           "VLLM_ARCH_FLOORS", "ArchFloor", "ModelArch", "check_engine_runs",
           "chunked_kv_warning", "floors_for", "model_architecture", "release_key",
           "release_refusal"]
