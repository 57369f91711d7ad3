"""Runs the proxy from this repository's build (dist/main.js serve) as its own process.

On the PostgreSQL at DATABASE_URL when set (the jest wrapper passes the suite's), else on the
embedded PostgreSQL the proxy starts itself, with its data in the test's temp dir. Each run gets a
table of its own.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

REPO_ROOT = Path(os.environ.get("IDEMPOTENCY_PROXY_ROOT") or Path(__file__).resolve().parents[3])
PROXY_MAIN = REPO_ROOT / "dist" / "main.js"
READY_LINE = "admin listening"
START_TIMEOUT_SECONDS = 120.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def config_yaml(upstream_url: str, data_dir: Path, table: str) -> str:
    return f"""
listen: {{ host: 127.0.0.1, port: "${{PROXY_PORT}}" }}
admin: {{ host: 127.0.0.1, port: "${{ADMIN_PORT}}" }}
store:
  url: ${{DATABASE_URL:-}}
  dataDir: {data_dir}
  table: {table}
  poolSize: 4
upstreams:
  tools: {{ url: {upstream_url}, timeout: 10s }}
  impatient: {{ url: {upstream_url}, timeout: 1s }}
routes:
  - name: acp
    match: {{ path: /acp/** }}
    upstream: tools
    stripPrefix: /acp
    idempotency: {{ profile: acp, tenant: ["header:x-shop-caller"], lockTimeout: 20s }}
  - name: ucp
    match: {{ path: /ucp/** }}
    upstream: tools
    stripPrefix: /ucp
    idempotency: {{ profile: ucp, tenant: ["header:x-shop-caller"], lockTimeout: 20s }}
  - name: unknown
    match: {{ path: /unknown/** }}
    upstream: impatient
    idempotency: {{ lockTimeout: 20s }}
  - name: tools
    match: {{ path: /** }}
    upstream: tools
    idempotency: {{ lockTimeout: 20s }}
"""


class ProxyProcess:
    def __init__(self, upstream_url: str, work_dir: Path) -> None:
        if not PROXY_MAIN.exists():
            raise RuntimeError(f"{PROXY_MAIN} is missing: run `npm run build` in {REPO_ROOT} first")
        node = os.environ.get("NODE") or shutil.which("node")
        if node is None:
            raise RuntimeError("node is not on PATH (set NODE to its path)")
        self.table = f"t_pyclient_{secrets.token_hex(5)}"
        config = work_dir / "proxy.yaml"
        config.write_text(config_yaml(upstream_url, work_dir / "pgdata", self.table))
        self.port = free_port()
        env = {
            **os.environ,
            "PROXY_PORT": str(self.port),
            "ADMIN_PORT": str(free_port()),
            "LOG_LEVEL": "info",
        }
        self.output: list[str] = []
        self._ready = threading.Event()
        self.process = subprocess.Popen(
            [node, str(PROXY_MAIN), "serve", "--config", str(config)],
            cwd=work_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self._ready.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the proxy did not start:\n" + "".join(self.output))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if READY_LINE in line:
                self._ready.set()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
