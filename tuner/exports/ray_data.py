"""A Ray Data LLM batch job (``ray.data.llm``) for a plan: a Python script that needs no tuner.

It reads the workload JSONL (OpenAI Batch API lines, or ``{"prompt", "max_tokens"}`` lines) with
``ray.data.read_json``, runs it through a processor built from
``vLLMEngineProcessorConfig(model_source=..., engine_kwargs={...}, concurrency=<replicas>,
batch_size=...)`` (``build_processor``, named ``build_llm_processor`` before Ray 2.5x) and
writes ``{"custom_id", "generated_text"}`` JSON files. Ray places the plan's DP replicas (each
``tensor_parallel_size`` GPUs) on whatever machines the cluster has.

Resumable (issue #27 item 5, spot machines): Ray Data's streaming execution writes each block of
results to the output folder as it completes, so a killed job keeps what it wrote; rerun the
same command and only the requests without a result run again (the input filtered by the keys
already answered, fetched once per task from the object store). A request's key is its
``custom_id``, or for a plain line without one a digest of what it asks; two requests with the
same key are refused. When every request has a result, the folder is merged into one JSONL,
each request once, in the input's order (missing ones: exit 1, rerun). A kill loses the blocks
in flight (about ``batch_size`` requests per engine).

``engine_kwargs`` are the plan's vLLM engine arguments (:func:`tuner.exports.vllm.
vllm_engine_args`) without ``model`` (``model_source``) and ``data_parallel_size`` (Ray's
``concurrency``). ``batch_size`` is the plan's ``max_num_seqs``: with Ray's default of several
batches in flight per replica, the engine's queue never runs dry, as in the simulated offline job.
"""

from __future__ import annotations

import ast

from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.units import plural
from tuner.exports import common
from tuner.exports.vllm import vllm_engine_args

_SCRIPT = '''
import hashlib
import json
import os
import sys

import ray
from ray.data.llm import vLLMEngineProcessorConfig

try:
    from ray.data.llm import build_processor
except ImportError:  # Ray before build_processor: the same builder under its old name
    from ray.data.llm import build_llm_processor as build_processor

INPUT = sys.argv[1] if len(sys.argv) > 1 else {input_path!r}
# a folder of JSON files, each written as its block of results completes (resumable)
OUTPUT = sys.argv[2] if len(sys.argv) > 2 else {output_dir!r}
# when the job is done: every request's result once, in the input's order
MERGED = sys.argv[3] if len(sys.argv) > 3 else {merged_path!r}
MODEL = {model!r}
REPLICAS = {replicas!r}  # data-parallel vLLM engines, {tp} GPU(s) each
BATCH_SIZE = {batch_size!r}
ENGINE_KWARGS = {engine_kwargs}


def _plain(x):
    """A value as JSON would hold it: Ray's rows carry numpy arrays for lists and None for the
    fields other rows have."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, dict):
        return {{k: _plain(v) for k, v in x.items() if v is not None}}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def request_key(row):
    """What a rerun skips a request by: its custom_id, or for a line without one a digest of
    what it asks (prompt or messages, and max_tokens)."""
    if row.get("custom_id"):
        return str(row["custom_id"])
    body = row.get("body") if isinstance(row.get("body"), dict) else row
    asked = _plain({{"prompt": body.get("prompt"), "messages": body.get("messages"),
                     "max_tokens": body.get("max_tokens") or body.get("max_completion_tokens")}})
    return "sha1-" + hashlib.sha1(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:24]


def preprocess(row):
    """One workload line -> chat messages and its own sampling parameters."""
    body = row.get("body") if isinstance(row.get("body"), dict) else row
    messages = body.get("messages") or [{{"role": "user", "content": body.get("prompt") or ""}}]
    sampling = {{"temperature": float(body.get("temperature") or 0.0)}}
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    if max_tokens:
        sampling["max_tokens"] = int(max_tokens)
    return {{"custom_id": request_key(row), "messages": messages,
            "sampling_params": sampling}}


def postprocess(row):
    return {{"custom_id": row.get("custom_id"), "generated_text": row["generated_text"]}}


# ---- files: local paths, or any URI pyarrow reads (s3://, gs://, ...) ----------------------
def _fs(path):
    if "://" not in path:
        return None, os.path.abspath(path)
    from pyarrow import fs

    return fs.FileSystem.from_uri(path)


def _read_lines(path):
    fs, p = _fs(path)
    if fs is None:
        with open(p, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines(keepends=True)
    with fs.open_input_stream(p) as f:
        return f.read().decode("utf-8", "replace").splitlines(keepends=True)


def _listing(folder):
    fs, p = _fs(folder)
    if fs is None:
        names = sorted(os.listdir(p)) if os.path.isdir(p) else []
        return [os.path.join(folder, n) for n in names if not n.startswith((".", "_"))]
    from pyarrow import fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(p, allow_not_found=True))
    scheme = folder.split("://")[0] + "://"
    return sorted(scheme + i.path for i in infos if i.is_file
                  and not i.base_name.startswith((".", "_")))


def _write(path, lines):
    fs, p = _fs(path)
    if fs is None:
        with open(p + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(lines)
        os.replace(p + ".tmp", p)
        return
    with fs.open_output_stream(p) as f:
        f.write("".join(lines).encode("utf-8"))


def answered(folder):
    """{{request key: result line}} of every complete result line in the output folder (a file
    a kill cut short keeps its complete lines; the rest is asked again)."""
    got = {{}}
    for path in _listing(folder):
        for line in _read_lines(path):
            try:
                rec = json.loads(line) if line.endswith("\\n") else None
            except ValueError:
                rec = None
            if isinstance(rec, dict) and rec.get("custom_id"):
                got.setdefault(str(rec["custom_id"]), line)
    return got


def input_keys(path):
    keys, seen = [], set()
    for n, line in enumerate(_read_lines(path), 1):
        if not line.strip():
            continue
        try:
            key = request_key(json.loads(line))
        except ValueError as exc:
            sys.exit(f"{{path}}:{{n}}: not JSON ({{exc}})")
        if key in seen:
            sys.exit(f"{{path}}:{{n}}: request {{key!r}} appears twice; give each its own "
                     "custom_id (a rerun skips answered requests by it)")
        seen.add(key)
        keys.append(key)
    return keys


def unanswered(done_ref):
    """A row filter: the requests whose key is not in the set behind `done_ref` (fetched once
    per task from Ray's object store)."""
    cache = {{}}

    def keep(row):
        if "done" not in cache:
            cache["done"] = ray.get(done_ref)
        return request_key(row) not in cache["done"]

    return keep


def main():
    keys = input_keys(INPUT)
    done = answered(OUTPUT)
    left = sum(1 for k in keys if k not in done)
    print(f"{{len(keys) - left}} of {{len(keys)}} requests answered in {{OUTPUT}}; "
          f"running {{left}}")
    if left:
        ray.init()
        config = vLLMEngineProcessorConfig(model_source=MODEL, engine_kwargs=ENGINE_KWARGS,
                                           concurrency=REPLICAS, batch_size=BATCH_SIZE)
        processor = build_processor(config, preprocess=preprocess, postprocess=postprocess)
        ds = ray.data.read_json(INPUT, lines=True)
        if done:  # a rerun: only the requests without a result
            ds = ds.filter(unanswered(ray.put(frozenset(done))))
        processor(ds).write_json(OUTPUT)
        done = answered(OUTPUT)
    missing = [k for k in keys if k not in done]
    if missing:
        sys.exit(f"{{len(missing)}} of {{len(keys)}} requests have no result (e.g. "
                 f"{{missing[0]!r}}): rerun to finish them")
    _write(MERGED, [done[k] for k in keys])
    print(f"wrote {{MERGED}}: {{len(keys)}} results, each request once")


if __name__ == "__main__":
    main()
'''


