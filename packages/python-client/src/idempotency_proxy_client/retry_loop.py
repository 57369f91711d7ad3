"""The retry loop itself: once for blocking libraries (httpx's sync transport, requests), once for
async ones. Each library says how to send, read, close and classify; the Exchange decides."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TypeVar

from .exchange import Exchange
from .outcome import IdempotencyInfo


class Answer(Protocol):
    """What the loop reads of a response: httpx's and requests' responses both have these."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


AnswerT = TypeVar("AnswerT", bound=Answer)


def send_with_retries(
    exchange: Exchange,
    send: Callable[[], AnswerT],
    *,
    reason_to_retry: Callable[[Exception], str | None],
    read_body: Callable[[AnswerT], bytes],
    close: Callable[[AnswerT], None],
) -> tuple[AnswerT, IdempotencyInfo]:
    """Sends until the answer is final; re-raises the last error when no attempt got one.

    ``reason_to_retry``: ``"timeout"`` or ``"connection-error"`` for a failure after which the
    request may or may not have reached the proxy, ``None`` for one another attempt cannot change.
    """
    while True:
        exchange.begin()
        try:
            response = send()
        except Exception as error:
            reason = reason_to_retry(error)
            delay = None if reason is None else exchange.retry_after_error(error, reason)
            if delay is None:
                raise
            time.sleep(delay)
            continue
        delay = exchange.retry_after_response(response.status_code, response.headers)
        if delay is None:
            return response, _conclude(exchange, response, read_body)
        close(response)
        time.sleep(delay)


async def asend_with_retries(
    exchange: Exchange,
    send: Callable[[], Awaitable[AnswerT]],
    *,
    reason_to_retry: Callable[[Exception], str | None],
    read_body: Callable[[AnswerT], Awaitable[bytes]],
    close: Callable[[AnswerT], Awaitable[None]],
    sleep: Callable[[float], Awaitable[None]],
) -> tuple[AnswerT, IdempotencyInfo]:
    """:func:`send_with_retries` for async libraries; ``sleep`` is the event loop's."""
    while True:
        exchange.begin()
        try:
            response = await send()
        except Exception as error:
            reason = reason_to_retry(error)
            delay = None if reason is None else exchange.retry_after_error(error, reason)
            if delay is None:
                raise
            await sleep(delay)
            continue
        delay = exchange.retry_after_response(response.status_code, response.headers)
        if delay is None:
            body = None
            if exchange.needs_body(response.status_code, response.headers):
                body = await read_body(response)
            return response, exchange.conclude(
                response.status_code, response.headers, body, response
            )
        await close(response)
        await sleep(delay)


def _conclude(
    exchange: Exchange, response: AnswerT, read_body: Callable[[AnswerT], bytes]
) -> IdempotencyInfo:
    body = None
    if exchange.needs_body(response.status_code, response.headers):
        body = read_body(response)
    return exchange.conclude(response.status_code, response.headers, body, response)
