"""Memory and time of the CLI on a 2-million-request job (issue #17).

Generates two synthetic JSONL files in a temporary folder (removed at the end unless --keep):

* ``batch.jsonl``: OpenAI Batch API lines (``custom_id`` + ``body``), mixing chat requests (a
  user message, a third with a system message too) and completion requests (``body.prompt``);
* ``plain.jsonl``: ``{"prompt", "max_tokens"}`` lines, a quarter of them ``{"messages", ...}``.

A file holds one record format (the reader refuses mixed files, as the Batch API does), so the
mix of plain and Batch API lines is two files of `--requests` lines each. Prompt texts are
slices of a random word stream, lognormal in length (median 60 characters, up to 6,000);
``max_tokens`` is lognormal too (median 100, 8 to 1,024), so every request fits llama-3-8b's
context.

Then runs as subprocesses, one at a time, measuring wall time and peak RSS of each
(``resource.getrusage(RUSAGE_CHILDREN)`` after each child, via a fresh helper process so the
maximum is that command's own):

* ``tuner workload stats`` on both files,
* ``tuner simulate`` (llama-3-8b on an A40, default settings) on ``batch.jsonl``,
* ``tuner search --n-trials 3`` (A10, A40) on ``batch.jsonl``,
* ``tuner simulate`` and ``tuner search --n-trials 20`` (A10, A40) on ``tokens.jsonl``
  (2 M lines of token counts, 91 MB: issue #26's job),

and prints a table against the targets of issues #17 and #26. Run::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/big_workload.py

``--requests N`` for a smaller job, ``--keep DIR`` to keep the files (and reuse them next time),
``--source DIR`` to time another checkout's sources (e.g. ``git archive HEAD | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REQUESTS = 2_000_000
SEED = 17
# Targets for 2 M requests: (seconds, MiB of peak RSS); None: report only. Issue #17: workload
# stats, the 3-trial search on Batch API lines; issue #26 (item 11): the token-count file's
# default simulate and 20-trial search.
TARGETS = {"workload stats": (10.0, 300.0), "simulate": (None, None), "search": (None, 1024.0),
           "simulate tokens": (None, 300.0), "search 20 trials": (60.0, 1024.0)}
WORDS = ("the of and to in is that for it as was with be by on not he this are or his from "
         "at which but have an they you were her she there been one all we their has would "
         "when if so no model paper result data method table figure section we propose show "
         "résumé naïve café 数据 模型").split()
_CHUNK_LINES = 100_000


def _text_pool(rng: np.random.Generator, n_chars: int) -> str:
    words = rng.choice(np.array(WORDS, dtype=object), size=n_chars // 4)
    return " ".join(words.tolist())[:n_chars]


def _lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    chars = np.clip(rng.lognormal(np.log(60), 1.0, n), 1, 6000).astype(np.int64)
    max_tokens = np.clip(rng.lognormal(np.log(100), 0.8, n), 8, 1024).astype(np.int64)
    return chars, max_tokens


def generate_tokens(folder: Path, n_requests: int, seed: int = SEED) -> Path:
    """tokens.jsonl: `{"prompt_tokens", "output_tokens"}` lines (91 MB for 2 M), prompts
    lognormal around 300 tokens (4-7,000), outputs around 200 (1-1,000)."""
    rng = np.random.default_rng(seed)
    path = folder / "tokens.jsonl"
    with path.open("w") as fh:
        for start in range(0, n_requests, _CHUNK_LINES):
            n = min(_CHUNK_LINES, n_requests - start)
            p = np.clip(rng.lognormal(np.log(300), 1.0, n), 4, 7000).astype(np.int64)
            o = np.clip(rng.lognormal(np.log(200), 0.9, n), 1, 1000).astype(np.int64)
            fh.writelines(f'{{"prompt_tokens": {a}, "output_tokens": {b}}}\n'
                          for a, b in zip(p.tolist(), o.tolist(), strict=True))
    return path


def generate(folder: Path, n_requests: int, seed: int = SEED) -> tuple[Path, Path]:
    """Write batch.jsonl and plain.jsonl (n_requests lines each) into `folder`."""
    rng = np.random.default_rng(seed)
    pool = _text_pool(rng, 1 << 20)
    dumps = json.dumps
    batch, plain = folder / "batch.jsonl", folder / "plain.jsonl"
    with batch.open("w", encoding="utf-8") as fb, plain.open("w", encoding="utf-8") as fp:
        for start in range(0, n_requests, _CHUNK_LINES):
            n = min(_CHUNK_LINES, n_requests - start)
            for fh, kind in ((fb, "batch"), (fp, "plain")):
                chars, max_tokens = _lengths(rng, n)
                offsets = rng.integers(0, len(pool) - 6001, n)
                style = rng.integers(0, 4, n)
                lines = []
                for i in range(n):
                    text = pool[offsets[i]:offsets[i] + chars[i]]
                    mt = int(max_tokens[i])
                    if kind == "plain":
                        if style[i] == 0:
                            rec = {"messages": [{"role": "user", "content": text}],
                                   "max_tokens": mt}
                        else:
                            rec = {"prompt": text, "max_tokens": mt}
                        lines.append(dumps(rec, ensure_ascii=False))
                        continue
                    cid = f"request-{start + i}"
                    if style[i] == 0:
                        body = {"model": "llama-3-8b", "prompt": text, "max_tokens": mt}
                        url = "/v1/completions"
                    else:
                        msgs = [{"role": "user", "content": text}]
                        if style[i] == 1:
                            msgs.insert(0, {"role": "system",
                                            "content": "You are a helpful assistant."})
                        body = {"model": "llama-3-8b", "messages": msgs, "max_tokens": mt}
                        url = "/v1/chat/completions"
                    lines.append(dumps({"custom_id": cid, "method": "POST", "url": url,
                                        "body": body}, ensure_ascii=False))
                fh.write("\n".join(lines))
                fh.write("\n")
    return batch, plain


# The CLI of another checkout: an editable install's import hook would load the installed
# sources whatever PYTHONPATH says, so it is taken off first.
_RUN_FROM = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in "
             "getattr(f, '__module__', '')]; sys.path.insert(0, {source!r}); "
             "sys.argv = sys.argv[1:]; from tuner.cli.main import main; main()")

_MEASURE = r"""
import resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).returncode
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{rc} {wall:.3f} {ru.ru_utime + ru.ru_stime:.3f} {ru.ru_maxrss}")
"""


def measure(cmd: list[str], env: dict[str, str]) -> tuple[int, float, float, float]:
    """(exit status, wall seconds, CPU seconds, peak RSS MiB) of `cmd`, run from a fresh helper
    process so RUSAGE_CHILDREN's figures are this command's alone. CPU time (user + system)
    is the steadier figure on a shared machine."""
    res = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], env=env, capture_output=True,
                         text=True, check=True)
    rc, wall, cpu, rss_kib = res.stdout.split()
    return int(rc), float(wall), float(cpu), int(rss_kib) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=REQUESTS)
    ap.add_argument("--keep", type=Path, help="folder for the files (kept; reused if present)")
    ap.add_argument("--python", default=sys.executable, help="interpreter running tuner")
    ap.add_argument("--source", help="run the tuner package of another checkout (e.g. an "
                    "unpacked `git archive` of an older commit) instead of the installed one")
    ap.add_argument("--only", help="comma-separated subset: stats,simulate,search")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="big_workload-"))
    folder.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    try:
        batch, plain = folder / "batch.jsonl", folder / "plain.jsonl"
        tokens = folder / "tokens.jsonl"
        marker = folder / f"generated-{args.requests}"
        if not marker.exists():
            t0 = time.perf_counter()
            batch, plain = generate(folder, args.requests)
            generate_tokens(folder, args.requests)
            marker.touch()
        if not (folder / "tokens.jsonl").exists():  # a folder kept by an older version
            generate_tokens(folder, args.requests)
            print(f"generated {args.requests:,} + {args.requests:,} lines in "
                  f"{time.perf_counter() - t0:.1f} s: {batch.stat().st_size / 1e6:.0f} MB, "
                  f"{plain.stat().st_size / 1e6:.0f} MB in {folder}", flush=True)
        tuner = [args.python, "-c", _RUN_FROM.format(source=str(Path(args.source).resolve())),
                 "tuner"] if args.source else [args.python, "-m", "tuner.cli.main"]
        out, out20 = folder / "search-out", folder / "search20-out"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(out20, ignore_errors=True)
        runs = [
            ("workload stats", "stats", "batch.jsonl",
             [*tuner, "workload", "stats", str(batch), "--json"]),
            ("workload stats", "stats", "plain.jsonl",
             [*tuner, "workload", "stats", str(plain), "--json"]),
            ("simulate", "simulate", "batch.jsonl",
             [*tuner, "simulate", "-w", str(batch), "-m", "llama-3-8b", "-g", "A40", "--json"]),
            ("search", "search", "batch.jsonl",
             [*tuner, "search", "-w", str(batch), "-m", "llama-3-8b", "--gpus", "A10,A40",
              "--n-trials", "3", "--out", str(out), "--json"]),
            ("simulate tokens", "simulate", "tokens.jsonl",
             [*tuner, "simulate", "-w", str(tokens), "-m", "llama-3-8b", "-g", "A40", "--json"]),
            ("search 20 trials", "search", "tokens.jsonl",
             [*tuner, "search", "-w", str(tokens), "-m", "llama-3-8b", "--gpus", "A10,A40",
              "--n-trials", "20", "--out", str(out20), "--json"]),
        ]
        only = set(args.only.split(",")) if args.only else None
        print(f"\n{'command':<16} {'file':<12} {'rc':>3} {'wall s':>8} {'CPU s':>8} "
              f"{'peak MiB':>9}  target")
        for name, key, file, cmd in runs:
            if only and key not in only:
                continue
            rc, wall, cpu, rss = measure(cmd, env)
            t_s, t_mib = TARGETS[name]
            target = " ".join(filter(None, [
                f"<= {t_s:g} s {'ok' if wall <= t_s else 'MISSED'}" if t_s else "",
                f"<= {t_mib:g} MiB {'ok' if rss <= t_mib else 'MISSED'}" if t_mib else "",
            ])) or "(report only)"
            print(f"{name:<16} {file:<12} {rc:>3} {wall:>8.1f} {cpu:>8.1f} {rss:>9.0f}  {target}",
                  flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
