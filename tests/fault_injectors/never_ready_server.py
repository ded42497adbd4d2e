"""FAULT INJECTOR — not an engine. Stands in for a `vllm serve` that never becomes ready.

A real vLLM cannot be made to hang before /health on purpose, so this fake listens on the given
port and answers /health with 503 forever. It also starts a grandchild process and (with
--ignore-sigterm) ignores SIGTERM, so the test sees teardown reach the whole process group and
escalate to SIGKILL.
"""

import argparse
import http.server
import signal
import subprocess
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server API
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"never ready (fault injector)")

    def log_message(self, *args):
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ignore-sigterm", action="store_true")
    args = ap.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A grandchild, as vLLM's EngineCore would be: teardown must reach it too.
    subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"])
    print(f"fault injector: never-ready server on {args.host}:{args.port}", flush=True)
    http.server.HTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
