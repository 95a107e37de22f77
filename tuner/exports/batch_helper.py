"""tuner's resumable batch helper: the part of an exported batch job that runs on the GPU
machine (tuner.exports.run_batch writes this file's source into the job's WORK folder and runs
it with python3). Standard library only, Python 3.8+: the machine needs no tuner.

    split INPUT DP WORK                 the job as DP shares WORK/part-K.jsonl, balanced by tokens
    todo PART OUT                       exit 0 when OUT answers every request of PART, else 3
    run PART OUT URL MODEL N PID SENT   PART's unanswered requests through the vLLM server at
                                        URL (N in flight), each result appended to OUT as it
                                        completes; the custom_ids sent are logged to SENT
    merge INPUT OUTPUT WORK DP          every WORK/out-K.jsonl into OUTPUT, in INPUT's order,
                                        each custom_id exactly once (exit 1 if one is missing)

A result line is vLLM run-batch's output form: ``{"id", "custom_id", "response":
{"status_code", "request_id", "body"}, "error"}``. A rerun skips every ``custom_id`` already
answered in OUT; a line a kill cut short is dropped when OUT is read, so its request is sent
again: a killed job loses only the requests in flight.
"""

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid


def requests_of(path):
    """[(custom_id, url, body, line)] of the request lines of a Batch API JSONL file."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                sys.exit(f"{path}:{n}: not JSON ({exc})")
            cid = obj.get("custom_id") if isinstance(obj, dict) else None
            if not isinstance(cid, str) or not cid:
                sys.exit(f"{path}:{n}: no custom_id (a resumable job skips finished requests "
                         "by it: give every request one)")
            body = obj.get("body")
            if not isinstance(body, dict):
                sys.exit(f"{path}:{n}: no body (OpenAI Batch API lines: custom_id, method, "
                         "url, body)")
            out.append((cid, obj.get("url") or "/v1/chat/completions", body, line))
    return out


def answered(path):
    """{custom_id: result line} of a results file. A line a kill cut short (no newline, not
    JSON) or a repeated custom_id is dropped from the file, so its request is sent again."""
    if not os.path.exists(path):
        return {}
    keep, bad = {}, 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            rec = None
            if line.endswith("\n"):
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = None
            cid = rec.get("custom_id") if isinstance(rec, dict) else None
            if not isinstance(cid, str) or cid in keep:
                bad += 1
                continue
            keep[cid] = line
    if bad:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(keep.values())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        print(f"{path}: dropped {bad} unfinished line(s); their requests are sent again",
              file=sys.stderr)
    return keep


def tokens(body):
    """A request's work for the split: its prompt (characters / 4) plus its max_tokens."""
    text = body.get("prompt") or json.dumps(body.get("messages") or "")
    return len(str(text)) // 4 + int(body.get("max_tokens") or body.get("max_completion_tokens")
                                     or 0)


def split(src, dp, work):
    """Longest request first, each to the share with the fewest tokens so far (as the
    simulator splits a job); deterministic."""
    reqs = requests_of(src)
    seen = set()
    for cid, _, _, _ in reqs:
        if cid in seen:
            sys.exit(f"{src}: custom_id {cid!r} appears twice; each request needs its own")
        seen.add(cid)
    load, owner = [0] * dp, [0] * len(reqs)
    for i in sorted(range(len(reqs)), key=lambda i: -tokens(reqs[i][2])):
        k = min(range(dp), key=load.__getitem__)
        owner[i], load[k] = k, load[k] + tokens(reqs[i][2])
    for k in range(dp):
        with open(f"{work}/part-{k}.jsonl", "w", encoding="utf-8") as out:
            out.writelines(r[3] if r[3].endswith("\n") else r[3] + "\n"
                           for r, o in zip(reqs, owner) if o == k)  # noqa: B905 (3.8)
    print(f"split {len(reqs)} requests of {src} into {dp} parts in {work}/ "
          f"(tokens per part: {load})")


