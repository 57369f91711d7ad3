"""Fixtures: one real upstream and one real proxy for the whole session."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from proxy import REPO_ROOT, ProxyProcess
from upstream import Upstream

VECTORS_FILE = REPO_ROOT / "test" / "fixtures" / "client-key-vectors.json"


@pytest.fixture(scope="session")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture(scope="session")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    process = ProxyProcess(upstream.url, tmp_path_factory.mktemp("proxy"))
    yield process
    process.stop()


@pytest.fixture(scope="session")
def vectors() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture
def run_id() -> str:
    """A fresh run: its keys were never seen by the proxy."""
    return f"run-{secrets.token_hex(6)}"
