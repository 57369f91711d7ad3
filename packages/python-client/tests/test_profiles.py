"""Routes that speak a commerce protocol's contract (idempotency.profile): an ACP route's flat 422
``idempotency_conflict`` and a UCP route's 409 ``idempotency_conflict`` raise KeyReusedError like
the proxy's own 422, without a retry; their in-flight 409 (with Retry-After) is waited out."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from idempotency_proxy_client import (
    AsyncIdempotencyTransport,
    IdempotencyAdapter,
    IdempotencyTransport,
    KeyReusedError,
    derive_key,
    idempotency_of,
)

from helpers import FAST, Reasons, step
from proxy import ProxyProcess
from upstream import Upstream

CALLER = {"x-shop-caller": "agent-7"}


def client(proxy: ProxyProcess, **options: object) -> httpx.Client:
    return httpx.Client(
        base_url=proxy.url,
        transport=IdempotencyTransport(**{**FAST, **options}),  # type: ignore[arg-type]
        headers=CALLER,
        timeout=10,
    )


@pytest.mark.parametrize(("profile", "status"), [("acp", 422), ("ucp", 409)])
def test_a_conflict_raises_key_reused_and_is_not_retried(
    proxy: ProxyProcess, upstream: Upstream, run_id: str, profile: str, status: int
) -> None:
    reasons = Reasons()
    with client(proxy, on_retry=reasons) as http:
        first = http.post(f"/{profile}/checkout", json={"amount": 40}, extensions=step(run_id, 1))
        assert first.status_code == 201
        with pytest.raises(KeyReusedError) as raised:
            http.post(f"/{profile}/checkout", json={"amount": 45}, extensions=step(run_id, 1))
    key = derive_key(run_id, 1, "refund_order")
    assert raised.value.status == status
    assert raised.value.response.json()["code"] == "idempotency_conflict"
    assert raised.value.detail  # ACP's message, UCP's content
    assert reasons.seen == []
    assert upstream.executions(key) == 1


def test_requests_and_async_httpx_raise_the_same(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    import asyncio

    import requests

    key = derive_key(run_id, 2, "refund_order")
    with requests.Session() as session:
        session.mount(proxy.url, IdempotencyAdapter(**FAST))  # type: ignore[arg-type]
        headers = {**CALLER, "Idempotency-Key": key}
        assert session.post(f"{proxy.url}/ucp/checkout", json={"a": 1}, headers=headers).ok
        with pytest.raises(KeyReusedError) as raised:
            session.post(f"{proxy.url}/ucp/checkout", json={"a": 2}, headers=headers)
    assert raised.value.status == 409
    assert upstream.executions(key) == 1

    async_key = derive_key(run_id, 3, "refund_order")

    async def send_twice() -> None:
        transport = AsyncIdempotencyTransport(**FAST)  # type: ignore[arg-type]
        headers = {**CALLER, "Idempotency-Key": async_key}
        async with httpx.AsyncClient(base_url=proxy.url, transport=transport) as http:
            await http.post("/acp/checkout", json={"a": 3}, headers=headers)
            await http.post("/acp/checkout", json={"a": 4}, headers=headers)

    with pytest.raises(KeyReusedError) as async_raised:
        asyncio.run(send_twice())
    assert async_raised.value.status == 422
    assert upstream.executions(async_key) == 1


@pytest.mark.parametrize("profile", ["acp", "ucp"])
def test_an_in_flight_409_is_waited_out_and_the_first_answer_replayed(
    proxy: ProxyProcess, upstream: Upstream, run_id: str, profile: str
) -> None:
    key = derive_key(run_id, 4, "refund_order")
    first: list[httpx.Response] = []
    # Another worker already sends this action, without the helper; it takes 1.5 s upstream.
    sender = threading.Thread(
        target=lambda: first.append(
            httpx.post(
                f"{proxy.url}/{profile}/slow-first/checkout",
                json={"amount": 7},
                headers={**CALLER, "Idempotency-Key": key},
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
        response = http.post(
            f"/{profile}/slow-first/checkout", json={"amount": 7}, extensions=step(run_id, 4)
        )
    sender.join()
    assert response.status_code == 201
    assert response.json() == first[0].json()
    assert idempotency_of(response).replayed is True
    assert reasons.reasons and set(reasons.reasons) == {"in-flight"}
    assert all(info.status == 409 for info in reasons.seen)
    assert upstream.executions(key) == 1
