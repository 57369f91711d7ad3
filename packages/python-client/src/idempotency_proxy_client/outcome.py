"""What the proxy said about an answer: replayed or not, its outcome, how long its key lives."""

from __future__ import annotations

import email.utils
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

#: The proxy's replay marker unless its ``replayedHeader`` setting renames it.
DEFAULT_REPLAYED_HEADER = "Idempotent-Replayed"
#: ``unknown``: the upstream may or may not have acted; ``reconciled``: the proxy asked the upstream
#: and the answer is the upstream's record of what happened.
OUTCOME_HEADER = "Idempotency-Outcome"
#: The HTTP date after which the proxy forgets the key (a retry after it runs again).
EXPIRES_HEADER = "Idempotency-Expires"

Outcome = Literal["unknown", "reconciled"]

#: Where a request names its run, step and tool (httpx ``extensions``), and where a response
#: carries its :class:`IdempotencyInfo` (httpx ``response.extensions``, requests
#: ``response.idempotency``).
EXTENSION = "idempotency"


@dataclass(frozen=True)
class IdempotencyInfo:
    """How the proxy answered one logical request, across the client's own attempts."""

    #: The idempotency key every attempt carried.
    key: str
    #: True when the answer came from the proxy's store (``Idempotent-Replayed: true``): the
    #: request ran earlier, in a lost attempt of this call or in an earlier call with this key.
    replayed: bool
    #: ``"unknown"`` (the upstream may have acted: check it before doing anything else),
    #: ``"reconciled"`` (the proxy checked with the upstream), or ``None``.
    outcome: Outcome | None
    #: When the proxy forgets the key (``Idempotency-Expires``), if it said; a retry after that runs
    #: the action again.
    expires: datetime | None
    #: Attempts made, the last included.
    attempts: int


def read_info(
    headers: Mapping[str, str],
    key: str,
    attempts: int,
    replayed_header: str = DEFAULT_REPLAYED_HEADER,
) -> IdempotencyInfo:
    """Reads the proxy's headers (any case-insensitive mapping: httpx's or requests')."""
    return IdempotencyInfo(
        key=key,
        replayed=_word(headers.get(replayed_header)) == "true",
        outcome=parse_outcome(headers.get(OUTCOME_HEADER)),
        expires=parse_http_date(headers.get(EXPIRES_HEADER)),
        attempts=attempts,
    )


def parse_outcome(value: str | None) -> Outcome | None:
    word = _word(value)
    if word == "unknown":
        return "unknown"
    if word == "reconciled":
        return "reconciled"
    return None


def parse_http_date(value: str | None) -> datetime | None:
    """An HTTP date (RFC 9110 section 5.6.7) as an aware datetime; ``None`` if absent or bad."""
    if value is None:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo is not None else None


def _word(value: str | None) -> str | None:
    return None if value is None else value.strip().lower()


def idempotency_of(response: Any) -> IdempotencyInfo:
    """The :class:`IdempotencyInfo` of an httpx or requests response that came through this
    package's transport or adapter.

    A response that did not is read from its own headers, as one attempt with its request's key.
    """
    extensions = getattr(response, "extensions", None)
    for info in (
        extensions.get(EXTENSION) if isinstance(extensions, Mapping) else None,
        getattr(response, EXTENSION, None),
    ):
        if isinstance(info, IdempotencyInfo):
            return info
    request = getattr(response, "request", None)
    request_headers = getattr(request, "headers", None) or {}
    return read_info(response.headers, request_headers.get("Idempotency-Key") or "", 1)
