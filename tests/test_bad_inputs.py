"""Bad inputs to every user-facing command, as one table (issue #17).

Each row is a command line run through the real entry point, `tuner.cli.main.main()` and its
error handling, in a folder of its own with a 40-column stderr (in this interpreter: ~140 rows
cannot each pay an interpreter start; rows that need a resource limit or environment variables
run in a fresh `python -m tuner.cli`), and must end with:

* the documented exit code (2 for a user error),
* one `error: ...` line on stderr naming the problem (``needle``), no traceback, nothing on
  stdout,
* nothing left behind: no file in the folder it ran in is new, changed or gone (a new empty
  folder is tolerated: it blocks no rerun).

Every row starts with ``w.jsonl``: 20 lines of ``{"prompt": "hello there", "max_tokens": 16}``;
a row's setup writes what else it needs. Rows that read a finished search copy one study, made
once per module (a 4-trial search of that workload), into ``out/``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
W_LINE = json.dumps({"prompt": "hello there", "max_tokens": 16}) + "\n"
W = W_LINE * 20
LLAMA = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}
SEARCH = "search -w w.jsonl -m llama-3-8b --gpus A10 --n-trials 4 --out out"
SIM = "simulate -w w.jsonl -m llama-3-8b -g A10"
STUDY = "w-llama-3-8b"  # the study name `tuner search -w w.jsonl -m llama-3-8b` gives


def run_tuner(argv: list[str], cwd: Path, fsize: int | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m tuner.cli ARGV` in `cwd`, a fresh interpreter on a 40-column terminal with
    `env` added; `fsize`: the largest file the process may write (RLIMIT_FSIZE with SIGXFSZ
    ignored: a write beyond it fails with EFBIG as on a full disk, without root or a tmpfs)."""
    env = dict(os.environ, COLUMNS="40", **(env or {}))
    env.pop("FORCE_COLOR", None)

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, "-m", "tuner.cli", *argv], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env,
                          preexec_fn=limit if fsize else None)


def main_in_process(argv: list[str], cwd: Path) -> int:
    """The exit code of `tuner.cli.main.main()` (the real entry point and its error handling)
    run in this interpreter in `cwd`. An exception escaping main() is what a user would see
    as a traceback."""
    from tuner.cli.app import err
    from tuner.cli.main import main

    old_argv, old_cwd, old_width = sys.argv, Path.cwd(), err.width
    sys.argv = ["tuner", *argv]
    err.width = 40  # a narrow terminal: a long error must still be one line
    os.chdir(cwd)
    try:
        main()
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException as exc:  # noqa: BLE001 - escaping main(): a traceback for a user
        import traceback

        sys.stderr.write("Traceback (escaped main()):\n" + "".join(
            traceback.format_exception(exc)))
        return 1
    finally:
        sys.argv = old_argv
        err.width = old_width
        os.chdir(old_cwd)
    return 0


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative path -> sha256 of its bytes)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- setups: what a row needs besides w.jsonl ---------------------------------------------------
@dataclass
class Ctx:
    tmp: Path
    request: pytest.FixtureRequest

    def study_dir(self) -> Path:
        return self.request.getfixturevalue("study_out")


Setup = Callable[[Ctx], None]


def files(**content: str | bytes | dict | list) -> Setup:
    """Write files (names with '__' for '/', '_DOT_' for '.'); dicts and lists as JSON."""
    def setup(ctx: Ctx) -> None:
        for name, value in content.items():
            path = ctx.tmp / name.replace("__", "/").replace("_DOT_", ".")
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(value, bytes):
                path.write_bytes(value)
            else:
                path.write_text(value if isinstance(value, str) else json.dumps(value))
    return setup


def hf(config) -> Setup:
    """A model folder `m/` holding this config.json."""
    return files(m__config_DOT_json=config)


def with_study(ctx: Ctx) -> None:
    """out/: a finished 4-trial search of w.jsonl (study.journal, report, exports)."""
    shutil.copytree(ctx.study_dir(), ctx.tmp / "out")


def with_vllm_config(ctx: Ctx) -> None:
    """cfg.vllm.yaml: a vLLM plan's exported engine config (whatever engine the study's
    winners run), and w.jsonl."""
    from tuner.core.catalog import get_model, load_gpus
    from tuner.core.config import ServingConfig
    from tuner.exports.vllm import to_vllm_yaml

    (ctx.tmp / "cfg.vllm.yaml").write_text(to_vllm_yaml(
        ServingConfig(gpu="A10"), get_model("llama-3-8b"), load_gpus()["A10"],
        max_model_len=4096))


