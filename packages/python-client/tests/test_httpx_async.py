"""AsyncIdempotencyTransport against the real proxy: the same guarantees as the sync transport."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from idempotency_proxy_client import (
    AsyncIdempotencyTransport,
    KeyReusedError,
    UnknownOutcomeError,
    derive_key,
    idempotency_of,
)

from helpers import FAST, AsyncLosesFirstAnswer, Reasons, step
from proxy import ProxyProcess
from upstream import Upstream


def client(
    proxy: ProxyProcess, transport: httpx.AsyncBaseTransport | None = None, **options: object
) -> httpx.AsyncClient:
    settings = {**FAST, **options}
    return httpx.AsyncClient(
        base_url=proxy.url,
        transport=AsyncIdempotencyTransport(transport, **settings),  # type: ignore[arg-type]
        timeout=10,
    )


def test_concurrent_calls_of_one_step_execute_once(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    async def main() -> list[httpx.Response]:
        async with client(proxy) as http:
            return await asyncio.gather(
                *(
                    http.post("/slow-first/refunds", json={"amount": 5}, extensions=step(run_id, 1))
                    for _ in range(5)
                )
            )

    responses = asyncio.run(main())
    key = derive_key(run_id, 1, "refund_order")
    assert [r.status_code for r in responses] == [201] * 5
    assert len({r.content for r in responses}) == 1
    assert sorted(idempotency_of(r).replayed for r in responses) == [False] + [True] * 4
    assert upstream.executions(key) == 1


def test_a_timed_out_attempt_is_retried_with_its_key_and_runs_once(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    reasons = Reasons()

    async def main() -> httpx.Response:
        async with client(proxy, on_retry=reasons) as http:
            return await http.post(
                "/slow-first/refunds", json={"amount": 2}, extensions=step(run_id, 2), timeout=0.4
            )

    response = asyncio.run(main())
    assert response.status_code == 201
    assert idempotency_of(response).replayed is True
    assert reasons.reasons[0] == "timeout"
    assert upstream.executions(derive_key(run_id, 2, "refund_order")) == 1


def test_a_random_key_is_kept_when_the_answer_is_lost(
    proxy: ProxyProcess, upstream: Upstream
) -> None:
    inner = AsyncLosesFirstAnswer()

    async def main() -> httpx.Response:
        async with client(proxy, inner) as http:
            return await http.put("/accounts/a-1", json={"limit": 9})

    response = asyncio.run(main())
    key = inner.keys[0]
    assert key is not None and inner.keys == [key, key]
    assert idempotency_of(response).replayed is True
    assert upstream.executions(key) == 1


def test_a_changed_body_raises_key_reused(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    async def main() -> None:
        async with client(proxy) as http:
            await http.post("/refunds", json={"amount": 40}, extensions=step(run_id, 3))
            await http.post("/refunds", json={"amount": 45}, extensions=step(run_id, 3))

    with pytest.raises(KeyReusedError) as raised:
        asyncio.run(main())
    assert raised.value.key == derive_key(run_id, 3, "refund_order")
    assert upstream.executions(raised.value.key) == 1


def test_an_unknown_outcome_raises(proxy: ProxyProcess, upstream: Upstream, run_id: str) -> None:
    async def main() -> None:
        async with client(proxy) as http:
            await http.post("/unknown/refunds", json={"amount": 1}, extensions=step(run_id, 4))

    with pytest.raises(UnknownOutcomeError) as raised:
        asyncio.run(main())
    assert raised.value.info.outcome == "unknown"
    assert upstream.executions(raised.value.key) == 1
