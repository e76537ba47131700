"""A stand-in engine for the ``run`` hook: takes the flags the hook gives (``-m``, ``--host``, ``--port``; the
rest ignored), holds ``--hold-mib`` MiB (else ``$STANDIN_HOLD_MIB``, else 64) of touched memory, answers
``GET /health`` with 200 once it holds it (503 before, and while ``--ready-file`` names a file that does not
exist yet), and exits on TERM (with ``--ignore-term`` it does not: KILL is needed)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MIB = 1 << 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="standin-engine")
    parser.add_argument("-m", "--model", default="")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hold-mib", type=int, default=int(os.environ.get("STANDIN_HOLD_MIB", "64")))
    parser.add_argument("--ready-file", default=os.environ.get("STANDIN_READY_FILE", ""))
    parser.add_argument("--ignore-term", action="store_true", default=bool(os.environ.get("STANDIN_IGNORE_TERM")))
    args, rest = parser.parse_known_args(argv)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_term else lambda *_: sys.exit(0))
    print(f"standin: model {args.model!r}, ignoring {rest}", flush=True)
    print(f"standin: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}", flush=True)
    held = bytearray(b"\x01") * (args.hold_mib * MIB)  # filled, so every page is touched and resident
    print(f"standin: holding {len(held)} bytes", flush=True)

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ready = not args.ready_file or Path(args.ready_file).exists()
            code = 200 if self.path == "/health" and ready else (503 if self.path == "/health" else 404)
            body = b'{"status":"ok"}' if code == 200 else b'{"status":"loading"}'
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *log_args: object) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Health)
    print(f"standin: listening on {args.host}:{args.port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return len(held) and 0


if __name__ == "__main__":
    sys.exit(main())
