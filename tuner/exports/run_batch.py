"""Data-parallel ``vllm run-batch``: the plan's DP replicas, each on its own share of the job.

The export is a bash script that needs no tuner: it splits the input JSONL into
``part-K.jsonl`` (K = 0 .. DP-1) with a few lines of Python (balanced by estimated tokens: each
request, longest first, goes to the share with the fewest so far, as the simulator splits the
job; the split is deterministic, so every machine computes the same one), then runs

    vllm run-batch -i part-K.jsonl -o out-K.jsonl --model ... <engine args>

per replica, each on TP GPUs:

- the plan's machines (tuner.core.pricing.place: TP inside a machine, the replicas spread over
  whole machines of the GPU's shape or the provider's instance): on one machine ``bash job.sh``
  starts every replica at once (replica K on GPUs K*TP .. K*TP+TP-1) and concatenates
  ``out-K.jsonl`` into the output file; on several, ``MACHINE=J bash job.sh`` on machine J
  runs that machine's replicas (each machine computes the same split), and the ``out-K.jsonl``
  files are gathered afterwards;
- ``REPLICA=K bash job.sh`` runs replica K alone (on its first TP GPUs, or ``GPUS=...``).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.exports import common
from tuner.exports.vllm import vllm_cli_options, vllm_engine_args

#: The split, as the script runs it (python3 - INPUT DP WORKDIR). A request's work is its prompt
#: (characters / 4) plus its max_tokens: the tokens it puts through the engine.
SPLIT_PY = r'''import json, sys
src, dp, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = [ln for ln in open(src, encoding="utf-8") if ln.strip()]
def tokens(line):
    obj = json.loads(line)
    body = obj.get("body") if isinstance(obj.get("body"), dict) else obj
    text = body.get("prompt") or json.dumps(body.get("messages") or "")
    return len(str(text)) // 4 + int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
load, owner = [0] * dp, [0] * len(lines)
for i in sorted(range(len(lines)), key=lambda i: -tokens(lines[i])):
    k = min(range(dp), key=load.__getitem__)
    owner[i], load[k] = k, load[k] + tokens(lines[i])
for k in range(dp):
    with open(f"{work}/part-{k}.jsonl", "w", encoding="utf-8") as out:
        out.writelines(ln if ln.endswith("\n") else ln + "\n"
                       for ln, o in zip(lines, owner) if o == k)
print(f"split {len(lines)} requests of {src} into {dp} parts in {work}/ (tokens per part: {load})")
'''


def to_run_batch_script(dep: common.Deployment, opts: common.RenderOptions) -> str:
    c = dep.config
    args, notes = vllm_engine_args(c, dep.model, dep.gpu, max_model_len=dep.max_model_len,
                                   kv_capacity_tokens=dep.kv_capacity_tokens,
                                   quantized_model=dep.quantized_model,
                                   num_scheduler_steps=dep.num_scheduler_steps)
    args.pop("data_parallel_size", None)  # the replicas are separate run-batch processes
    notes += common.notes_for(dep, {"moe_dp": common.MOE_SEPARATE_ENGINES_NOTE})
    options = [("model", args.pop("model"))]
    if opts.served_model_name and opts.served_model_name != options[0][1]:
        options.append(("served-model-name", opts.served_model_name))
    options += vllm_cli_options(args)
    m = dep.machines
    per = m.replicas_per_machine
    title = [
        "#!/usr/bin/env bash",
        f"# Data-parallel vllm run-batch written by tuner: {c.dp} replica(s) x {c.tp} "
        f"{c.gpu} GPU(s) each ({c.num_gpus} GPUs).",
        dep.machines_line(),
        "# Input: OpenAI Batch API JSONL (custom_id, method, url, body), one request a line.",
        ("# One machine:  bash THIS_FILE   (every replica at once, outputs merged)"
         if m.count == 1 else
         f"# On machine K (K = 0 .. {m.count - 1}):  MACHINE=K bash THIS_FILE   (its {per} "
         "replica(s) at once, on its GPUs 0..; every machine splits the input the same way),"
         " then gather WORK/out-*.jsonl from every machine and cat them."),
        "# One replica alone:  REPLICA=K bash THIS_FILE  (its first "
        f"{c.tp} GPU(s), or GPUS=...).",
        "# Results carry each request's custom_id; replicas finish in any order.",
    ]
    head = common.export_head(title, opts.header, notes, c)
    # replica K runs on machine K // per, on that machine's GPUs (K % per) * TP ..
    gpus = [",".join(str((k % per) * c.tp + i) for i in range(c.tp)) for k in range(c.dp)]
    by_machine = [list(range(j * per, min(j * per + per, c.dp))) for j in range(m.count)]
    run = common.write_command(
        [], 'vllm run-batch -i "$WORK/part-$1.jsonl" -o "$WORK/out-$1.jsonl"', options)
    run = "\n".join("  " + line for line in run.rstrip("\n").split("\n"))
    body = [
        "set -euo pipefail",
        f"INPUT=${{INPUT:-{shlex.quote(opts.input_path)}}}",
        f"OUTPUT=${{OUTPUT:-{shlex.quote(opts.output_path)}}}",
        f"WORK=${{WORK:-{shlex.quote(str(Path(opts.output_path).with_suffix('')) + '.parts')}}}",
        f"DP={c.dp}",
        'mkdir -p "$WORK"',
        "# 1. split the job into DP shares balanced by tokens (deterministic: same on every "
        "machine)",
        "python3 - \"$INPUT\" \"$DP\" \"$WORK\" <<'SPLIT'",
        SPLIT_PY.rstrip("\n"),
        "SPLIT",
        "# 2. one replica: replica K GPU_LIST",
        "replica() {",
        '  CUDA_VISIBLE_DEVICES="$2" \\',
        run,
        "}",
        'if [ -n "${REPLICA:-}" ]; then',
        f'  replica "$REPLICA" "${{GPUS:-{gpus[0]}}}"',
        "  exit 0",
        "fi",
        "# 3. this machine's replicas, all at once",
        "pids=()",
        'case "${MACHINE:-}" in',
        *[f"  {j}) " + "; ".join(f'replica {k} "{gpus[k]}" & pids+=($!)' for k in ks) + " ;;"
          for j, ks in enumerate(by_machine)],
        *(['  "") echo "this plan needs ' + str(m.count) + ' machines: run MACHINE=K bash $0 on '
           'machine K (K = 0 .. ' + str(m.count - 1) + ')" >&2; exit 2 ;;']
          if m.count > 1 else
          ['  "") ' + "; ".join(f'replica {k} "{gpus[k]}" & pids+=($!)' for k in by_machine[0])
           + " ;;"]),
        f'  *) echo "MACHINE must be 0 .. {m.count - 1}" >&2; exit 2 ;;',
        "esac",
        'for p in "${pids[@]}"; do wait "$p"; done',
        *(["# 4. merge the replicas' results",
           "cat " + " ".join(f'"$WORK/out-{k}.jsonl"' for k in range(c.dp)) + ' > "$OUTPUT"',
           'echo "wrote $OUTPUT"'] if m.count == 1 else
          ['echo "machine $MACHINE done: gather $WORK/out-*.jsonl from all ' + str(m.count)
           + ' machines into $OUTPUT"']),
    ]
    return "\n".join([*head, *body]) + "\n"


def from_run_batch_script(text: str, *, gpu: str | None = None) -> ServingConfig:
    """The ServingConfig of a script written by :func:`to_run_batch_script` (its
    ``# tuner-config:`` line; ``--max-num-seqs`` and the other 1:1 options override it)."""
    what = "data-parallel run-batch script"
    opts = common.read_command(_run_batch_command(text), "run-batch", what)
    base, had_line = common.parsed_fields(text, _dashed(opts), "vllm")
    if not had_line:
        raise TunerError(f"{what} has no '{common.CONFIG_COMMENT_PREFIX}' line.")
    return common.finish_config(base, gpu, what)


def _run_batch_command(text: str) -> str:
    """The ``vllm run-batch`` command of the script (its continued lines), alone."""
    lines, inside = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("vllm run-batch"):
            inside = True
        if inside:
            lines.append(stripped)
            if not stripped.endswith("\\"):
                break
    if not lines:
        raise TunerError("data-parallel run-batch script has no 'vllm run-batch' command.")
    return "\n".join(lines)


def _dashed(opts: dict) -> dict:
    return {str(k).replace("_", "-"): v for k, v in opts.items()}


def engine_argv(text: str) -> list[list[str]]:
    """The engine arguments of the script's run-batch command (files dropped)."""
    opts = common.read_command(_run_batch_command(text), "run-batch",
                               "data-parallel run-batch script")
    for short in ("i", "o", "input-file", "output-file", "served-model-name"):
        opts.pop(short, None)
    return [common.engine_tokens(opts)]


def render(dep: common.Deployment, opts: common.RenderOptions) -> str:
    """The export registry's entry (tuner.exports.formats)."""
    return to_run_batch_script(dep, opts)
