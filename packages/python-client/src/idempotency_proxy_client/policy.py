"""Which answers are worth another attempt with the same key, and how long to wait first.

Shared by the httpx transports and the requests adapter; it mirrors the TypeScript client::

    answer                                       retry?  wait
    connection error / timeout                   yes     backoff (it may have run: same key)
    409 key in flight (with Retry-After)         yes     Retry-After <= max_delay, else backoff
    409 without Retry-After                      no      a UCP route's key reused: KeyReusedError
    429, 503                                     yes     Retry-After <= max_delay, else backoff
    502, 504 without Idempotency-Outcome         yes     Retry-After <= max_delay, else backoff
    an Idempotency-Outcome (unknown, reconciled) no      the proxy stored it: a retry replays it
    Idempotent-Replayed: true (any status)       no      the stored, final answer
    anything else                                no
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from dataclasses import dataclass

#: The methods that change something: only these get a key and retries of their own.
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

RETRYABLE_STATUSES = frozenset({409, 429, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry. Times are in seconds.

    ``max_attempts``: attempts in all, the first included. ``base_delay``: before retry *n* without
    a ``Retry-After``, a random wait in ``[0, min(max_delay, base_delay * 2**(n-1)))``.
    ``max_delay``: cap on every wait, ``Retry-After`` included (the proxy's 409 ``Retry-After`` is
    the lease left, an upper bound, so capping it polls for the answer sooner). ``max_elapsed``:
    no wait is started that would end past this budget for the whole call (``None``: no budget).
    """

    max_attempts: int = 5
    base_delay: float = 0.25
    max_delay: float = 5.0
    max_elapsed: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1, got {self.max_attempts!r}")
        for name in ("base_delay", "max_delay"):
            value: float = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.max_elapsed is not None and not self.max_elapsed > 0:
            raise ValueError(f"max_elapsed must be > 0 or None, got {self.max_elapsed!r}")

    def delay(self, attempt: int, retry_after: float | None, rand: float) -> float:
        """The wait after failed attempt ``attempt`` (from 1); ``rand`` is a number in [0, 1)."""
        if retry_after is not None:
            return min(retry_after, self.max_delay)
        return rand * min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))


def retry_reason(
    status: int, replayed: bool, outcome: str | None, retry_after_sent: bool = True
) -> str | None:
    """Why a response is worth another attempt, or ``None`` when it is the final answer.

    The proxy's in-flight 409 always carries ``Retry-After`` (so does ACP's
    ``idempotency_in_flight``); a 409 without it is final: on a UCP profile route, the key reused
    with another body.
    """
    if replayed or outcome is not None:
        return None
    if status == 409 and not retry_after_sent:
        return None
    return {
        409: "in-flight",
        429: "rate-limited",
        503: "unavailable",
        502: "gateway-error",
        504: "gateway-error",
    }.get(status)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` (RFC 9110 section 10.2.3) in seconds: delay-seconds or an HTTP-date."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class Attempts:
    """The retry loop's bookkeeping for one request: counts attempts and decides each wait."""

    def __init__(self, policy: RetryPolicy, rand: random.Random | None = None) -> None:
        self.policy = policy
        self.count = 0
        self._rand = rand or random.Random()
        self._started = time.monotonic()

    def start(self) -> None:
        self.count += 1

    def wait_before_next(self, retry_after: float | None) -> float | None:
        """The wait before the next attempt, or ``None`` when attempts or budget are spent."""
        if self.count >= self.policy.max_attempts:
            return None
        delay = self.policy.delay(self.count, retry_after, self._rand.random())
        budget = self.policy.max_elapsed
        if budget is not None and time.monotonic() - self._started + delay >= budget:
            return None
        return delay
