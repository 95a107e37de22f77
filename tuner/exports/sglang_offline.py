"""An SGLang offline batch job (``sglang.Engine``) for a plan: a Python script that needs no tuner.

SGLang's offline engine takes its server arguments as keyword arguments (``sgl.Engine(
model_path=..., tp_size=..., chunked_prefill_size=..., ...)``: the fields of ``ServerArgs``, the
dashed server options with underscores; SGLang docs, "Offline Engine API"), so the keyword
arguments are :func:`tuner.exports.sglang.sglang_server_args`' options, the plan's as the
simulator ran them.

It reads the workload JSONL (OpenAI Batch API lines, or ``{"prompt", "max_tokens"}`` lines),
renders chat messages with the model's chat template, and submits every request at once
(``Engine.async_generate`` per request: the offline job the simulation assumes, all requests
known at t=0, SGLang's scheduler ordering its queue by --schedule-policy). Each result is
appended to the output JSONL as it completes, so a killed job keeps what it wrote; rerun the
same command and only the requests without a result run (a request's key is its ``custom_id``,
or a digest of what it asks). When every request has one, the file is rewritten in the input's
order, each request once.
"""

from __future__ import annotations

import ast

from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.exports import common
from tuner.exports.sglang import machine_shares, sglang_server_args, vllm_plan_notes

