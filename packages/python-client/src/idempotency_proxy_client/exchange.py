"""One logical request's retry loop, without I/O: the httpx transports and the requests adapter
drive it, each with its own way to send, read and sleep.

    attempt 1 -- POST, key k -- times out (it may be running upstream)
    attempt 2 -- POST, key k -- 409 in flight, Retry-After: 59 -- wait min(59 s, max_delay)
    attempt 3 -- POST, key k -- 201, Idempotent-Replayed: true  -> replayed=True, attempts=3
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from .errors import (
    KEY_REUSED_CODES,
    MISMATCH_STATUSES,
    KeyReusedError,
    UnknownOutcomeError,
    problem_fields,
)
from .keys import DEFAULT_KEY_NAMESPACE, derive_key
from .outcome import DEFAULT_REPLAYED_HEADER, IdempotencyInfo, read_info
from .policy import Attempts, RetryPolicy, parse_retry_after, retry_reason

#: The header the key is sent in unless ``key_header`` says otherwise (the proxy's ``key.header``).
DEFAULT_KEY_HEADER = "Idempotency-Key"


@dataclass(frozen=True)
class RetryInfo:
    """What ``on_retry`` is told before each wait."""

    key: str
    method: str
    url: str
    #: The attempt that just failed, from 1.
    attempt: int
    #: ``connection-error``, ``timeout``, ``in-flight`` (409), ``rate-limited`` (429),
    #: ``unavailable`` (503) or ``gateway-error`` (502/504 with nothing sent upstream).
    reason: str
    #: The response status, when there was a response.
    status: int | None
    #: The exception, for ``connection-error`` and ``timeout``.
    error: BaseException | None
    #: The wait, in seconds, before the next attempt.
    delay: float


class IdempotencyOptions(TypedDict, total=False):
    """The keyword options of the transports and the adapter; all optional."""

    #: Attempts in all, the first included. Default 5.
    max_attempts: int
    #: Backoff base in seconds (full jitter). Default 0.25.
    base_delay: float
    #: Cap on every wait in seconds, ``Retry-After`` included. Default 5.
    max_delay: float
    #: Budget for the whole call in seconds; no wait starts that would end past it. Default none.
    max_elapsed: float | None
    #: Raise :class:`UnknownOutcomeError` for ``Idempotency-Outcome: unknown``. Default True.
    raise_on_unknown_outcome: bool
    #: The proxy route's ``key.header``. Default ``Idempotency-Key``.
    key_header: str
    #: The proxy's ``replayedHeader``. Default ``Idempotent-Replayed``.
    replayed_header: str
    #: The namespace of keys derived from ``run_id``/``step``/``tool``. Default: the package's.
    namespace: str
    #: Called before each wait, e.g. to log the key, attempt and reason. Must not raise.
    on_retry: Callable[[RetryInfo], None]


@dataclass(frozen=True)
class Settings:
    policy: RetryPolicy
    raise_on_unknown_outcome: bool
    key_header: str
    replayed_header: str
    namespace: str
    on_retry: Callable[[RetryInfo], None] | None


def settings_from(options: IdempotencyOptions) -> Settings:
    unknown = set(options) - set(IdempotencyOptions.__annotations__)
    if unknown:
        raise TypeError(
            f"unknown option(s) {sorted(unknown)}; the options are "
            f"{sorted(IdempotencyOptions.__annotations__)}"
        )
    defaults = RetryPolicy()
    return Settings(
        policy=RetryPolicy(
            max_attempts=options.get("max_attempts", defaults.max_attempts),
            base_delay=options.get("base_delay", defaults.base_delay),
            max_delay=options.get("max_delay", defaults.max_delay),
            max_elapsed=options.get("max_elapsed", defaults.max_elapsed),
        ),
        raise_on_unknown_outcome=options.get("raise_on_unknown_outcome", True),
        key_header=options.get("key_header", DEFAULT_KEY_HEADER),
        replayed_header=options.get("replayed_header", DEFAULT_REPLAYED_HEADER),
        namespace=options.get("namespace", DEFAULT_KEY_NAMESPACE),
        on_retry=options.get("on_retry"),
    )


#: The fields ``extensions={"idempotency": {...}}`` may hold.
_STEP_FIELDS = frozenset({"run_id", "step", "tool", "namespace"})


def choose_key(header: str | None, step: object, namespace: str) -> str:
    """The request's key: its header if set, else derived from ``step`` (``run_id``, ``step``,
    ``tool``), else a random one. The caller stores it on the request, so every retry, this
    package's or an outer layer's, sends the same key."""
    if step is None:
        return header if header is not None else str(uuid.uuid4())
    if not isinstance(step, Mapping) or not {"run_id", "step", "tool"} <= set(step):
        raise TypeError(
            'extensions["idempotency"] must be a dict with "run_id", "step" and "tool" '
            f'(and optionally "namespace"), got {step!r}'
        )
    extra = set(step) - _STEP_FIELDS
    if extra:
        raise TypeError(f'extensions["idempotency"] has unknown field(s) {sorted(extra)}')
    derived = derive_key(
        step["run_id"], step["step"], step["tool"], step.get("namespace", namespace)
    )
    if header is not None and header != derived:
        raise ValueError(
            f"the request carries the key {header!r} and asks for the derived key {derived!r}; "
            "pass the key once"
        )
    return derived


class Exchange:
    """The loop's decisions for one request: when to retry, how long to wait, what to raise."""

    def __init__(self, settings: Settings, method: str, url: str, key: str) -> None:
        self.settings = settings
        self.method = method
        self.url = url
        self.key = key
        self.attempts = Attempts(settings.policy, random.Random())

    def begin(self) -> None:
        self.attempts.start()

    def retry_after_error(self, error: BaseException, reason: str) -> float | None:
        """The wait before retrying a failed send, or ``None``: give up and re-raise ``error``."""
        delay = self.attempts.wait_before_next(None)
        if delay is not None:
            self._notify(reason, None, error, delay)
        return delay

    def retry_after_response(self, status: int, headers: Mapping[str, str]) -> float | None:
        """The wait before retrying this answer, or ``None`` when it is the one to return."""
        info = self.info(headers)
        reason = retry_reason(status, info.replayed, info.outcome, "retry-after" in headers)
        if reason is None:
            return None
        delay = self.attempts.wait_before_next(parse_retry_after(headers.get("retry-after")))
        if delay is not None:
            self._notify(reason, status, None, delay)
        return delay

    def info(self, headers: Mapping[str, str]) -> IdempotencyInfo:
        return read_info(headers, self.key, self.attempts.count, self.settings.replayed_header)

    def needs_body(self, status: int, headers: Mapping[str, str]) -> bool:
        """True when :meth:`conclude` must see the body: to tell the proxy's 422 (or a UCP
        route's 409) from the upstream's, or to put the detail of an unknown outcome in the
        exception."""
        info = self.info(headers)
        if status in MISMATCH_STATUSES and not info.replayed:
            return True
        return info.outcome == "unknown" and self.settings.raise_on_unknown_outcome

    def conclude(
        self, status: int, headers: Mapping[str, str], body: bytes | None, response: Any
    ) -> IdempotencyInfo:
        """The final answer's info; raises for a key reused with another payload, and for an
        unknown outcome unless asked not to."""
        info = self.info(headers)
        code, detail = problem_fields(headers.get("content-type"), body or b"")
        if status in MISMATCH_STATUSES and not info.replayed and code in KEY_REUSED_CODES:
            raise KeyReusedError(key=self.key, status=status, detail=detail, response=response)
        if info.outcome == "unknown" and self.settings.raise_on_unknown_outcome:
            raise UnknownOutcomeError(
                info=info,
                status=status,
                detail=detail,
                retry_after=parse_retry_after(headers.get("retry-after")),
                response=response,
            )
        return info

    def _notify(
        self, reason: str, status: int | None, error: BaseException | None, delay: float
    ) -> None:
        if self.settings.on_retry is not None:
            self.settings.on_retry(
                RetryInfo(
                    key=self.key,
                    method=self.method,
                    url=self.url,
                    attempt=self.attempts.count,
                    reason=reason,
                    status=status,
                    error=error,
                    delay=delay,
                )
            )
