"""The exceptions an agent can act on: an unknown outcome, and a key reused with another payload."""

from __future__ import annotations

import json
from typing import Any

from .outcome import IdempotencyInfo


class IdempotencyError(Exception):
    """Base of this package's exceptions. ``key`` is the idempotency key of the request."""

    def __init__(self, message: str, *, key: str, status: int, detail: str | None, response: Any):
        super().__init__(message)
        self.key = key
        self.status = status
        #: The problem document's ``detail`` (RFC 9457), when the answer was one.
        self.detail = detail
        #: The httpx or requests response, its body already read.
        self.response = response


class UnknownOutcomeError(IdempotencyError):
    """The upstream got the request and then timed out or hung up: it may or may not have acted.

    The proxy stored this answer (``Idempotency-Outcome: unknown``) and will not forward the key
    again unless it can reconcile it with the upstream or an operator clears it. Check the upstream
    (look the refund up) before doing anything else. ``retry_after`` is the proxy's hint, in
    seconds, of when a retry with the same key may find the outcome reconciled.
    """

    def __init__(
        self,
        *,
        info: IdempotencyInfo,
        status: int,
        detail: str | None,
        retry_after: float | None,
        response: Any,
    ):
        super().__init__(
            f"outcome unknown (status {status}, key {info.key}): the upstream may or may not have "
            "acted; check it before doing anything else" + (f" ({detail})" if detail else ""),
            key=info.key,
            status=status,
            detail=detail,
            response=response,
        )
        self.info = info
        self.retry_after = retry_after


class KeyReusedError(IdempotencyError):
    """This key already belongs to a request with another payload: 422 from the proxy (problem+json,
    or the flat error of an ACP profile route), or 409 from a UCP profile route.

    Nothing was forwarded and the first request's record is untouched. Resend the arguments saved
    when the action was first attempted, or derive a new key for what is a new action.
    """

    def __init__(self, *, key: str, detail: str | None, response: Any, status: int = 422):
        super().__init__(
            f"idempotency key {key} was already used with a different request payload ({status}); "
            "resend the original arguments or use a new key for a new action"
            + (f": {detail}" if detail else ""),
            key=key,
            status=status,
            detail=detail,
            response=response,
        )


#: The proxy's problem ``code`` for a key reused with another fingerprint.
KEY_REUSED_CODE = "IDEMPOTENCY_KEY_REUSED"
#: The codes of a key reused with another payload: the proxy's, and the commerce protocols' (ACP
#: 422 and UCP 409 on a profile route).
KEY_REUSED_CODES = frozenset({KEY_REUSED_CODE, "idempotency_conflict"})
#: The statuses such an answer comes with.
MISMATCH_STATUSES = frozenset({409, 422})


def problem_fields(content_type: str | None, body: bytes) -> tuple[str | None, str | None]:
    """``(code, detail)`` of an RFC 9457 problem document, or of a commerce protocol's error (ACP's
    ``message``, UCP's ``content``); ``(None, None)`` for anything else."""
    if content_type is None or "json" not in content_type.lower():
        return None, None
    try:
        document = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(document, dict):
        return None, None
    code = document.get("code")
    detail = document.get("detail", document.get("message", document.get("content")))
    return (
        code if isinstance(code, str) else None,
        detail if isinstance(detail, str) else None,
    )
