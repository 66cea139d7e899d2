"""A local stand-in for a SandboxFusion service (``POST /run_code``), for the http back end's tests: never the
network."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeSandboxFusion:
    """``POST /run_code``: runs ``code`` with ``stdin`` in a local process, answers as SandboxFusion does.

    ``failures``: how many requests first get HTTP 503; ``sandbox_error``: answer every request with
    ``status: SandboxError``.
    """

    def __init__(self, failures: int = 0, sandbox_error: bool = False) -> None:
        self.failures, self.sandbox_error, self.requests = failures, sandbox_error, []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, request))
                if fake.failures > 0:
                    fake.failures -= 1
                    self.send_error(503)
                    return
                self._answer(fake.run(request))

            def _answer(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def run(self, request: dict) -> dict:
        if self.sandbox_error:
            return {"status": "SandboxError", "message": "no runner free", "run_result": None}
        try:
            done = subprocess.run([sys.executable, "-I", "-S", "-c", request["code"]], input=request["stdin"],
                                  capture_output=True, text=True, timeout=request["run_timeout"])
        except subprocess.TimeoutExpired as expired:
            stdout = expired.stdout or b""  # bytes, whatever ``text`` says
            run = {"status": "TimeLimitExceeded", "stdout": stdout.decode() if isinstance(stdout, bytes) else stdout,
                   "stderr": "", "return_code": None}
        else:
            run = {"status": "Finished", "stdout": done.stdout, "stderr": done.stderr, "return_code": done.returncode}
        return {"status": "Success" if run.get("return_code") == 0 else "Failed", "compile_result": None,
                "run_result": {**run, "execution_time": 0.1}, "files": {}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
