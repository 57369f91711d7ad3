"""A requests ``HTTPAdapter`` that gives every unsafe request one key and retries it with that key.

requests has no per-request extensions: send the key derived with :func:`derive_key` in the header,
or let the adapter make a random one per request::

    session = requests.Session()
    session.mount("http://proxy:8080/", IdempotencyAdapter())
    session.post(url, json=args, headers={"Idempotency-Key": derive_key(run_id, 4, "refund_order")})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from requests import PreparedRequest, Response
from requests.adapters import HTTPAdapter
from requests.exceptions import ConnectionError, SSLError, Timeout

from .exchange import Exchange, IdempotencyOptions, choose_key, settings_from
from .outcome import EXTENSION
from .policy import UNSAFE_METHODS
from .retry_loop import send_with_retries

if TYPE_CHECKING:
    from typing_extensions import Unpack


class IdempotencyAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` that keys unsafe requests and retries them with the same key.

    ``options``: see :class:`IdempotencyOptions`; ``adapter_options``: passed to ``HTTPAdapter``
    (``pool_connections``, ``pool_maxsize``...). Its own ``max_retries`` stays 0: retrying a POST
    at the urllib3 level would not know about keys or 409s.
    """

    def __init__(
        self,
        *,
        adapter_options: Mapping[str, Any] | None = None,
        **options: Unpack[IdempotencyOptions],
    ) -> None:
        super().__init__(**dict(adapter_options or {}))
        self._settings = settings_from(options)

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float | None, float | None] | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        proxies: dict[str, str] | None = None,
    ) -> Response:
        def attempt() -> Response:
            return super(IdempotencyAdapter, self).send(
                request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
            )

        if (request.method or "").upper() not in UNSAFE_METHODS:
            return attempt()
        if request.body is not None and not isinstance(request.body, (bytes, str)):
            raise TypeError(
                "IdempotencyAdapter resends the same body on every attempt, so it must be bytes or "
                f"str, not {type(request.body).__name__} (a file or generator can be read once): "
                "pass data=the_bytes or json=..."
            )
        settings = self._settings
        header = request.headers.get(settings.key_header)
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        key = choose_key(header, None, settings.namespace)
        request.headers[settings.key_header] = key
        exchange = Exchange(settings, request.method or "", request.url or "", key)
        response, info = send_with_retries(
            exchange,
            attempt,
            reason_to_retry=_reason_to_retry,
            read_body=lambda answer: answer.content,
            close=Response.close,
        )
        setattr(response, EXTENSION, info)
        return response


def _reason_to_retry(error: Exception) -> str | None:
    # A TLS failure is a ConnectionError too, but another attempt cannot change it.
    if isinstance(error, SSLError):
        return None
    if isinstance(error, Timeout):
        return "timeout"
    if isinstance(error, ConnectionError):
        return "connection-error"
    return None
