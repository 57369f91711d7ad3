"""An outer retry layer (what httpx-retries does) resending the very request the idempotency
transport keyed: the key lives on the request, so every resend carries it and the action runs once.
(httpx-retries itself is not installable from this machine's index, so a minimal one stands in.)"""

from __future__ import annotations

import time

import httpx

from idempotency_proxy_client import IdempotencyTransport, idempotency_of

from proxy import ProxyProcess
from upstream import Upstream


class ResendingTransport(httpx.BaseTransport):
    """Resends the same request on a transport error or a 409, as a generic retry layer would."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(50):
            self.keys.append(request.headers.get("idempotency-key"))
            try:
                response = self.inner.handle_request(request)
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            if response.status_code != 409:
                return response
            response.close()
            time.sleep(0.1)
        raise AssertionError("no final answer after 50 sends")


def test_an_outer_retry_layer_resends_the_same_key(
    proxy: ProxyProcess, upstream: Upstream, run_id: str
) -> None:
    outer = ResendingTransport(IdempotencyTransport(max_attempts=1))
    with httpx.Client(base_url=proxy.url, transport=outer) as http:
        response = http.post(f"/slow-first/{run_id}", json={"amount": 1}, timeout=0.4)
    key = idempotency_of(response).key
    assert response.status_code == 201
    assert len(outer.keys) >= 2
    # The first send is keyed inside; every resend already carries that key.
    assert outer.keys[0] is None and set(outer.keys[1:]) == {key}
    assert upstream.keys_seen(f"/slow-first/{run_id}") == [key]