def todo(part, out):
    reqs, done = requests_of(part), answered(out)
    left = sum(1 for r in reqs if r[0] not in done)
    print(f"{part}: {len(reqs) - left} of {len(reqs)} requests answered in {out}")
    return 0 if left == 0 else 3


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:  # the engine's answer to a bad request: kept
        return exc.code, exc.read()


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def wait_ready(base, pid, timeout_s):
    """Until the server answers /health; exit when its process died or after `timeout_s`."""
    t0 = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if pid and not alive(pid):
            sys.exit(f"the vLLM server for {base} exited while starting (see its serve log)")
        if time.monotonic() - t0 > timeout_s:
            sys.exit(f"the vLLM server for {base} was not up after {timeout_s:.0f} s "
                     "(TUNER_STARTUP_TIMEOUT)")
        time.sleep(1.0)


def result_line(cid, status, raw):
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = raw.decode("utf-8", "replace")
    request_id = payload.get("id") if isinstance(payload, dict) else None
    return json.dumps({"id": "batch_req_" + uuid.uuid4().hex, "custom_id": cid,
                       "response": {"status_code": status, "request_id": request_id,
                                    "body": payload},
                       "error": None}) + "\n"


def run(part, out, base, model, n, pid, sent_log):
    reqs, done = requests_of(part), answered(out)
    left = [r for r in reqs if r[0] not in done]
    with open(sent_log, "a", encoding="utf-8") as log:
        log.write(f"# run {time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: "
                  f"{len(reqs) - len(left)} answered, {len(left)} to send\n")
    print(f"{part}: {len(reqs) - len(left)} of {len(reqs)} answered, sending {len(left)}")
    if not left:
        return 0
    wait_ready(base, pid, float(os.environ.get("TUNER_STARTUP_TIMEOUT", "3600")))
    lock, it, failed = threading.Lock(), iter(left), []
    results = open(out, "a", encoding="utf-8")
    sent = open(sent_log, "a", encoding="utf-8")
    synced = [time.monotonic()]

    def worker():
        while not failed:
            with lock:
                item = next(it, None)
                if item is not None:
                    sent.write(item[0] + "\n")
                    sent.flush()
            if item is None:
                return
            cid, path, body, _ = item
            try:
                status, raw = post(base + path, dict(body, model=model))
            except OSError as exc:  # the server is gone (killed, reclaimed): stop here
                failed.append(f"{cid}: {exc}")
                return
            if status >= 500:  # the engine failed, not the request: sent again on a rerun
                failed.append(f"{cid}: HTTP {status}")
                return
            line = result_line(cid, status, raw)
            with lock:
                results.write(line)
                results.flush()  # a killed process loses nothing written
                if time.monotonic() - synced[0] > 1.0:  # a lost machine: a second at most
                    os.fsync(results.fileno())
                    synced[0] = time.monotonic()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(n, len(left)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.flush()
    os.fsync(results.fileno())
    results.close()
    sent.close()
    if failed:
        print(f"{part}: stopped ({failed[0]}); rerun to send the unanswered requests",
              file=sys.stderr)
        return 1
    return 0


def merge(src, output, work, dp):
    order = [r[0] for r in requests_of(src)]
    got = {}
    for k in range(dp):
        for cid, line in answered(f"{work}/out-{k}.jsonl").items():
            got.setdefault(cid, line)
    missing = [cid for cid in order if cid not in got]
    if missing:
        print(f"{len(missing)} of {len(order)} requests have no result yet (e.g. "
              f"{missing[0]!r}): rerun to finish them", file=sys.stderr)
        return 1
    tmp = output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(got[cid] for cid in order)
    os.replace(tmp, output)
    print(f"wrote {output}: {len(order)} results, each custom_id once")
    return 0


def main(argv):
    cmd, a = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    if cmd == "split" and len(a) == 3:
        split(a[0], int(a[1]), a[2])
        return 0
    if cmd == "todo" and len(a) == 2:
        return todo(a[0], a[1])
    if cmd == "run" and len(a) == 7:
        return run(a[0], a[1], a[2], a[3], int(a[4]), int(a[5] or 0), a[6])
    if cmd == "merge" and len(a) == 4:
        return merge(a[0], a[1], a[2], int(a[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
