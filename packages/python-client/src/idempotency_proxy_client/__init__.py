"""The agent-side helper of idempotency-proxy for Python: one key per logical action, kept across
retries; 409s waited out; replays and unknown outcomes told.

The httpx transports and the requests adapter load their HTTP library only when first used, so
this package works with either one installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import IdempotencyError, KeyReusedError, UnknownOutcomeError
from .exchange import DEFAULT_KEY_HEADER, IdempotencyOptions, RetryInfo
from .keys import DEFAULT_KEY_NAMESPACE, business_key, derive_key
from .outcome import (
    DEFAULT_REPLAYED_HEADER,
    EXPIRES_HEADER,
    OUTCOME_HEADER,
    IdempotencyInfo,
    Outcome,
    idempotency_of,
)

if TYPE_CHECKING:
    from .httpx_transport import AsyncIdempotencyTransport, IdempotencyTransport
    from .requests_adapter import IdempotencyAdapter

__all__ = [
    "DEFAULT_KEY_HEADER",
    "DEFAULT_KEY_NAMESPACE",
    "DEFAULT_REPLAYED_HEADER",
    "EXPIRES_HEADER",
    "OUTCOME_HEADER",
    "AsyncIdempotencyTransport",
    "IdempotencyAdapter",
    "IdempotencyError",
    "IdempotencyInfo",
    "IdempotencyOptions",
    "IdempotencyTransport",
    "KeyReusedError",
    "Outcome",
    "RetryInfo",
    "UnknownOutcomeError",
    "business_key",
    "derive_key",
    "idempotency_of",
]

#: name -> (module, the extra that installs its HTTP library)
_LAZY = {
    "IdempotencyTransport": ("httpx_transport", "httpx"),
    "AsyncIdempotencyTransport": ("httpx_transport", "httpx"),
    "IdempotencyAdapter": ("requests_adapter", "requests"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, extra = _LAZY[name]
    from importlib import import_module

    try:
        return getattr(import_module(f".{module}", __name__), name)
    except ModuleNotFoundError as error:
        raise ImportError(
            f"{name} needs {extra}: pip install 'idempotency-proxy-client[{extra}]'"
        ) from error