def searched_then_changed(ctx: Ctx) -> None:
    """out/: a search of this folder's w.jsonl, after which w.jsonl grew one request."""
    assert main_in_process(shlex.split(SEARCH), ctx.tmp) == 0
    with (ctx.tmp / "w.jsonl").open("a") as fh:
        fh.write(json.dumps({"prompt": "hello there " * 50, "max_tokens": 16}) + "\n")


def both(*setups: Setup) -> Setup:
    def setup(ctx: Ctx) -> None:
        for s in setups:
            s(ctx)
    return setup


# ---- the table ----------------------------------------------------------------------------------
@dataclass
class Row:
    id: str
    argv: str  # shlex-split; {tmp} is the row's folder (absolute), where the command runs
    setup: Setup | None
    needle: str | tuple[str, ...]
    code: int = 2
    late: bool = False  # fails after the search started: progress lines before the error line
    fsize: int | None = None
    env: dict[str, str] | None = None  # run in a process of its own with these variables
    marks: tuple = field(default_factory=tuple)


def xfail(area: str) -> tuple:
    return (pytest.mark.xfail(strict=True, reason=f"being reworked: {area}"),)


ROOT = os.geteuid() == 0
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_VLLM = (importlib.util.find_spec("vllm") is not None or (REPO / ".venv-vllm").exists()
            or bool(os.environ.get("TUNER_VLLM_PYTHON")))
SPACE = "space.yaml"
GPUS = "gpus.yaml"
OPENAI = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                     "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 16}}) + "\n"

