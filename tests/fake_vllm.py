"""A stand-in `vllm` for the batch-export tests: ``vllm serve ... --port P`` starts a tiny
OpenAI-style HTTP server (stdlib) that answers /health and every POST with a completion echoing
the prompt. It appends its command line (with CUDA_VISIBLE_DEVICES) to $FAKE_VLLM_LOG and, when
$FAKE_VLLM_SEEN is set, each request's prompt to that file; $FAKE_VLLM_DELAY seconds per request
and $FAKE_VLLM_STARTUP seconds before it listens."""

from __future__ import annotations

import random
import socket
from pathlib import Path

SERVER = r'''#!/usr/bin/env python3
import json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
with open(os.environ["FAKE_VLLM_LOG"], "a") as f:
    f.write(os.environ.get("CUDA_VISIBLE_DEVICES", "") + " " + " ".join(args) + "\n")
if not args or args[0] != "serve":
    sys.exit("fake vllm: only `vllm serve` is faked")
port = int(args[args.index("--port") + 1])
delay = float(os.environ.get("FAKE_VLLM_DELAY", "0"))
seen, lock = os.environ.get("FAKE_VLLM_SEEN"), threading.Lock()
time.sleep(float(os.environ.get("FAKE_VLLM_STARTUP", "0")))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body.get("prompt") or json.dumps(body.get("messages"))
        if seen:
            with lock, open(seen, "a") as f:
                f.write(text + "\n")
        time.sleep(delay)
        out = json.dumps({"id": "cmpl-fake", "object": "text_completion",
                          "model": body.get("model"),
                          "choices": [{"index": 0, "text": "echo " + str(text)[:20]}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def install(bin_dir: Path) -> Path:
    """Write the fake `vllm` into `bin_dir` (for PATH); returns `bin_dir`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "vllm"
    exe.write_text(SERVER)
    exe.chmod(0o755)
    return bin_dir


def free_port_base(n: int) -> int:
    """A port P with P .. P+n-1 all free on 127.0.0.1 right now."""
    for _ in range(200):
        base = random.randint(20000, 60000 - n)
        socks = []
        try:
            for k in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")
