"""A stand-in engine: takes the command lines ``modelplan agent --engines run`` starts (``vllm serve MODEL
--host H --port P --api-key K ...``, ``llama-server -m FILE --host H --port P --api-key K ...``; every other
flag taken and ignored), and answers as the engine's HTTP server does, without a card or a model:

- ``GET /health``: 503 while it loads (``STANDIN_LOAD_S`` seconds, and while ``STANDIN_READY_FILE`` names a
  file that does not exist yet), then 200 (llama-server answers 503 while loading; vLLM's /health has no
  body);
- ``GET /v1/models``: the one model it serves (``--served-model-name``, ``--alias``, else the model given);
- ``POST /v1/completions``: a canned answer (``STANDIN_ANSWER``);
- with ``--api-key``, every path but /health wants ``Authorization: Bearer KEY`` (401 otherwise), as both
  engines do.

It prints the lines the agent parses (``producer.agent.engine_log``): the engine's release, and with
``STANDIN_KV_MIB`` the KV cache it allocated, in the engine's own words; it holds ``STANDIN_HOLD_MIB`` MiB
(default 64) of touched memory; with ``STANDIN_FAIL=oom`` it prints the engine's out-of-memory lines at
start and exits 1, with ``STANDIN_FAIL=error`` an ordinary start-up error. TERM ends it (``STANDIN_IGNORE_TERM``:
it does not, and KILL is needed). ``python -m producer.standin vllm serve MODEL --port 8000``.

Only the standard library: it runs from any Python, by path too (``python -P producer/standin.py``: ``-P``
so that the folder it is in, whose ``operator.py`` would shadow the standard one, is not put on the path)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MIB = 1 << 20

DEFAULT_HOLD_MIB = 64
"""Resident memory held by default: enough for a measurement to see, small beside any test machine."""

VLLM_VERSION = "0.11.0"
LLAMACPP_BUILD = 6500

OOM_LINES = {
    # the engines' own words (producer/agent/engine_log.py names where each was found)
    "vllm": [
        "ERROR 11-18 18:07:28 [core.py:708] EngineCore failed to start.",
        "ERROR 11-18 18:07:28 [core.py:708] ValueError: No available memory for the cache blocks. "
        "Try increasing `gpu_memory_utilization` when initializing the engine.",
    ],
    "llamacpp": [
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: cudaMalloc failed: "
        "out of memory",
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 17179869184",
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
    ],
}


def _engine(argv: list[str]) -> tuple[str, list[str]]:
    """Which engine the command line names (its first word), and the rest of it."""
    if argv and Path(argv[0]).name == "vllm":
        return "vllm", argv[2:] if len(argv) > 1 and argv[1] == "serve" else argv[1:]
    if argv and Path(argv[0]).name == "llama-server":
        return "llamacpp", argv[1:]
    return os.environ.get("STANDIN_ENGINE", "llamacpp"), argv


def parse(argv: list[str]) -> tuple[str, argparse.Namespace, list[str]]:
    engine, rest = _engine(argv)
    parser = argparse.ArgumentParser(prog="standin")
    parser.add_argument("model_arg", nargs="?", default="")
    parser.add_argument("-m", "--model", default="")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--api-key", default="")
    parser.add_argument("--served-model-name", default="")
    parser.add_argument("--alias", "-a", default="")
    parser.add_argument("--hold-mib", type=int, default=int(os.environ.get("STANDIN_HOLD_MIB", DEFAULT_HOLD_MIB)))
    parser.add_argument("--ready-file", default=os.environ.get("STANDIN_READY_FILE", ""))
    parser.add_argument("--fail", default=os.environ.get("STANDIN_FAIL", ""), help="oom, or any other word")
    parser.add_argument("--ignore-term", action="store_true", default=bool(os.environ.get("STANDIN_IGNORE_TERM")))
    args, ignored = parser.parse_known_args(rest)
    return engine, args, ignored


def served_name(args: argparse.Namespace) -> str:
    return str(args.served_model_name or args.alias or args.model or args.model_arg or "standin")


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    engine, args, ignored = parse(list(sys.argv[1:] if argv is None else argv))
    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_term else lambda *_: sys.exit(0))
    _say(f"standin: {engine} serving {served_name(args)!r}, ignoring {ignored}")
    _say(f"standin: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}")
    _say(f"INFO vLLM API server version {VLLM_VERSION}" if engine == "vllm" else f"build: {LLAMACPP_BUILD} (standin)")
    fail = args.fail
    if fail == "oom":
        for line in OOM_LINES.get(engine, OOM_LINES["llamacpp"]):
            _say(line)
        return 1
    if fail:
        _say("error: the stand-in was told to fail at start (STANDIN_FAIL)")
        return 1
    held = bytearray(b"\x01") * (args.hold_mib * MIB)  # filled, so every page is touched and resident
    _say(f"standin: holding {len(held)} bytes")
    kv_mib = os.environ.get("STANDIN_KV_MIB", "")
    if kv_mib:
        if engine == "vllm":
            _say(f"INFO [gpu_worker.py:298] Available KV cache memory: {int(kv_mib) / 1024:.2f} GiB")
        else:
            _say(f"llama_kv_cache:        CPU KV buffer size = {float(kv_mib):8.2f} MiB")
    loaded_at = time.monotonic() + float(os.environ.get("STANDIN_LOAD_S", "0"))
    answer = os.environ.get("STANDIN_ANSWER", "a stand-in answer")
    name = served_name(args)

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _allowed(self) -> bool:
            if not args.api_key or self.headers.get("Authorization", "") == f"Bearer {args.api_key}":
                return True
            self._send(401, {"error": {"message": "Invalid API Key", "type": "authentication_error"}})
            return False

        def do_GET(self) -> None:
            if self.path == "/health":
                ready = time.monotonic() >= loaded_at and (not args.ready_file or Path(args.ready_file).exists())
                self._send(200, {"status": "ok"}) if ready else self._send(503, {"status": "loading"})
            elif self.path == "/v1/models":
                if self._allowed():
                    self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": engine}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if self.path != "/v1/completions":
                self._send(404, {"error": "not found"})
            elif self._allowed():
                choice = {"index": 0, "text": answer, "finish_reason": "stop"}
                self._send(200, {"object": "text_completion", "model": name, "choices": [choice]})

        def log_message(self, format: str, *log_args: object) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    _say(f"standin: listening on {args.host}:{args.port}")
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return len(held) and 0


if __name__ == "__main__":
    sys.exit(main())
