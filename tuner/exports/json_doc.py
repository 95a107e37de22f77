"""JSON export: every figure of one result, the config, and both engines' arguments."""

from __future__ import annotations

import json
from typing import Any

from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.io import jsonable
from tuner.exports.common import Deployment, RenderOptions, finish_config
from tuner.exports.sglang import machine_shares, sglang_server_args
from tuner.exports.vllm import vllm_engine_args


def to_json(
    config: ServingConfig,
    metrics: dict | None,
    memory: dict | None,
    extra: dict | None = None,
) -> str:
    """One result as JSON: the config (with num_gpus), every metric and the memory plan."""
    doc: dict[str, Any] = {
        "config": config.to_dict(),
        "num_gpus": config.num_gpus,
        "metrics": metrics,
        "memory": memory,
    }
    for key, value in (extra or {}).items():
        doc[key] = value
    return json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n"


def from_json(text: str, *, gpu: str | None = None) -> ServingConfig:
    """The ServingConfig of a document written by :func:`to_json`."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TunerError(f"Export is not valid JSON ({exc}).") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise TunerError("JSON export has no 'config' object.")
    return finish_config(dict(doc["config"]), gpu, "JSON export")


def render_document(dep: Deployment, opts: RenderOptions) -> str:
    """The export registry's entry (tuner.exports.formats): :func:`to_json` with the model, the
    GPU and the vLLM and SGLang arguments (and their notes) added."""
    model, gpu = dep.model, dep.gpu
    kw = {"max_model_len": dep.max_model_len, "kv_capacity_tokens": dep.kv_capacity_tokens,
          "quantized_model": dep.quantized_model}
    sopts, snotes = sglang_server_args(dep.config, model, gpu, **kw,
                                       engine_version=dep.engine_version)
    # an SGLang-simulated plan has no vLLM arguments (its knobs are SGLang's)
    vllm_doc = None
    if dep.config.engine == "vllm":
        vargs, vnotes = vllm_engine_args(dep.config, model, gpu, **kw,
                                         engine_version=dep.engine_version)
        vllm_doc = {"engine_args": vargs, "notes": vnotes}
    doc = {
        "model": {"name": model.name, "hf_id": model.hf_id, "checkpoint": dep.checkpoint},
        "gpu": {"name": gpu.name, "price_usd_per_h": gpu.price_usd_per_h,
                "memory_gib": gpu.memory_gib},
        "max_model_len": dep.max_model_len,
        "machines": dep.machines.to_dict(),  # how many of which machine the plan needs
        **(opts.extra or {}),
        "engine": dep.config.engine,
        "vllm": vllm_doc,
        "sglang": {"server_args": dict(sopts), "notes": snotes},
    }
    shares = machine_shares(dep)
    if shares is not None:  # SGLang's --dp-size runs one machine's replicas: the .sh's form
        sizes = [len(ks) for ks in shares]
        doc["sglang"]["per_machine_dp_size"] = sizes
        doc["sglang"]["notes"] = [*snotes, (
            f"server_args hold the whole plan (dp-size {dep.config.dp}); SGLang runs one "
            f"server per machine, each with --dp-size its replicas ({sizes}, "
            "per_machine_dp_size): the sglang export writes that server")]
    if opts.header:
        doc["summary"] = opts.header
    return to_json(dep.config, opts.metrics, opts.memory, doc)