def ray_job(dep: common.Deployment) -> tuple[str, dict, list[str]]:
    """(model_source, engine_kwargs, notes) of the plan."""
    args, notes = vllm_engine_args(dep.config, dep.model, dep.gpu,
                                   max_model_len=dep.max_model_len,
                                   kv_capacity_tokens=dep.kv_capacity_tokens,
                                   quantized_model=dep.quantized_model,
                                   num_scheduler_steps=dep.num_scheduler_steps,
                                   engine_version=dep.engine_version)
    model = args.pop("model")
    args.pop("data_parallel_size", None)  # Ray's concurrency runs the replicas
    notes += common.notes_for(dep, {"moe_dp": common.moe_separate_engines_note})
    return model, args, notes


def _vllm_requirement(engine_version: str | None) -> str:
    """`vllm==X.Y.Z` for a plan searched for release X.Y.Z (the newest: plain `vllm`)."""
    from tuner.core.engines import dotted, parse_version

    version = parse_version(engine_version)
    return "vllm" if version is None else f"vllm=={dotted(version)}"


def to_ray_data_script(dep: common.Deployment, opts: common.RenderOptions) -> str:
    c = dep.config
    model, kwargs, notes = ray_job(dep)
    out_dir = opts.output_path[:-len(".jsonl")] if opts.output_path.endswith(".jsonl") \
        else opts.output_path + ".out"
    merged = opts.output_path
    title = ["#!/usr/bin/env python3",
             f"# Ray Data LLM batch job written by tuner: {plural(c.dp, 'vLLM replica')} x "
             f"{plural(c.tp, c.gpu + ' GPU')} each.",
             dep.machines_line(separate=True).replace("# Needs ", "# Needs a Ray cluster of "),
             # the release the plan was priced for (its engine arguments are that release's)
             f"# Needs: pip install 'ray[data,llm]' {_vllm_requirement(dep.engine_version)}.   "
             "Run: python THIS_FILE [INPUT.jsonl [OUTPUT_DIR [MERGED.jsonl]]]",
             "# Resumable: results are written block by block as they complete; after an "
             "interruption rerun the same command and only unanswered requests run."]
    head = common.export_head(title, opts.header, notes, c)
    body = _SCRIPT.format(input_path=opts.input_path, output_dir=out_dir, merged_path=merged,
                          model=model,
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
