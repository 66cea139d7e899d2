"""The ``http`` sandbox back end: a SandboxFusion-compatible service runs the code (for clusters).

``task.options.sandbox: {backend: http, url: http://sandbox:8080}``. Each run is one
``POST {url}/run_code`` with ``{code, language: python, stdin, run_timeout, memory_limit_MB}``:
the code is the child program (:mod:`tasks.sandbox_child`, standard library only), the job
goes on stdin, and the child writes its tagged event lines to stdout, which comes back as
``run_result.stdout`` beside the code's own prints. Isolation is the service's; the tests
still run here, on the returned values, as with every back end.

A failed request (connection refused, a timeout, an HTTP 5xx, ``status: SandboxError``) is
retried ``retries`` times with exponential backoff; a run that still has no answer is
``unavailable`` (no verdict: the code reward leaves it out rather than scoring it zero).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from tasks.sandbox import BACKENDS, Evaluation, Events, SandboxLimits, job
from tasks.sandbox_replay import ReplaySession

CHILD_PROGRAM = Path(__file__).with_name("sandbox_child.py")
_RETRIED_HTTP = (429, 500, 502, 503, 504)


SANDBOX_FUSION_OUTPUT_CAP = 1 << 20
"""SandboxFusion's runners keep at most 1 MiB of a run's stdout and of its stderr."""


class ServiceError(RuntimeError):
    """The service gave no usable answer this time."""


class ResponseTooLarge(RuntimeError):
    """The service's answer is longer than the run's output could honestly make it (not retried)."""


def _response_bytes(limits: SandboxLimits) -> int:
    """The longest answer read: the run's output (``file_size_mb``, JSON-escaped: up to 6 bytes a character) and
    room for the rest of the answer."""
    return 6 * (limits.file_size_mb << 20) + (1 << 16)


@BACKENDS.register("http")
class HttpSandbox:
    """Sends each run to a sandbox service speaking the SandboxFusion ``/run_code`` API."""

    unsafe = False

    def __init__(self, url: str, retries: int = 3, backoff_seconds: float = 1.0, request_slack_seconds: float = 30.0,
                 language: str = "python", output_cap_bytes: int = SANDBOX_FUSION_OUTPUT_CAP) -> None:
        """``url``: the service's base URL; ``retries`` of a failed request, ``backoff_seconds`` before the first
        (doubling); a request is abandoned ``request_slack_seconds`` after the run's own wall clock;
        ``output_cap_bytes``: the most stdout the service returns of a run (a run that reaches it may have lost its
        last answers: they are asked again in a run of their own, :mod:`tasks.sandbox_replay`)."""
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"sandbox url must start with http:// or https://, got {url!r}")
        if retries < 0 or backoff_seconds < 0 or request_slack_seconds <= 0 or output_cap_bytes <= 0:
            raise ValueError("sandbox retries and backoff_seconds must be >= 0, request_slack_seconds and "
                             "output_cap_bytes > 0")
        self.output_cap_bytes = output_cap_bytes
        self.endpoint = url.rstrip("/") + "/run_code"
        self.retries, self.backoff_seconds = retries, backoff_seconds
        self.request_slack_seconds, self.language = request_slack_seconds, language
        self.isolation = f"http service {url}"
        self.program = CHILD_PROGRAM.read_text()

    @classmethod
    def from_options(cls, **settings) -> HttpSandbox:
        if "url" not in settings:
            raise ValueError("the http sandbox needs task.options.sandbox.url (the service's base URL)")
        return cls(**settings)

    def start(self, source: str, limits: SandboxLimits) -> ReplaySession:
        """Requests answer calls in batches only: each new call is one more run (:class:`ReplaySession`)."""
        return ReplaySession(self.evaluate, source, limits)

    def evaluate(self, source: str, calls: list[list], limits: SandboxLimits, silent: int = 0) -> Evaluation:
        started = time.monotonic()  # encoding the job (every call so far) is this run's work too
        payload, tag = job(source, calls, limits, silent=silent)
        request = {"code": self.program, "language": self.language, "stdin": payload.decode(),
                   "run_timeout": limits.wall_seconds, "memory_limit_MB": limits.memory_mb}
        error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
            try:
                answer = self._post(request, limits.wall_seconds + self.request_slack_seconds,
                                    _response_bytes(limits))
            except ResponseTooLarge as failure:
                return Evaluation("output_limit", tag=tag, error=str(failure), seconds=time.monotonic() - started)
            except ServiceError as failure:
                error = str(failure)
                continue
            return self._evaluation(answer, tag, limits, time.monotonic() - started)
        return Evaluation("unavailable", tag=tag, error=f"{self.endpoint}: {error} ({self.retries + 1} attempts)",
                          seconds=time.monotonic() - started)

    def _post(self, request: dict, timeout: float, most_bytes: int) -> dict:
        """The service's answer, read up to ``most_bytes`` (past them: :class:`ResponseTooLarge`)."""
        http_request = urllib.request.Request(self.endpoint, data=json.dumps(request).encode(), method="POST",
                                              headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(http_request, timeout=timeout) as response:
                body = response.read(most_bytes + 1)
                if len(body) > most_bytes:
                    raise ResponseTooLarge(f"the service answered more than {most_bytes} bytes (unread)")
                answer = json.loads(body)
        except urllib.error.HTTPError as failure:
            if failure.code in _RETRIED_HTTP:
                raise ServiceError(f"HTTP {failure.code}") from None
            raise ServiceError(f"HTTP {failure.code} (not retried)") from None
        except (urllib.error.URLError, TimeoutError, OSError, ValueError, RecursionError) as failure:
            raise ServiceError(f"{type(failure).__name__}: {failure}") from None
        if type(answer) is not dict or answer.get("status") == "SandboxError" or type(answer.get("run_result")) \
                is not dict:
            raise ServiceError(f"no run result: {str(answer.get('message', '') if type(answer) is dict else '')[:200]}")
        return answer

    def _evaluation(self, answer: dict, tag: str, limits: SandboxLimits, seconds: float) -> Evaluation:
        run = answer["run_result"]
        stdout, stderr = str(run.get("stdout") or ""), str(run.get("stderr") or "")
        common = {"events": stdout, "tag": tag, "stderr": stderr[-limits.captured_bytes:], "seconds": seconds}
        if len(stdout) + len(stderr) > limits.file_size_mb << 20:
            return Evaluation("output_limit", error=f"printed more than {limits.file_size_mb} MB", **common)
        # the service cuts bytes (a character cut in two is dropped when it decodes them)
        common["truncated"] = len(stdout.encode("utf-8", "surrogatepass")) >= self.output_cap_bytes - 3
        common["stdout"] = Events.prints(stdout, tag).removesuffix("\n")[-limits.captured_bytes:]
        if run.get("status") == "TimeLimitExceeded":
            return Evaluation("timeout", error="wall-clock limit reached (service)", **common)
        return Evaluation("ok", **common)
