"""A real `mlflow server` process for the tests: its own SQLite store and artifact directory, on a
free 127.0.0.1 port; it can be stopped and started again on the same port and store (an outage)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


class MlflowServer:
    def __init__(self, server_dir: Path) -> None:
        self.dir = Path(server_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> str:
        cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--workers", "1", "--backend-store-uri", f"sqlite:///{self.dir / 'server.db'}"]
        cmd += ["--artifacts-destination", str(self.dir / "artifacts")]
        # no background job runner: it would start 7 worker processes a test does not need
        env = {
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        log = (self.dir / "server.log").open("a")
        # its own process group, so stop() ends the server's worker processes too
        self.proc = subprocess.Popen(
            cmd, cwd=self.dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return self.url
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server did not start: {(self.dir / 'server.log').read_text()[-2000:]}"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)
        self.proc = None