_SCRIPT = '''
import asyncio
import hashlib
import json
import os
import sys

INPUT = sys.argv[1] if len(sys.argv) > 1 else {input_path!r}
OUTPUT = sys.argv[2] if len(sys.argv) > 2 else {output_path!r}
ENGINE_KWARGS = {engine_kwargs}
# The plan's DP replicas each machine runs (one list per machine): with several machines each
# runs MACHINE=K on its share of the job, split by tokens as the prediction splits it.
REPLICAS_BY_MACHINE = {replicas_by_machine!r}
# Machines the one engine spans (SGLang's multi-node launch): with more than one, run
# NODE_RANK=K DIST_INIT_ADDR=HEAD_IP:5000 on each machine K; machine 0 runs the job.
ENGINE_NODES = {engine_nodes!r}


def request_key(line):
    """What a rerun skips a request by: its custom_id, or a digest of what it asks."""
    if line.get("custom_id"):
        return str(line["custom_id"])
    body = line.get("body") if isinstance(line.get("body"), dict) else line
    asked = {{"prompt": body.get("prompt"), "messages": body.get("messages"),
              "max_tokens": body.get("max_tokens") or body.get("max_completion_tokens")}}
    return "sha1-" + hashlib.sha1(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:24]


def read_requests(path):
    """[(key, messages or prompt, sampling params)] in the input's order; a key twice: exit 2."""
    out, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            line = json.loads(raw)
            body = line.get("body") if isinstance(line.get("body"), dict) else line
            key = request_key(line)
            if key in seen:
                sys.exit(f"{{path}} line {{number}}: request {{key!r}} appears twice")
            seen.add(key)
            sampling = {{"temperature": float(body.get("temperature") or 0.0)}}
            max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
            if max_tokens:
                sampling["max_new_tokens"] = int(max_tokens)
            asked = body.get("messages") or [{{"role": "user", "content": body.get("prompt") or ""}}]
            out.append((key, asked, sampling))
    return out


def work(request):
    """A request's work for the split: its prompt (characters / 4) plus its max_new_tokens."""
    _, asked, sampling = request
    return len(json.dumps(asked)) // 4 + int(sampling.get("max_new_tokens") or 0)


def owners(requests, replicas):
    """The replica of each request: longest first, each to the replica with the fewest tokens
    so far (as the simulator splits a job); deterministic, the same on every machine."""
    load, owner = [0] * replicas, [0] * len(requests)
    for i in sorted(range(len(requests)), key=lambda i: -work(requests[i])):
        k = min(range(replicas), key=load.__getitem__)
        owner[i], load[k] = k, load[k] + work(requests[i])
    return owner


def machine_output(machine):
    root, ext = os.path.splitext(OUTPUT)
    return f"{{root}}.machine-{{machine}}{{ext or '.jsonl'}}"


def write_in_order(requests, done, path):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for key, _, _ in requests:
            f.write(json.dumps(done[key]) + "\\n")
    os.replace(tmp, path)
    print(f"{{len(requests)}} results in {{path}}")


def merge(requests):
    """Every machine's results into OUTPUT, in the input's order (exit 1 if one is missing)."""
    done = {{}}
    for machine in range(len(REPLICAS_BY_MACHINE)):
        done.update(answered(machine_output(machine)))
    missing = [key for key, _, _ in requests if key not in done]
    if missing:
        sys.exit(f"{{len(missing)}} request(s) have no result (e.g. {{missing[0]!r}}): rerun "
                 "their machine, or gather every machine's output file here")
    write_in_order(requests, done, OUTPUT)


def answered(path):
    """{{key: result line}} already written (a line a kill cut short is dropped)."""
    done = {{}}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for raw in f:
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                done[line["custom_id"]] = line
    return done


async def run(engine, todo, render, out):
    async def one(key, asked, sampling):
        result = await engine.async_generate(prompt=render(asked), sampling_params=sampling)
        out.write(json.dumps({{"custom_id": key, "generated_text": result["text"]}}) + "\\n")
        out.flush()

    await asyncio.gather(*(one(*r) for r in todo))


def main():
    import sglang as sgl
    from transformers import AutoTokenizer

    kwargs = dict(ENGINE_KWARGS)
    if ENGINE_NODES > 1:
        try:
            rank, addr = int(os.environ["NODE_RANK"]), os.environ["DIST_INIT_ADDR"]
        except (KeyError, ValueError):
            sys.exit(f"this engine spans {{ENGINE_NODES}} machines: run NODE_RANK=K "
                     f"DIST_INIT_ADDR=HEAD_IP:5000 python {{sys.argv[0]}} on machine K "
                     f"(K = 0 .. {{ENGINE_NODES - 1}}; HEAD_IP: machine 0's address)")
        kwargs.update(nnodes=ENGINE_NODES, node_rank=rank, dist_init_addr=addr)
        if rank > 0:  # a worker machine: its ranks serve machine 0's engine until it ends
            sgl.Engine(**kwargs)
            return
    requests = read_requests(INPUT)
    output, machines = OUTPUT, len(REPLICAS_BY_MACHINE)
    if machines > 1:
        if os.environ.get("MERGE"):
            return merge(requests)
        machine = os.environ.get("MACHINE", "")
        if machine not in [str(j) for j in range(machines)]:
            sys.exit(f"this plan runs on {{machines}} machines: run MACHINE=K python "
                     f"{{sys.argv[0]}} on machine K (K = 0 .. {{machines - 1}}), gather the "
                     f"output files, then MERGE=1 python {{sys.argv[0]}}")
        mine = REPLICAS_BY_MACHINE[int(machine)]
        owner = owners(requests, sum(len(r) for r in REPLICAS_BY_MACHINE))
        requests = [r for r, o in zip(requests, owner) if o in mine]
        output, kwargs["dp_size"] = machine_output(int(machine)), len(mine)
    done = answered(output)
    todo = [r for r in requests if r[0] not in done]
    if todo:
        tokenizer = AutoTokenizer.from_pretrained(ENGINE_KWARGS["model_path"])

        def render(messages):
            if getattr(tokenizer, "chat_template", None):
                return tokenizer.apply_chat_template(messages, tokenize=False,
                                                     add_generation_prompt=True)
            return "\\n".join(m.get("content") or "" for m in messages)

        engine = sgl.Engine(**kwargs)
        try:
            with open(output, "a", encoding="utf-8") as out:
                asyncio.run(run(engine, todo, render, out))
        finally:
            engine.shutdown()
        done = answered(output)
    missing = [key for key, _, _ in requests if key not in done]
    if missing:
        sys.exit(f"{{len(missing)}} request(s) have no result (e.g. {{missing[0]!r}}); rerun")
    write_in_order(requests, done, output)


if __name__ == "__main__":
    main()
'''


def engine_kwargs(dep: common.Deployment) -> tuple[dict, list[str]]:
    """(sgl.Engine keyword arguments, notes): the plan's server options, underscored."""
    opts, notes = sglang_server_args(dep.config, dep.model, dep.gpu,
                                     max_model_len=dep.max_model_len,
                                     kv_capacity_tokens=dep.kv_capacity_tokens,
                                     quantized_model=dep.quantized_model,
                                     engine_version=dep.engine_version)
    return {name.replace("-", "_"): value for name, value in opts}, notes


