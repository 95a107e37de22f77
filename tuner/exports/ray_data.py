"""A Ray Data LLM batch job (``ray.data.llm``) for a plan: a Python script that needs no tuner.

It reads the workload JSONL (OpenAI Batch API lines, or ``{"prompt", "max_tokens"}`` lines) with
``ray.data.read_json``, runs it through a processor built from
``vLLMEngineProcessorConfig(model_source=..., engine_kwargs={...}, concurrency=<replicas>,
batch_size=...)`` (``build_processor``, named ``build_llm_processor`` before Ray 2.5x) and
writes ``{"custom_id", "generated_text"}`` JSON files. Ray places the plan's DP replicas (each
``tensor_parallel_size`` GPUs) on whatever machines the cluster has.

``engine_kwargs`` are the plan's vLLM engine arguments (:func:`tuner.exports.vllm.
vllm_engine_args`) without ``model`` (``model_source``) and ``data_parallel_size`` (Ray's
``concurrency``). ``batch_size`` is the plan's ``max_num_seqs``: with Ray's default of several
batches in flight per replica, the engine's queue never runs dry, as in the simulated offline job.
"""

from __future__ import annotations

import ast

from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.exports import common
from tuner.exports.vllm import vllm_engine_args

_SCRIPT = '''
import sys

import ray
from ray.data.llm import vLLMEngineProcessorConfig

try:
    from ray.data.llm import build_processor
except ImportError:  # Ray before build_processor: the same builder under its old name
    from ray.data.llm import build_llm_processor as build_processor

INPUT = sys.argv[1] if len(sys.argv) > 1 else {input_path!r}
OUTPUT = sys.argv[2] if len(sys.argv) > 2 else {output_dir!r}  # a folder of JSON files
MODEL = {model!r}
REPLICAS = {replicas!r}  # data-parallel vLLM engines, {tp} GPU(s) each
BATCH_SIZE = {batch_size!r}
ENGINE_KWARGS = {engine_kwargs}


def preprocess(row):
    """One workload line -> chat messages and its own sampling parameters."""
    body = row.get("body") if isinstance(row.get("body"), dict) else row
    messages = body.get("messages") or [{{"role": "user", "content": body.get("prompt") or ""}}]
    sampling = {{"temperature": float(body.get("temperature") or 0.0)}}
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    if max_tokens:
        sampling["max_tokens"] = int(max_tokens)
    return {{"custom_id": row.get("custom_id"), "messages": messages,
            "sampling_params": sampling}}


def postprocess(row):
    return {{"custom_id": row.get("custom_id"), "generated_text": row["generated_text"]}}


def main():
    ray.init()
    config = vLLMEngineProcessorConfig(model_source=MODEL, engine_kwargs=ENGINE_KWARGS,
                                       concurrency=REPLICAS, batch_size=BATCH_SIZE)
    processor = build_processor(config, preprocess=preprocess, postprocess=postprocess)
    ds = processor(ray.data.read_json(INPUT, lines=True))
    ds.write_json(OUTPUT)
    print(f"wrote {{OUTPUT}}")


if __name__ == "__main__":
    main()
'''


def ray_job(dep: common.Deployment) -> tuple[str, dict, list[str]]:
    """(model_source, engine_kwargs, notes) of the plan."""
    args, notes = vllm_engine_args(dep.config, dep.model, dep.gpu,
                                   max_model_len=dep.max_model_len,
                                   kv_capacity_tokens=dep.kv_capacity_tokens,
                                   quantized_model=dep.quantized_model,
                                   num_scheduler_steps=dep.num_scheduler_steps)
    model = args.pop("model")
    args.pop("data_parallel_size", None)  # Ray's concurrency runs the replicas
    notes += common.notes_for(dep, {"moe_dp": common.MOE_SEPARATE_ENGINES_NOTE})
    return model, args, notes


def to_ray_data_script(dep: common.Deployment, opts: common.RenderOptions) -> str:
    c = dep.config
    model, kwargs, notes = ray_job(dep)
    out_dir = opts.output_path[:-len(".jsonl")] if opts.output_path.endswith(".jsonl") \
        else opts.output_path + ".out"
    title = ["#!/usr/bin/env python3",
             f"# Ray Data LLM batch job written by tuner: {c.dp} vLLM replica(s) x {c.tp} "
             f"{c.gpu} GPU(s) each.",
             dep.machines_line().replace("# Needs ", "# Needs a Ray cluster of "),
             "# Needs: pip install 'ray[data,llm]' vllm.   Run: python THIS_FILE [INPUT.jsonl "
             "[OUTPUT_DIR]]"]
    head = common.export_head(title, opts.header, notes, c)
    body = _SCRIPT.format(input_path=opts.input_path, output_dir=out_dir, model=model,
                          replicas=c.dp, tp=c.tp, batch_size=c.max_running,
                          engine_kwargs="{\n" + "".join(f"    {k!r}: {v!r},\n"
                                                         for k, v in kwargs.items()) + "}")
    text = "\n".join(head) + "\n" + body
    try:
        compile(text, "ray_data_job.py", "exec")
    except SyntaxError as exc:  # the template and the values are ours: a bug, said plainly
        raise TunerError(f"The Ray Data script tuner wrote does not compile ({exc}).") from None
    return text


def _assigned(text: str, name: str):
    """The literal value assigned to ``name`` at the script's top level."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise TunerError(f"Ray Data script is not valid Python ({exc.msg}, line "
                         f"{exc.lineno}).") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                break
    raise TunerError(f"Ray Data script has no literal {name} = ... assignment.")


def from_ray_data_script(text: str, *, gpu: str | None = None) -> ServingConfig:
    """The ServingConfig of a script written by :func:`to_ray_data_script`: its
    ``# tuner-config:`` line, with ENGINE_KWARGS' 1:1 options and REPLICAS over it (a hand edit
    wins)."""
    kwargs = _assigned(text, "ENGINE_KWARGS")
    options = {str(k).replace("_", "-"): v for k, v in kwargs.items()}
    base, had_line = common.parsed_fields(text, options, "vllm")
    if not had_line:
        raise TunerError(f"Ray Data script has no '{common.CONFIG_COMMENT_PREFIX}' line.")
    base["dp"] = int(_assigned(text, "REPLICAS"))
    return common.finish_config(base, gpu, "Ray Data script")


def engine_argv(text: str) -> list[list[str]]:
    """The script's vLLM engine arguments (MODEL and ENGINE_KWARGS) as one argv."""
    return [common.engine_tokens({"model": _assigned(text, "MODEL"),
                                  **_assigned(text, "ENGINE_KWARGS")})]


def render(dep: common.Deployment, opts: common.RenderOptions) -> str:
    """The export registry's entry (tuner.exports.formats)."""
    return to_ray_data_script(dep, opts)


__all__ = ["engine_argv", "from_ray_data_script", "ray_job", "render", "to_ray_data_script"]
