"""Data-parallel, resumable batch job: the plan's DP replicas, each on its own share of the job,
each result written as it completes, so a killed job (a spot machine reclaimed) reruns only
its unfinished requests.

The export is a bash script that needs no tuner, only vLLM and python3. It writes the helper
:mod:`tuner.exports.batch_helper` (stdlib only) into ``WORK/tuner_batch.py`` and with it

1. splits the input JSONL into ``part-K.jsonl`` (K = 0 .. DP-1), balanced by estimated tokens:
   each request, longest first, goes to the share with the fewest so far, as the simulator
   splits the job; deterministic, so every machine (and every rerun) computes the same split.
   Every line needs its own ``custom_id``: that is what a rerun skips by;
2. per replica: when ``out-K.jsonl`` already answers every request of its share, nothing runs
   (no engine is started); else the replica's engine starts (``vllm serve`` with the plan's
   engine arguments, on TP GPUs, port PORT+K) and the helper streams the share's *unanswered*
   requests through it, ``2 x max_num_seqs`` in flight so the running batch stays full,
   appending each result to ``out-K.jsonl`` as it completes, in vLLM run-batch's output form.
   A line a kill cut short is dropped when the file is read again, so that request is redone:
   a kill loses only the requests in flight (priced by tuner.search.spot);
3. merges ``out-*.jsonl`` into the output file in the input's order, every ``custom_id``
   exactly once (one missing: exit 1, rerun to finish it).

``vllm run-batch`` itself writes its output file only when the whole input is done, so a kill
would lose the share; the OpenAI-compatible server takes the same engine arguments and answers
each request on its own.

Where it runs (tuner.core.pricing.place: TP inside a machine, the replicas over whole
machines): on one machine ``bash job.sh`` runs every replica at once (replica K on GPUs K*TP ..)
and merges; on several, ``MACHINE=J bash job.sh`` on machine J runs that machine's replicas,
and ``MERGE=1 bash job.sh`` merges once every machine's ``out-*.jsonl`` is gathered into one
WORK; ``REPLICA=K bash job.sh`` runs replica K alone (its first TP GPUs, or ``GPUS=...``).
After an interruption rerun the same command with the same WORK folder (keep it on a disk that
outlives the machine: a mounted bucket or a persistent volume).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.units import plural
from tuner.exports import common
from tuner.exports.vllm import is_v0, v0_server_flags, vllm_cli_options, vllm_engine_args

#: Requests in flight per replica per running slot (max_num_seqs): the engine's waiting queue
#: never runs dry (vLLM admits from it as slots free), so the running batch is the simulated one.
IN_FLIGHT_PER_SLOT = 2


def helper_source() -> str:
    """The source of :mod:`tuner.exports.batch_helper`, which the script writes and runs."""
    return Path(__file__).with_name("batch_helper.py").read_text(encoding="utf-8")


def to_run_batch_script(dep: common.Deployment, opts: common.RenderOptions) -> str:
    c = dep.config
    args, notes = vllm_engine_args(c, dep.model, dep.gpu, max_model_len=dep.max_model_len,
                                   kv_capacity_tokens=dep.kv_capacity_tokens,
                                   quantized_model=dep.quantized_model,
                                   num_scheduler_steps=dep.num_scheduler_steps,
                                   engine_version=dep.engine_version)
    args.pop("data_parallel_size", None)  # the replicas are separate engines
    v0_server_flags(args, dep.num_scheduler_steps, dep.disable_log_requests, dep.engine_version)
    notes += common.notes_for(dep, {"moe_dp": common.moe_separate_engines_note})
    # `vllm serve MODEL`: the positional form every vLLM with `vllm serve` takes (0.5 on);
    # vLLM 0.9+ warns that `--model` will be removed from `vllm serve`
    served = model = args.pop("model")  # the model name the requests are sent with
    options = []
    if opts.served_model_name and opts.served_model_name != served:
        options.append(("served-model-name", opts.served_model_name))
        served = opts.served_model_name
    options += vllm_cli_options(args, v0=is_v0(dep.engine_version, dep.num_scheduler_steps))
    m = dep.machines
    per = m.replicas_per_machine
    title = [
        "#!/usr/bin/env bash",
        f"# Data-parallel, resumable batch job written by tuner: {plural(c.dp, 'replica')} x "
        f"{plural(c.tp, c.gpu + ' GPU')} each ({plural(c.num_gpus, 'GPU')}), each a vLLM "
        "engine (vllm serve).",
        dep.machines_line(separate=True),
        "# Input: OpenAI Batch API JSONL (custom_id, method, url, body), one request a line, "
        "each custom_id once.",
        ("# One machine:  bash THIS_FILE   (every replica at once, outputs merged)"
         if m.count == 1 else
         f"# On machine K (K = 0 .. {m.count - 1}):  MACHINE=K bash THIS_FILE   (its "
         f"{plural(per, 'replica')} at once, on its GPUs 0..; every machine splits the input "
         "the same way),"
         " then gather WORK/out-*.jsonl from every machine into one WORK and run MERGE=1 "
         "bash THIS_FILE."),
        "# One replica alone:  REPLICA=K bash THIS_FILE  (its first "
        f"{plural(c.tp, 'GPU')}, or GPUS=...).",
        "# Resumable: each result is written as it completes; after an interruption rerun the "
        "same command and only unanswered requests are sent (a kill loses those in flight). "
        "Keep WORK on a disk that outlives the machine.",
    ]
    head = common.export_head(title, opts.header, notes, c)
    # replica K runs on machine K // per, on that machine's GPUs (K % per) * TP ..
    gpus = [",".join(str((k % per) * c.tp + i) for i in range(c.tp)) for k in range(c.dp)]
    by_machine = dep.replicas_by_machine
    serve = common.write_command([], f'"$VLLM" serve {shlex.quote(str(model))}',
                                 options).rstrip("\n")
    serve += ' \\\n  --host 127.0.0.1 \\\n  --port "$port"'
    serve = "\n".join("  " + line for line in serve.split("\n"))
    helper = helper_source()
    if "\nHELPER\n" in helper:  # the heredoc's end marker: the helper is ours, a bug
        raise TunerError("The batch helper holds a line 'HELPER'; rename the heredoc marker.")
    launch = "; ".join  # one machine's replicas, each in the background

    def start(ks: list[int]) -> str:
        return launch(f'(replica {k} "{gpus[k]}") & pids+=($!)' for k in ks)

    body = [
        "set -euo pipefail",
        f"INPUT=${{INPUT:-{shlex.quote(opts.input_path)}}}",
        f"OUTPUT=${{OUTPUT:-{shlex.quote(opts.output_path)}}}",
        f"WORK=${{WORK:-{shlex.quote(str(Path(opts.output_path).with_suffix('')) + '.parts')}}}",
        f"DP={c.dp}",
        "PORT=${PORT:-8100}  # replica K's engine listens on 127.0.0.1:PORT+K",
        "VLLM=${VLLM:-vllm}",
        f"IN_FLIGHT=${{IN_FLIGHT:-{max(1, IN_FLIGHT_PER_SLOT * c.max_running)}}}  # requests "
        f"in flight per replica ({IN_FLIGHT_PER_SLOT} x max_num_seqs)",
        'mkdir -p "$WORK"',
        'HELPER="$WORK/tuner_batch.py"',
        "cat > \"$HELPER\" <<'HELPER'",
        helper.rstrip("\n"),
        "HELPER",
        'if [ -n "${MERGE:-}" ]; then',
        '  exec python3 "$HELPER" merge "$INPUT" "$OUTPUT" "$WORK" "$DP"',
        "fi",
        "# 1. split the job into DP shares balanced by tokens (deterministic: the same on every "
        "machine and every rerun)",
        'python3 "$HELPER" split "$INPUT" "$DP" "$WORK"',
        "# 2. one replica: replica K GPU_LIST -- its engine, and its unanswered requests "
        "through it (none left: no engine)",
        "replica() {",
        '  if python3 "$HELPER" todo "$WORK/part-$1.jsonl" "$WORK/out-$1.jsonl"; then '
        "return 0; fi",
        "  local port=$((PORT + $1))",
        '  CUDA_VISIBLE_DEVICES="$2" \\',
        serve + ' > "$WORK/serve-$1.log" 2>&1 &',
        "  local server=$!",
        '  trap "kill $server 2>/dev/null || true" EXIT',
        '  python3 "$HELPER" run "$WORK/part-$1.jsonl" "$WORK/out-$1.jsonl" '
        f'"http://127.0.0.1:$port" {shlex.quote(str(served))} "$IN_FLIGHT" "$server" '
        '"$WORK/sent-$1.log"',
        '  kill "$server" 2>/dev/null || true',
        '  wait "$server" 2>/dev/null || true',
        "}",
        'if [ -n "${REPLICA:-}" ]; then',
        f'  replica "$REPLICA" "${{GPUS:-{gpus[0]}}}"',
        "  exit 0",
        "fi",
        "# 3. this machine's replicas, all at once",
        "pids=()",
        'case "${MACHINE:-}" in',
        *[f"  {j}) {start(ks)} ;;" for j, ks in enumerate(by_machine)],
        *(['  "") echo "this plan needs ' + str(m.count) + ' machines: run MACHINE=K bash $0 on '
           'machine K (K = 0 .. ' + str(m.count - 1) + ')" >&2; exit 2 ;;']
          if m.count > 1 else [f'  "") {start(by_machine[0])} ;;']),
        f'  *) echo "MACHINE must be 0 .. {m.count - 1}" >&2; exit 2 ;;',
        "esac",
        "failed=0",
        'for p in "${pids[@]}"; do wait "$p" || failed=1; done',
        'if [ "$failed" != 0 ]; then echo "a replica stopped early: rerun the same command to '
        'finish (answered requests are kept)" >&2; exit 1; fi',
        *(["# 4. merge the replicas' results: each custom_id exactly once, in the input's order",
           'python3 "$HELPER" merge "$INPUT" "$OUTPUT" "$WORK" "$DP"'] if m.count == 1 else
          ['echo "machine $MACHINE done: gather $WORK/out-*.jsonl from all ' + str(m.count)
           + ' machines into one WORK, then run MERGE=1 bash $0"']),
    ]
    return "\n".join([*head, *body]) + "\n"


def from_run_batch_script(text: str, *, gpu: str | None = None) -> ServingConfig:
    """The ServingConfig of a script written by :func:`to_run_batch_script` (its
    ``# tuner-config:`` line; ``--max-num-seqs`` and the other 1:1 options override it)."""
    what = "data-parallel run-batch script"
    opts = _engine_options(text, what)
    base, had_line = common.parsed_fields(text, _dashed(opts), "vllm")
    if not had_line:
        raise TunerError(f"{what} has no '{common.CONFIG_COMMENT_PREFIX}' line.")
    return common.finish_config(base, gpu, what)


def _engine_command(text: str) -> tuple[str, str]:
    """(the script's engine command, its continued lines joined; its subcommand): the
    replicas' ``vllm serve``, or ``vllm run-batch`` in scripts of earlier tuner versions."""
    lines, marker = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not marker:
            words = stripped.replace('"', " ").split()[:2]
            if words in (["$VLLM", "serve"], ["vllm", "serve"], ["vllm", "run-batch"]):
                marker = words[1]
        if marker:
            if not stripped.endswith("\\"):  # its last line: no output redirection, no &
                lines.append(re.sub(r"\s+(>|2>|&).*$", "", stripped))
                break
            lines.append(stripped)
    if not lines:
        raise TunerError("data-parallel run-batch script has no 'vllm serve' command.")
    return "\n".join(lines), marker


#: the command's options that are the job's plumbing, not engine arguments
_PLUMBING = ("i", "o", "input-file", "output-file", "served-model-name", "host", "port",
             "disable-log-requests")  # the last: the API server's, not an engine argument


def _engine_options(text: str, what: str) -> dict:
    command, marker = _engine_command(text)
    # `vllm serve MODEL` (scripts of earlier tuner versions: `vllm serve --model MODEL`)
    return common.read_command(command, marker, what,
                               positional="model" if marker == "serve" else None)


def _dashed(opts: dict) -> dict:
    return {str(k).replace("_", "-"): v for k, v in opts.items()}


def engine_argv(text: str) -> list[list[str]]:
    """The engine arguments of the script's engine command (its plumbing dropped)."""
    opts = _engine_options(text, "data-parallel run-batch script")
    for key in _PLUMBING:
        opts.pop(key, None)
    return [common.engine_tokens(opts)]


def render(dep: common.Deployment, opts: common.RenderOptions) -> str:
    """The export registry's entry (tuner.exports.formats)."""
    return to_run_batch_script(dep, opts)
