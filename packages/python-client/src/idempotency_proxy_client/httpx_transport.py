"""httpx transports that give every unsafe request one key and retry it with that key.

Wrap httpx's own transport (or any other, httpx-retries' included)::

    client = httpx.Client(transport=IdempotencyTransport(), timeout=10)
    step = {"idempotency": {"run_id": run_id, "step": 4, "tool": "refund_order"}}
    client.post(url, json=args, extensions=step)

Safe methods (GET, HEAD, OPTIONS, TRACE) pass through untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import httpx

from .exchange import Exchange, IdempotencyOptions, Settings, choose_key, settings_from
from .outcome import EXTENSION, IdempotencyInfo
from .policy import UNSAFE_METHODS
from .retry_loop import asend_with_retries, send_with_retries

if TYPE_CHECKING:
    from typing_extensions import Unpack


class IdempotencyTransport(httpx.BaseTransport):
    """An ``httpx.BaseTransport`` that keys unsafe requests and retries them with the same key.

    ``transport``: the transport to send through (default ``httpx.HTTPTransport()``). ``options``:
    see :class:`IdempotencyOptions`.
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        **options: Unpack[IdempotencyOptions],
    ) -> None:
        self._transport = transport if transport is not None else httpx.HTTPTransport()
        self._settings = settings_from(options)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method not in UNSAFE_METHODS:
            return self._transport.handle_request(request)
        exchange = _prepare(request, self._settings)
        # Buffered once, so every attempt sends these bytes (a generator body could be read once).
        request.read()
        response, info = send_with_retries(
            exchange,
            lambda: self._transport.handle_request(request),
            reason_to_retry=_reason_to_retry,
            read_body=httpx.Response.read,
            close=httpx.Response.close,
        )
        return _with_info(response, info)

    def close(self) -> None:
        self._transport.close()


class AsyncIdempotencyTransport(httpx.AsyncBaseTransport):
    """The ``httpx.AsyncBaseTransport`` twin of :class:`IdempotencyTransport` (asyncio or trio)."""

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        **options: Unpack[IdempotencyOptions],
    ) -> None:
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._settings = settings_from(options)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method not in UNSAFE_METHODS:
            return await self._transport.handle_async_request(request)
        exchange = _prepare(request, self._settings)
        await request.aread()
        response, info = await asend_with_retries(
            exchange,
            lambda: self._transport.handle_async_request(request),
            reason_to_retry=_reason_to_retry,
            read_body=httpx.Response.aread,
            close=httpx.Response.aclose,
            sleep=anyio.sleep,
        )
        return _with_info(response, info)

    async def aclose(self) -> None:
        await self._transport.aclose()


def _prepare(request: httpx.Request, settings: Settings) -> Exchange:
    header = request.headers.get(settings.key_header)
    key = choose_key(header, request.extensions.get(EXTENSION), settings.namespace)
    # On the request itself: an outer retry layer (httpx-retries) resends this very request, key
    # included.
    request.headers[settings.key_header] = key
    return Exchange(settings, request.method, str(request.url), key)


def _with_info(response: httpx.Response, info: IdempotencyInfo) -> httpx.Response:
    response.extensions = {**response.extensions, EXTENSION: info}
    return response


def _reason_to_retry(error: Exception) -> str | None:
    # After these the request may or may not have reached the proxy: resent with the same key.
    # Not UnsupportedProtocol, ProxyError or a decoding error: another attempt cannot change those.
    if isinstance(error, httpx.TimeoutException):
        return "timeout"
    if isinstance(error, (httpx.NetworkError, httpx.RemoteProtocolError)):
        return "connection-error"
    return None