def to_sglang_offline_script(dep: common.Deployment, opts: common.RenderOptions) -> str:
    c = dep.config
    kwargs, notes = engine_kwargs(dep)
    shares = machine_shares(dep) or [list(range(c.dp))]
    run = "python THIS_FILE [INPUT.jsonl [OUTPUT.jsonl]]"
    m = dep.machines
    nodes = m.count if dep.one_engine else m.machines_per_replica if c.dp == 1 else 1
    if nodes > 1:
        what = f"one sglang.Engine over {nodes} machines ({c.num_gpus} x {c.gpu})"
        how = [f"# On machine K (K = 0 .. {nodes - 1}):  NODE_RANK=K DIST_INIT_ADDR=HEAD_IP:5000 "
               f"{run}   (HEAD_IP: machine 0's address; machine 0 runs the job and writes "
               "the output)."]
    elif len(shares) > 1:
        what = (f"one sglang.Engine per machine on {len(shares)} machines (TP {c.tp}, "
                f"{len(shares[0])} replica(s) each; {c.num_gpus} x {c.gpu} in all)")
        how = [f"# On machine K (K = 0 .. {len(shares) - 1}):  MACHINE=K {run}   (its share of "
               "the job, split by tokens the same way on every machine, to "
               "OUTPUT.machine-K.jsonl); gather those files on one machine, then MERGE=1 "
               f"{run}."]
    else:
        what = (f"one sglang.Engine on {c.num_gpus} x {c.gpu} (TP {c.tp}"
                + (f", DP {c.dp}" if c.dp > 1 else "") + ")")
        how = [f"# Run: {run}"]
    title = ["#!/usr/bin/env python3",
             f"# SGLang offline batch job written by tuner: {what}.",
             common.Deployment(c, dep.model, dep.gpu, dep.max_model_len).machines_line("sglang"),
             "# Needs: pip install 'sglang[all]'.", *how,
             "# Resumable: each result is appended as it completes; after an interruption rerun "
             "the same command and only unanswered requests run."]
    head = common.export_head(title, opts.header, vllm_plan_notes(c, notes), c)
    kwargs_text = "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in kwargs.items()) + "}"
    body = _SCRIPT.format(input_path=opts.input_path, output_path=opts.output_path,
                          engine_kwargs=kwargs_text, replicas_by_machine=shares,
                          engine_nodes=nodes)
    text = "\n".join(head) + "\n" + body
    try:
        compile(text, "sglang_offline_job.py", "exec")
    except SyntaxError as exc:  # the template and the values are ours: a bug, said plainly
        raise TunerError(f"The SGLang offline script tuner wrote does not compile ({exc}).") \
            from None
    return text


def _engine_kwargs_of(text: str) -> dict:
    """The script's literal ENGINE_KWARGS."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise TunerError(f"SGLang offline script is not valid Python ({exc.msg}, line "
                         f"{exc.lineno}).") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ENGINE_KWARGS"
                                                for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                break
    raise TunerError("SGLang offline script has no literal ENGINE_KWARGS = {...} assignment.")


def from_sglang_offline_script(text: str, *, gpu: str | None = None) -> ServingConfig:
    """The ServingConfig of a script written by :func:`to_sglang_offline_script`: its
    ``# tuner-config:`` line, with ENGINE_KWARGS' 1:1 options over it (a hand edit wins)."""
    options = {str(k).replace("_", "-"): v for k, v in _engine_kwargs_of(text).items()}
    base, had_line = common.parsed_fields(text, options, "sglang")
    if not had_line:
        raise TunerError(f"SGLang offline script has no '{common.CONFIG_COMMENT_PREFIX}' line.")
    chunk = options.get("chunked-prefill-size")
    if isinstance(chunk, int) and chunk > 0:
        base["chunk_size"] = chunk
    return common.finish_config(base, gpu, "SGLang offline script")


def render(dep: common.Deployment, opts: common.RenderOptions) -> str:
    """The export registry's entry (tuner.exports.formats)."""
    return to_sglang_offline_script(dep, opts)


__all__ = ["engine_kwargs", "from_sglang_offline_script", "render", "to_sglang_offline_script"]
