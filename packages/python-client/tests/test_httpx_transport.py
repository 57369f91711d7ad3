"""IdempotencyTransport (sync) against the real proxy and a real upstream that counts executions."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timezone

import httpx
import pytest

from idempotency_proxy_client import (
    IdempotencyTransport,
    KeyReusedError,
    UnknownOutcomeError,
    derive_key,
    idempotency_of,
)

from helpers import FAST, LosesFirstAnswer, Reasons, RefusesFirst, step
from proxy import ProxyProcess
from upstream import Upstream


def client(
    proxy: ProxyProcess, transport: httpx.BaseTransport | None = None, **options: object
) -> httpx.Client:
    settings = {**FAST, **options}
    return httpx.Client(
        base_url=proxy.url,
        transport=IdempotencyTransport(transport, **settings),  # type: ignore[arg-type]
        timeout=10,
    )


def test_the_same_run_step_and_tool_execute_once(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    key = derive_key(run_id, 4, "refund_order")
    with client(proxy) as http:
        first = http.post(
            "/refunds", json={"order": "o-1", "amount": 40}, extensions=step(run_id, 4)
        )
        # The agent retries the whole tool call (a restarted worker, a resumed run): same key.
        again = http.post(
            "/refunds", json={"order": "o-1", "amount": 40}, extensions=step(run_id, 4)
        )
    assert first.status_code == again.status_code == 201
    assert upstream.executions(key) == 1
    assert first.json()["key"] == key
    assert again.json() == first.json()
    assert idempotency_of(first).replayed is False
    assert idempotency_of(again).replayed is True
    assert idempotency_of(again).key == key


def test_another_step_is_another_action(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    with client(proxy) as http:
        http.post("/refunds", json={"order": "o-1"}, extensions=step(run_id, 4))
        other = http.post("/refunds", json={"order": "o-1"}, extensions=step(run_id, 5))
    assert idempotency_of(other).replayed is False
    assert upstream.executions(derive_key(run_id, 4, "refund_order")) == 1
    assert upstream.executions(derive_key(run_id, 5, "refund_order")) == 1


def test_a_timed_out_attempt_is_retried_with_its_key_and_runs_once(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    reasons = Reasons()
    with client(proxy, on_retry=reasons) as http:
        # The upstream takes 1.5 s the first time; each attempt gives up after 0.4 s.
        response = http.post(
            "/slow-first/refunds", json={"amount": 40}, extensions=step(run_id, 1), timeout=0.4
        )
    key = derive_key(run_id, 1, "refund_order")
    assert response.status_code == 201
    assert upstream.executions(key) == 1
    info = idempotency_of(response)
    assert info.replayed is True
    assert info.attempts >= 2
    assert reasons.reasons[0] == "timeout"
    assert {i.key for i in reasons.seen} == {key}


def test_a_409_is_waited_out_and_the_first_answer_replayed(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    key = derive_key(run_id, 2, "refund_order")
    first: list[httpx.Response] = []
    # Another worker already sends this action, without the helper; it takes 1.5 s upstream.
    sender = threading.Thread(
        target=lambda: first.append(
            httpx.post(
                f"{proxy.url}/slow-first/refunds",
                json={"amount": 7},
                headers={"Idempotency-Key": key},
                timeout=10,
            )
        )
    )
    sender.start()
    deadline = time.monotonic() + 10
    while upstream.executions(key) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    reasons = Reasons()
    with client(proxy, on_retry=reasons) as http:
        response = http.post("/slow-first/refunds", json={"amount": 7}, extensions=step(run_id, 2))
    sender.join()
    assert response.status_code == 201
    assert response.json() == first[0].json()
    assert idempotency_of(response).replayed is True
    assert "in-flight" in reasons.reasons
    assert all(i.status == 409 for i in reasons.seen)
    assert upstream.executions(key) == 1


def test_a_changed_body_under_the_same_key_raises_key_reused(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    with client(proxy) as http:
        http.post("/refunds", json={"amount": 40}, extensions=step(run_id, 3))
        with pytest.raises(KeyReusedError) as raised:
            # The model changed its mind on a retry: 40 became 45.
            http.post("/refunds", json={"amount": 45}, extensions=step(run_id, 3))
    key = derive_key(run_id, 3, "refund_order")
    assert raised.value.key == key
    assert raised.value.status == 422
    assert raised.value.detail  # the proxy's explanation, from its problem document
    assert key in str(raised.value) and "different request payload" in str(raised.value)
    assert upstream.executions(key) == 1


def test_an_unknown_outcome_raises_unless_asked_not_to(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    key = derive_key(run_id, 6, "refund_order")
    # The upstream takes longer than the route's 1 s timeout after getting the request.
    with client(proxy) as http, pytest.raises(UnknownOutcomeError) as raised:
        http.post("/unknown/refunds", json={"amount": 1}, extensions=step(run_id, 6))
    assert raised.value.key == key
    assert raised.value.status in (502, 504)
    assert raised.value.info.outcome == "unknown"
    assert "outcome unknown" in str(raised.value)
    with client(proxy, raise_on_unknown_outcome=False) as http:
        response = http.post("/unknown/refunds", json={"amount": 1}, extensions=step(run_id, 6))
    assert response.status_code == raised.value.status
    assert idempotency_of(response).outcome == "unknown"
    assert idempotency_of(response).attempts == 1  # an unknown outcome is never retried
    assert upstream.executions(key) == 1


def test_a_refused_connection_is_retried_with_the_same_key(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    reasons = Reasons()
    inner = RefusesFirst()
    with client(proxy, inner, on_retry=reasons) as http:
        response = http.post("/refunds", json={"amount": 3}, extensions=step(run_id, 7))
    assert response.status_code == 201
    assert reasons.reasons == ["connection-error"]
    assert inner.calls == 2
    assert upstream.executions(derive_key(run_id, 7, "refund_order")) == 1


def test_a_random_key_is_made_once_and_kept_when_the_answer_is_lost(
    proxy: ProxyProcess, upstream: Upstream
) -> None:
    inner = LosesFirstAnswer()
    with client(proxy, inner) as http:
        response = http.post("/refunds", json={"amount": 9})
    key = inner.keys[0]
    assert key is not None and len(key) == 36
    assert inner.keys == [key, key]
    assert idempotency_of(response).replayed is True
    assert idempotency_of(response).key == key
    assert upstream.executions(key) == 1


def test_an_explicit_key_header_is_used_as_it_is(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    key = f"{run_id}-refund"
    with client(proxy) as http:
        response = http.post("/refunds", json={"amount": 1}, headers={"Idempotency-Key": key})
    assert response.json()["key"] == key
    assert idempotency_of(response).key == key


def test_a_header_and_a_different_derived_key_are_refused(proxy: ProxyProcess, run_id: str) -> None:
    with client(proxy) as http, pytest.raises(ValueError, match="pass the key once"):
        http.post(
            "/refunds", json={}, headers={"Idempotency-Key": "other"}, extensions=step(run_id, 1)
        )


def test_a_malformed_idempotency_extension_is_refused(proxy: ProxyProcess, run_id: str) -> None:
    with client(proxy) as http:
        with pytest.raises(TypeError, match='"run_id", "step" and "tool"'):
            http.post("/refunds", json={}, extensions={"idempotency": {"run_id": run_id}})
        with pytest.raises(TypeError, match="unknown field"):
            http.post(
                "/refunds",
                json={},
                extensions={"idempotency": {"run_id": run_id, "step": 1, "tool": "t", "x": 1}},
            )


def test_safe_methods_pass_through_without_a_key(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    with client(proxy) as http:
        response = http.get(f"/lookups/{run_id}")
    assert response.status_code == 201
    assert upstream.keys_seen(f"/lookups/{run_id}") == [None]


def test_unknown_options_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown option"):
        IdempotencyTransport(max_attempt=3)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="max_attempts"):
        IdempotencyTransport(max_attempts=0)


def test_the_expiry_and_a_reconciled_outcome_are_read_when_sent() -> None:
    # The proxy may not send Idempotency-Expires yet: a stand-in upstream shows it is parsed.
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            201,
            headers={
                "Idempotent-Replayed": "true",
                "Idempotency-Outcome": "reconciled",
                "Idempotency-Expires": "Sun, 06 Dec 2026 08:49:37 GMT",
            },
            json={"ok": True},
        )

    with httpx.Client(transport=IdempotencyTransport(httpx.MockTransport(answer))) as http:
        response = http.post("http://proxy.test/refunds", json={})
    info = idempotency_of(response)
    assert info.replayed is True
    assert info.outcome == "reconciled"
    assert info.expires == datetime(2026, 12, 6, 8, 49, 37, tzinfo=timezone.utc)


def test_a_malformed_expiry_is_ignored() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, headers={"Idempotency-Expires": "soon"})

    with httpx.Client(transport=IdempotencyTransport(httpx.MockTransport(answer))) as http:
        response = http.post("http://proxy.test/refunds", json={})
    assert idempotency_of(response).expires is None


def test_attempts_are_capped_and_the_last_answer_returned() -> None:
    sent: list[str | None] = []

    def busy(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("idempotency-key"))
        return httpx.Response(503, headers={"Retry-After": "0"})

    transport = IdempotencyTransport(httpx.MockTransport(busy), max_attempts=3, base_delay=0)
    with httpx.Client(transport=transport) as http:
        response = http.post("http://proxy.test/refunds", json={})
    assert response.status_code == 503
    assert idempotency_of(response).attempts == 3
    assert len(sent) == 3 and len(set(sent)) == 1


def test_when_no_attempt_gets_an_answer_the_last_error_is_raised() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = IdempotencyTransport(httpx.MockTransport(refuse), max_attempts=2, base_delay=0)
    with httpx.Client(transport=transport) as http, pytest.raises(httpx.ConnectError):
        http.post("http://proxy.test/refunds", json={})


def test_an_upstreams_own_422_is_returned_not_raised() -> None:
    def invalid(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"error": "amount must be positive"})

    with httpx.Client(transport=IdempotencyTransport(httpx.MockTransport(invalid))) as http:
        response = http.post("http://proxy.test/refunds", json={"amount": -1})
    assert response.status_code == 422
    assert response.json() == {"error": "amount must be positive"}


def test_a_namespace_option_keeps_the_keys_of_a_hand_written_helper() -> None:
    # The usual helper: str(uuid.uuid5(NAMESPACE, f"{run_id}:{step}:{tool}")), its own namespace.
    namespace = "6f1c2a0e-3b7d-4c55-9a1e-2d8f0b7c4e11"
    sent: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("idempotency-key"))
        return httpx.Response(201)

    transport = IdempotencyTransport(httpx.MockTransport(answer), namespace=namespace)
    with httpx.Client(transport=transport) as http:
        http.post("http://proxy.test/refunds", json={}, extensions=step("run-7f3a", 4))
    assert sent == [str(uuid.uuid5(uuid.UUID(namespace), "run-7f3a:4:refund_order"))]
