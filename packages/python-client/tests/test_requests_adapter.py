"""IdempotencyAdapter (requests) against the real proxy and the counting upstream."""

from __future__ import annotations

import pytest
import requests

from idempotency_proxy_client import (
    IdempotencyAdapter,
    KeyReusedError,
    UnknownOutcomeError,
    derive_key,
    idempotency_of,
)

from helpers import FAST, Reasons
from proxy import ProxyProcess
from upstream import Upstream


def session(proxy: ProxyProcess, **options: object) -> requests.Session:
    http = requests.Session()
    http.mount(proxy.url, IdempotencyAdapter(**{**FAST, **options}))  # type: ignore[arg-type]
    return http


def test_a_derived_key_executes_once(proxy: ProxyProcess, upstream: Upstream, run_id: str) -> None:
    key = derive_key(run_id, 4, "refund_order")
    with session(proxy) as http:
        first = http.post(
            f"{proxy.url}/refunds", json={"amount": 40}, headers={"Idempotency-Key": key}
        )
        again = http.post(
            f"{proxy.url}/refunds", json={"amount": 40}, headers={"Idempotency-Key": key}
        )
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert idempotency_of(first).replayed is False
    assert idempotency_of(again).replayed is True
    assert upstream.executions(key) == 1


def test_a_timed_out_attempt_is_retried_with_a_random_key_made_once(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    reasons = Reasons()
    with session(proxy, on_retry=reasons) as http:
        response = http.post(f"{proxy.url}/slow-first/{run_id}", json={"amount": 1}, timeout=0.4)
    info = idempotency_of(response)
    assert response.status_code == 201
    assert info.replayed is True and info.attempts >= 2
    assert reasons.reasons[0] == "timeout"
    assert upstream.keys_seen(f"/slow-first/{run_id}") == [info.key]


def test_a_changed_body_raises_key_reused(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    key = derive_key(run_id, 5, "refund_order")
    with session(proxy) as http:
        http.post(f"{proxy.url}/refunds", json={"amount": 40}, headers={"Idempotency-Key": key})
        with pytest.raises(KeyReusedError) as raised:
            http.post(f"{proxy.url}/refunds", json={"amount": 45}, headers={"Idempotency-Key": key})
    assert raised.value.key == key and raised.value.detail
    assert upstream.executions(key) == 1


def test_an_unknown_outcome_raises_unless_asked_not_to(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    key = derive_key(run_id, 6, "refund_order")
    with session(proxy) as http, pytest.raises(UnknownOutcomeError):
        http.post(f"{proxy.url}/unknown/refunds", json={}, headers={"Idempotency-Key": key})
    with session(proxy, raise_on_unknown_outcome=False) as http:
        response = http.post(
            f"{proxy.url}/unknown/refunds", json={}, headers={"Idempotency-Key": key}
        )
    assert idempotency_of(response).outcome == "unknown"
    assert upstream.executions(key) == 1


def test_a_refused_connection_is_retried_until_attempts_run_out(proxy: ProxyProcess) -> None:
    from proxy import free_port

    reasons = Reasons()
    closed = f"http://127.0.0.1:{free_port()}"
    http = requests.Session()
    http.mount(closed, IdempotencyAdapter(max_attempts=3, base_delay=0, on_retry=reasons))
    with pytest.raises(requests.ConnectionError):
        http.post(f"{closed}/refunds", json={})
    assert reasons.reasons == ["connection-error", "connection-error"]
    assert len({i.key for i in reasons.seen}) == 1


def test_a_stream_body_is_refused(proxy: ProxyProcess) -> None:
    with session(proxy) as http, pytest.raises(TypeError, match="must be bytes or str"):
        http.post(f"{proxy.url}/refunds", data=iter([b"a", b"b"]))


def test_safe_methods_pass_through_without_a_key(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    with session(proxy) as http:
        http.get(f"{proxy.url}/lookups/r-{run_id}")
    assert upstream.keys_seen(f"/lookups/r-{run_id}") == [None]
