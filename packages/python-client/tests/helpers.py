"""Small helpers shared by the tests: an idempotency extension, and inner transports with faults."""

from __future__ import annotations

from typing import Any

import httpx

from idempotency_proxy_client import RetryInfo


def step(run_id: str, number: int, tool: str = "refund_order") -> dict[str, Any]:
    return {"idempotency": {"run_id": run_id, "step": number, "tool": tool}}


#: Fast retries for tests: the proxy is local, so waits can be short.
FAST = {"base_delay": 0.05, "max_delay": 0.2, "max_attempts": 40}


class Reasons:
    """An ``on_retry`` that records why each attempt was retried."""

    def __init__(self) -> None:
        self.seen: list[RetryInfo] = []

    def __call__(self, info: RetryInfo) -> None:
        self.seen.append(info)

    @property
    def reasons(self) -> list[str]:
        return [info.reason for info in self.seen]


class RefusesFirst(httpx.BaseTransport):
    """Fails the first send as a refused connection would (nothing sent), then sends for real."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.calls = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls == 1:
            raise httpx.ConnectError("connection refused (injected)", request=request)
        return self.inner.handle_request(request)


class LosesFirstAnswer(httpx.BaseTransport):
    """Sends the first request for real, then drops its answer as a reset connection would: the
    upstream ran, the client never heard. Later sends go through."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.calls = 0
        #: The key header of every send.
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        self.keys.append(request.headers.get("idempotency-key"))
        response = self.inner.handle_request(request)
        if self.calls == 1:
            response.read()
            response.close()
            raise httpx.ReadError(
                "connection reset after the request was sent (injected)", request=request
            )
        return response


class AsyncLosesFirstAnswer(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.calls = 0
        self.keys: list[str | None] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        self.keys.append(request.headers.get("idempotency-key"))
        response = await self.inner.handle_async_request(request)
        if self.calls == 1:
            await response.aread()
            await response.aclose()
            raise httpx.ReadError(
                "connection reset after the request was sent (injected)", request=request
            )
        return response