ROWS = [
    # --- prices and seeds
    Row("price-zero", "gpus --price A10=0", None, "'A10=0'"),
    Row("price-nan", f"{SIM} --price A10=nan", None, "'A10=nan'"),
    Row("price-inf", f"{SEARCH} --gpus A10,A40 --price A40=inf", None, "'A40=inf'"),
    Row("price-no-equals", "gpus --price A10", None, ("--price", "'A10'")),
    Row("price-unknown-gpu", "gpus --price A4O=1", None, ("Unknown GPU 'A4O'", "A40")),
    Row("seed-negative", f"{SEARCH} --seed -1", None, ("--seed", "-1")),
    Row("seed-too-big", f"{SEARCH} --seed {2**32}", None, "--seed"),
    # --- the model: HF config.json files, catalog names, fit
    Row("hf-heads-zero", f"{SIM.replace('llama-3-8b', 'm')}",
        hf(LLAMA | {"num_attention_heads": 0}), "num_attention_heads must be a positive integer"),
    Row("hf-hidden-size-string", f"{SEARCH.replace('llama-3-8b', 'm')}",
        hf(LLAMA | {"hidden_size": "big"}), "hidden_size must be a positive integer, got 'big'"),
    Row("hf-top-level-array", "simulate -w w.jsonl -m m/config.json -g A10", hf([1, 2]),
        "JSON object, got list"),
    Row("hf-layers-negative", f"{SEARCH.replace('llama-3-8b', 'm')}",
        hf(LLAMA | {"num_hidden_layers": -4}), "num_hidden_layers must be a positive integer, got -4"),
    Row("hf-not-json", f"{SIM.replace('llama-3-8b', 'm')}", files(m__config_DOT_json="{oops"),
        ("m/config.json", "line 1")),
    Row("hf-folder-without-config", f"{SIM.replace('llama-3-8b', 'm')}",
        files(m__README="no config here"), ("m/config.json", "No such file")),
    Row("model-unknown", "search -w w.jsonl -m llama3-8b --gpus A10 --n-trials 4 --out out",
        None, ("Unknown model 'llama3-8b'", "Did you mean", "llama-3-8b")),
    Row("model-unknown-stats", "workload stats w.jsonl -m lama-3-8b", None,
        ("Unknown model 'lama-3-8b'", "llama-3-8b")),
    Row("model-hf-id-offline", "simulate -w w.jsonl -m nosuchorg/nosuch-8b -g A10", None,
        ("nosuchorg/nosuch-8b", "config.json"), env={"HF_HUB_OFFLINE": "1"}),
    Row("model-hf-id-hub-unreachable", "simulate -w w.jsonl -m nosuchorg/nosuch-8b -g A10", None,
        ("nosuchorg/nosuch-8b", "cannot reach"), env={"HF_ENDPOINT": "http://127.0.0.1:9"}),
    Row("model-does-not-fit", "simulate -w w.jsonl -m llama-2-70b -g A10", None,
        ("llama-2-70b", "A10", "GiB", "does not fit")),
    Row("model-fits-nowhere-search", "search -w w.jsonl -m llama-2-70b --gpus A10 --space "
        f"{SPACE} --n-trials 4 --out out",
        files(space_DOT_yaml="knobs:\n  chunk_size: [512, 2048]\n  weight_bits: [16]\n"),
        ("llama-2-70b", "A10", "GiB")),
    Row("tp-does-not-split-heads", "simulate -w w.jsonl -m qwen2.5-7b -g A40 --tp 8", None,
        ("tensor parallel 8", "28 attention heads")),
    Row("tp-not-a-degree", f"{SIM} --tp 3", None, "tp must be one of 1, 2, 4, 8, got 3"),
    # --- GPUs and the GPU file
    Row("gpu-unknown", f"{SEARCH} --gpus A10,A4O", None, ("Unknown GPU 'A4O'", "Did you mean",
                                                           "A40")),
    Row("gpu-unknown-cost", "cost -m llama-3-8b -g A1O --tokens 10", None, ("'A1O'", "A10")),
    Row("gpus-empty-list", f"{SEARCH} --gpus ,", None, "--gpus needs at least one GPU"),
    Row("gpu-file-missing", f"{SIM} --gpu-file {GPUS}", None, ("gpus.yaml", "does not exist")),
    Row("gpu-file-bad-yaml", f"gpus --gpu-file {GPUS}",
        files(gpus_DOT_yaml="A10: {price_usd_per_h: [1\n"), ("gpus.yaml", "not valid YAML")),
    Row("gpu-file-top-level-list", f"{SIM} --gpu-file {GPUS}", files(gpus_DOT_yaml="- A10\n"),
        ("gpus.yaml", "mapping")),
    Row("gpu-file-gpu-not-a-mapping", f"{SIM} --gpu-file {GPUS}",
        files(gpus_DOT_yaml="A10: 5\n"), ("gpus.yaml", "A10", "mapping")),
    Row("gpu-file-bad-field", f"{SIM} --gpu-file {GPUS}",
        files(gpus_DOT_yaml="A10:\n  memory_gib: big\n"), ("A10", "memory_gib", "'big'")),
    Row("gpu-file-unknown-field", f"{SIM} --gpu-file {GPUS}",
        files(gpus_DOT_yaml="A10:\n  bogus: 1\n"), ("gpus.yaml", "bogus")),
    Row("gpu-file-zero-price", f"{SIM} --gpu-file {GPUS}",
        files(gpus_DOT_yaml="A10:\n  price_usd_per_h: 0\n"), ("A10", "price_usd_per_h")),
    # --- the workload file
    Row("workload-missing", "workload stats nope.jsonl", None, ("nope.jsonl", "no such file")),
    Row("workload-missing-search", SEARCH.replace("w.jsonl", "nope.jsonl"), None,
        ("nope.jsonl", "no such file")),
    Row("workload-empty", f"{SIM.replace('w.jsonl', 'e.jsonl')}", files(e_DOT_jsonl=""),
        ("e.jsonl", "no requests")),
    Row("workload-blank-lines-only", SEARCH.replace("w.jsonl", "e.jsonl"),
        files(e_DOT_jsonl="\n\n  \n"), ("e.jsonl", "no requests")),
    Row("workload-bad-json-line", SEARCH.replace("w.jsonl", "b.jsonl"),
        files(b_DOT_jsonl=W_LINE * 5 + '{"prompt": "x", "max_tokens"\n' + W_LINE),
        ("b.jsonl:6", "invalid JSON")),
    Row("workload-line-not-an-object", "workload stats b.jsonl",
        files(b_DOT_jsonl=W_LINE * 2 + "[1, 2]\n"), "b.jsonl:3"),
    Row("workload-negative-max-tokens", f"{SIM.replace('w.jsonl', 'b.jsonl')}",
        files(b_DOT_jsonl=W_LINE + json.dumps({"prompt": "x", "max_tokens": -5}) + "\n"),
        ("b.jsonl:2", "max_tokens")),
    Row("workload-max-tokens-string", "workload stats b.jsonl",
        files(b_DOT_jsonl=W_LINE + json.dumps({"prompt": "x", "max_tokens": "many"}) + "\n"),
        ("b.jsonl:2", "max_tokens")),
    Row("workload-not-utf8", SIM.replace("w.jsonl", "l.jsonl"),
        files(l_DOT_jsonl=b'{"prompt": "caf\xe9", "max_tokens": 16}\n'), ("l.jsonl", "UTF-8")),
    Row("workload-csv-missing-columns", "workload stats t.csv", files(t_DOT_csv="a,b\n1,2\n"),
        ("t.csv", "num_prefill_tokens", "num_decode_tokens")),
    Row("workload-csv-bad-number", SEARCH.replace("w.jsonl", "t.csv"),
        files(t_DOT_csv="num_prefill_tokens,num_decode_tokens\n100,20\nabc,20\n"), "t.csv"),
    Row("workload-is-a-directory", "workload stats .", None, "is a directory"),
    Row("workload-duplicate-custom-id", "workload stats b.jsonl", files(b_DOT_jsonl=OPENAI * 3),
        ("b.jsonl:2", "duplicate custom_id 'a'")),
    Row("workload-duplicate-custom-id-search", SEARCH.replace("w.jsonl", "b.jsonl"),
        files(b_DOT_jsonl=OPENAI * 2), ("b.jsonl:2", "duplicate custom_id")),
    Row("prompt-beyond-context-search", SEARCH.replace("w.jsonl", "long.jsonl"),
        files(long_DOT_jsonl=W * 1 + json.dumps({"prompt": "hello there " * 8000,
                                                 "max_tokens": 16}) + "\n"),
        ("1 of 21 requests", "8,192", "request 21")),
    Row("prompt-beyond-context-simulate", SIM.replace("w.jsonl", "long.jsonl"),
        files(long_DOT_jsonl=json.dumps({"prompt": "hello there " * 8000, "max_tokens": 16})),
        ("llama-3-8b", "context")),
    Row("on-too-long-unknown", f"{SIM} --on-too-long bogus", None, "--on-too-long"),
    Row("output-dist-bad", f"{SIM} --output-dist bogus", None, "--output-dist 'bogus'"),
    Row("output-dist-emoji-like", "workload stats w.jsonl --output-dist lognormal:-1:0", None,
        "'lognormal:-1:0'"),
    # --- search options
    Row("n-trials-zero", f"{SEARCH} --n-trials 0", None, "--n-trials"),
    Row("n-trials-negative", f"{SEARCH} --n-trials -3", None, "--n-trials"),
    Row("n-trials-not-a-number", f"{SEARCH} --n-trials abc", None, ("--n-trials", "--help")),
    Row("timeout-negative", f"{SEARCH} --timeout -1", None, "--timeout"),
    Row("workers-zero", f"{SEARCH} --workers 0", None, "--workers must be >= 1"),
    Row("sample-fraction-above-one", f"{SEARCH} --sample-fraction 2", None, "--sample-fraction"),
    Row("sampler-unknown", f"{SEARCH} --sampler bogus", None, ("sampler", "bogus")),
    Row("profile-mode-unknown-search", f"{SEARCH} --profile-mode foo", None,
        "Unknown profile mode 'foo'"),
    Row("profile-mode-unknown-simulate", f"{SIM} --profile-mode foo", None,
        "Unknown profile mode 'foo'"),
    Row("profile-mode-unknown-cost", "cost -m llama-3-8b -g A10 --tokens 5 --profile-mode foo",
        None, "Unknown profile mode 'foo'"),
    Row("engine-version-not-a-version", f"{SIM} --engine-version abc", None,
        "--engine-version 'abc'"),
    Row("entry-point-unknown", f"{SIM} --entry-point bogus", None, ("--entry-point", "'bogus'")),
    Row("deadline-not-a-duration", f"{SEARCH} --deadline abc", None, ("--deadline", "'abc'")),
    Row("deadline-negative", f"{SEARCH} --deadline -5", None, "--deadline"),
    Row("budget-negative", f"{SEARCH} --budget -1", None, "--budget"),
    Row("budget-nan", f"{SEARCH} --budget nan", None, "--budget"),
    Row("max-gpus-zero", f"{SEARCH} --max-gpus 0", None, "--max-gpus"),
    Row("max-gpus-bad-entry", f"{SEARCH} --max-gpus A10=x", None, ("--max-gpus", "A10=x")),
    Row("provider-unknown", "gpus --provider bogus", None, ("provider 'bogus'", "aws")),
    Row("provider-unknown-search", f"{SEARCH} --provider bogus", None, "provider 'bogus'"),
    Row("spot-without-provider", "gpus --spot", None, ("--spot", "--provider")),
    Row("profile-folder-missing", f"{SIM} --profile nodir", None, ("nodir", "does not exist")),
    Row("unknown-option", f"{SIM} --bogus", None, ("--bogus", "--help")),
    Row("unknown-command", "bogus", None, ("bogus", "--help")),
    Row("models-unknown-option", "models --bogus", None, ("--bogus", "--help")),
    Row("missing-required-option", "search --gpus A10", None, ("--workload", "--help")),
    # --- search spaces
    Row("space-yaml-syntax", f"{SEARCH} --space {SPACE}",
        files(space_DOT_yaml="knobs: {chunk_size: [512\n"), ("space.yaml", "not valid YAML")),
    Row("space-unknown-knob", f"{SEARCH} --space {SPACE}",
        files(space_DOT_yaml="knobs:\n  chunk_size: [512]\n  bogus_knob: [1]\n"),
        ("space.yaml", "'bogus_knob' is not a knob")),
    Row("space-unknown-section", f"{SEARCH} --space {SPACE}",
        files(space_DOT_yaml="knobs:\n  chunk_size: [512]\nfixd:\n  tp: 1\n"),
        ("space.yaml", "fixd")),
    Row("space-empty-list", f"{SEARCH} --space {SPACE}",
        files(space_DOT_yaml="knobs:\n  chunk_size: []\n"), ("space.yaml", "non-empty list")),
    Row("space-scalar-not-list", f"{SEARCH} --space {SPACE}",
        files(space_DOT_yaml="knobs:\n  chunk_size: 512\n"), ("space.yaml", "chunk_size")),
    Row("space-wrong-value-type", f"{SEARCH} --space {SPACE}",
        files(space_DOT_yaml="knobs:\n  chunk_size: [abc]\n"), ("space.yaml", "'abc'")),
    Row("space-top-level-list", f"{SEARCH} --space {SPACE}", files(space_DOT_yaml="- 1\n"),
        ("space.yaml", "mapping")),
    Row("space-bad-fixed-value", f"{SEARCH} --space {SPACE}",
        files(space_DOT_yaml="knobs:\n  chunk_size: [512]\nfixed:\n  tp: 3\n"),
        ("space.yaml", "tp must be one of")),
    Row("space-empty-file", f"{SEARCH} --space {SPACE}", files(space_DOT_yaml="# nothing\n"),
        ("space.yaml", "empty")),
    Row("space-missing", f"{SEARCH} --space nosuch", None, ("nosuch", "does not exist",
                                                            "default")),
    # --- simulate knobs
    Row("max-num-seqs-zero", f"{SIM} --max-num-seqs 0", None, "max_running must be >= 1"),
    Row("gpu-memory-utilization-above-one", f"{SIM} --gpu-memory-utilization 1.5", None,
        "gpu_memory_utilization"),
    Row("scheduler-unknown", f"{SIM} --scheduler bogus", None, ("scheduler", "'bogus'")),
    Row("weight-bits-3", f"{SIM} --weight-bits 3", None, "weight_bits must be one of"),
    Row("weight-offload-above-one", f"{SIM} --weight-offload-fraction 2", None,
        "weight_offload_fraction"),
    Row("cost-negative-tokens", "cost -m llama-3-8b -g A10 --tokens -5", None, "--tokens"),
    # --- replay (a real run's file)
    Row("replay-missing-file", "replay nosuch.json -m llama-3-8b -g A10", None,
        ("nosuch.json", "no such file")),
    Row("replay-not-a-bench-result", "replay r.json -m llama-3-8b -g A10",
        files(r_DOT_json='{"hello": 1}'), "not a `vllm bench serve"),
    Row("replay-v1-multistep", "replay r.json -m llama-3-8b -g A10 --num-scheduler-steps 8",
        files(r_DOT_json='{"duration": 2, "input_lens": [10], "output_lens": [5]}'),
        "needs a V0 engine"),
    Row("replay-engine-too-old", "replay r.json -m llama-3-8b -g A10 --engine-version 0.4.1",
        files(r_DOT_json='{"duration": 2, "input_lens": [10], "output_lens": [5]}'), "0.5.0"),
    Row("cost-empty-iteration", "cost -m llama-3-8b -g A10", None, "--tokens"),
    # --- where the outputs go
    Row("out-is-a-file", f"{SEARCH.replace('--out out', '--out afile')}",
        files(afile="keep me"), ("afile", "is a file")),
    Row("out-under-a-file", f"{SEARCH.replace('--out out', '--out afile/sub')}",
        files(afile="keep me"), "afile/sub"),
    Row("out-read-only", f"{SEARCH.replace('--out out', '--out ro/sub')}",
        lambda ctx: (ctx.tmp / "ro").mkdir(mode=0o500), "ro/sub",
        marks=(pytest.mark.skipif(ROOT, reason="root writes into read-only folders"),)),
    Row("timeline-under-a-file", f"{SIM} --timeline afile/t.csv", files(afile="keep me"),
        ("timeline", "afile")),
    Row("disk-full-during-search-outputs", SEARCH, None, ("File too large", "report.html"),
        late=True, fsize=300_000, marks=xfail(
            "a failed search leaving its study (tuner/search/loop.py, storage.py): after the "
            "outputs fail to write, out/study.journal (feasible trials) stays and a plain rerun "
            "is refused ('already exists ... --resume')")),
    # --- storages and studies
    Row("storage-unsupported-scheme", f"{SEARCH} --storage mongodb://db/x", None,
        ("Cannot open storage mongodb://db/x", "mongodb")),
    Row("storage-not-a-url", f"{SEARCH} --storage notaurl", None, "Cannot open storage notaurl"),
    Row("storage-sqlite-missing-folder", f"{SEARCH} --storage sqlite:///{{tmp}}/nodir/s.db",
        None, ("Cannot open storage", "nodir/s.db")),
    Row("results-no-study", "results --out empty", None, ("No study database", "empty")),
    Row("report-no-study", "report", None, ("No study database", "tuner-out")),
    Row("export-no-study", "export --out empty", None, ("No study database", "empty")),
    Row("results-sqlite-without-study", "results --storage sqlite:///{tmp}/none.db", None,
        "0 studies"),
    Row("export-unknown-study", "export --out out --study nope", with_study,
        ("No study 'nope'", STUDY)),
    Row("export-format-unknown", "export --out out --format unknown", with_study,
        ("--format 'unknown'", "vllm-run-batch")),
    Row("export-goal-unknown", "export --out out --goal bogus", with_study, "--goal 'bogus'"),
    Row("export-rank-zero", "export --out out --rank 0", with_study, "--rank must be >= 1"),
    Row("export-rank-beyond", "export --out out --rank 999", with_study, ("--rank 999",
                                                                        "feasible")),
    Row("export-storage-and-out", "export --out out --storage x", with_study,
        "either --storage URL or --out DIR"),
    Row("export-max-model-len-zero", "export --out out --max-model-len 0", with_study,
        "--max-model-len"),
    Row("export-output-under-a-file", "export --out out --output afile/x.yaml",
        both(with_study, files(afile="keep me")), ("afile", "not a folder")),
    Row("report-output-under-a-file", "report --out out --output afile/r.html",
        both(with_study, files(afile="keep me")), ("afile", "not a folder")),
    Row("report-output-is-a-folder", "report --out out --output out", with_study,
        ("--output out", "folder")),
    Row("results-out-is-a-file", "results --storage journal:///{tmp}/out/study.journal --out "
        "afile", both(with_study, files(afile="keep me")), ("afile", "is a file")),
    Row("export-workload-changed", "export --out out --workload w2.jsonl",
        both(with_study, files(w2_DOT_jsonl=W + W_LINE)), ("w2.jsonl", "does not match")),
    Row("results-workload-changed", "results --out out --workload w2.jsonl",
        both(with_study, files(w2_DOT_jsonl=W + W_LINE)), ("w2.jsonl", "does not match")),
    Row("report-workload-missing", "report --out out --workload nosuch.jsonl", with_study,
        ("nosuch.jsonl", "--workload")),
    Row("export-after-workload-file-changed", f"export --out out --gpu-file {GPUS}",
        both(searched_then_changed, files(gpus_DOT_yaml="A10:\n  price_usd_per_h: 1.0\n")),
        ("w.jsonl", "has changed since the search")),
    Row("search-resume-after-workload-changed", f"{SEARCH} --resume", searched_then_changed,
        ("searched with another workload", "--study NAME")),
    Row("search-again-without-resume", SEARCH, with_study, ("already exists", "--resume")),
    Row("worker-missing-journal", "worker --study x --storage journal:///{tmp}/none.journal",
        None, ("No study journal", "none.journal")),
    Row("worker-unknown-study", "worker --study nope --storage journal:///{tmp}/out/study.journal",
        with_study, ("No study 'nope'", STUDY)),
    Row("worker-timeout-negative",
        f"worker --study {STUDY} --storage journal:///{{tmp}}/out/study.journal --timeout -1",
        with_study, "--timeout"),
    Row("worker-sqlite-without-study", "worker --study x --storage sqlite:///{tmp}/none.db",
        None, "No study 'x'"),
    # --- measuring and real runs, without torch / vLLM installed
    Row("profile-without-torch", "profile --model tiny-llama --out prof", None,
        ("PyTorch is not installed", ".[profile]"),
        marks=(pytest.mark.skipif(HAS_TORCH, reason="torch is installed"),)),
    Row("profile-unknown-device", "profile --model tiny-llama --device tpu --out prof", None,
        "--device must be cuda or cpu"),
    Row("validate-without-vllm", "validate --out out", with_study,
        ("needs vLLM", ".[validate]"),
        marks=(pytest.mark.skipif(HAS_VLLM, reason="vLLM is available"),)),
    Row("validate-config-without-vllm",
        "validate --config cfg.vllm.yaml -w w.jsonl -m llama-3-8b", with_vllm_config,
        "needs vLLM", marks=(pytest.mark.skipif(HAS_VLLM, reason="vLLM is available"),)),
    Row("validate-runner-unknown", "validate --out out --runner bogus", with_study,
        "--runner 'bogus'"),
    Row("validate-top-zero", "validate --out out --top 0", with_study, "--top must be >= 1"),
    Row("calibrate-no-runs", "calibrate --store cal", None, ("No measured runs", "cal")),
    Row("fit-missing-folder", "fit nodir", None, ("nodir", "does not exist")),
    Row("fit-folder-without-profile", "fit .", None, "no profile.csv"),
    Row("transfer-missing-profiles", "transfer a b", None, ("a", "does not exist")),
]


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id, marks=r.marks) for r in ROWS])
def test_bad_input(row: Row, tmp_path: Path, request, capfd) -> None:
    (tmp_path / "w.jsonl").write_text(W)
    if row.setup is not None:
        row.setup(Ctx(tmp_path, request))
    before = snapshot(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in shlex.split(row.argv)]
    if row.fsize or row.env:  # a resource limit or an environment: a process of its own
        r = run_tuner(argv, tmp_path, fsize=row.fsize, env=row.env)
    else:
        capfd.readouterr()  # the setup's output
        code = main_in_process(argv, tmp_path)
        out, err = capfd.readouterr()
        r = subprocess.CompletedProcess(argv, code, out, err)

    assert r.returncode == row.code, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    # one error line; only a failure after the search started has progress lines before it
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr
    assert row.late or len(lines) == 1, r.stderr
    assert r.stdout == "", r.stdout
    for needle in (row.needle,) if isinstance(row.needle, str) else row.needle:
        assert needle in errors[0], (needle, errors[0])
    after = snapshot(tmp_path)
    assert after == before, {"new or changed": sorted(k for k in after if after[k] !=
                                                      before.get(k)),
                             "gone": sorted(set(before) - set(after))}


def test_every_command_has_a_row() -> None:
    """A new command gets its bad inputs in the table too."""
    from typer.main import get_command

    from tuner.cli.main import app

    group = get_command(app)
    commands = {n for n, c in group.commands.items() if not hasattr(c, "commands")}
    commands |= {f"{n} {s}" for n, c in group.commands.items()
                 for s in getattr(c, "commands", {})}
    covered = {" ".join(shlex.split(r.argv)[:2]) if r.argv.startswith("workload")
               else shlex.split(r.argv)[0] for r in ROWS}
    assert commands <= covered, sorted(commands - covered)
