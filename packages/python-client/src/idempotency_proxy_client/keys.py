"""Deterministic idempotency keys for agent actions (UUIDv5, RFC 9562 section 5.5).

The same action gives the same key on every attempt, restart and replay; a different action gives a
different key. The derivations are the TypeScript client's ``stepKey`` and ``businessKey``, byte for
byte, so agents in either language agree on a key.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

#: The namespace :func:`derive_key` and :func:`business_key` use unless given another:
#: ``uuid5(NAMESPACE_URL, 'urn:idempotency-proxy:client')``. Fixed forever: changing it would change
#: every derived key, and a retry that spans an upgrade would run its action a second time.
DEFAULT_KEY_NAMESPACE = "57e1e5e4-793d-520e-84cb-fc284b261f6f"


def derive_key(
    run_id: str, step: int, tool: str, namespace: str | uuid.UUID = DEFAULT_KEY_NAMESPACE
) -> str:
    """The key of one agent step: UUIDv5 of ``f"{run_id}:{step}:{tool}"`` under ``namespace``.

    Every attempt at the same step (a retry after a timeout, a restarted worker, an orchestrator
    resuming from the top) derives the same key, so the proxy runs the call once and replays its
    answer to the others. Generate ``run_id`` once per run and keep it when the run resumes; save
    the tool arguments when the model emits them and resend those (another body under the same key
    is answered 422).

    Raises ``ValueError`` when ``run_id`` is empty or holds ``:``, ``step`` is negative, ``tool`` is
    empty, a string holds a lone surrogate, or ``namespace`` is not a UUID; ``TypeError`` for a
    value of the wrong type (``step`` must be an ``int``, not a ``bool`` or ``str``).
    """
    _require_text("run_id", run_id)
    if ":" in run_id:
        raise ValueError(
            'run_id must not contain ":" (it separates the parts of the derived name), '
            f"got {run_id!r}"
        )
    if not isinstance(step, int) or isinstance(step, bool):
        raise TypeError(f"step must be an int >= 0, got {step!r}")
    if step < 0:
        raise ValueError(f"step must be an int >= 0, got {step}")
    _require_text("tool", tool)
    return str(uuid.uuid5(_namespace(namespace), f"{run_id}:{step}:{tool}"))


def business_key(
    parts: str | Sequence[str | int], namespace: str | uuid.UUID = DEFAULT_KEY_NAMESPACE
) -> str:
    """The key of an action that must happen at most once per business object, whatever the step.

    A string is hashed as it is; a list as its JSON with integers written as strings
    (``["refund","order-123"]``), so no separator inside a part can make two lists collide. Add the
    run id for "once per run": ``business_key([run_id, "refund", order_id])``.
    """
    if isinstance(parts, str):
        _require_text("parts", parts)
        return str(uuid.uuid5(_namespace(namespace), parts))
    if not isinstance(parts, Sequence) or len(parts) == 0:
        raise TypeError("parts must be a non-empty str or a non-empty list of str and int")
    texts: list[str] = []
    for index, part in enumerate(parts):
        if isinstance(part, int) and not isinstance(part, bool):
            if abs(part) > _MAX_SAFE_INTEGER:
                # The TypeScript client refuses integers it cannot represent exactly.
                raise ValueError(f"parts[{index}] must be a safe integer or a str, got {part}")
            texts.append(str(part))
        else:
            texts.append(_require_text(f"parts[{index}]", part))
    name = json.dumps(texts, separators=(",", ":"), ensure_ascii=False)
    return str(uuid.uuid5(_namespace(namespace), name))


_MAX_SAFE_INTEGER = 2**53 - 1


def _require_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    if value == "":
        raise ValueError(f"{name} must be a non-empty str")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} must be well-formed Unicode: it holds a lone surrogate") from None
    return value


def _namespace(namespace: str | uuid.UUID) -> uuid.UUID:
    if isinstance(namespace, uuid.UUID):
        return namespace
    if isinstance(namespace, str) and len(namespace) == 36:
        try:
            return uuid.UUID(namespace)
        except ValueError:
            pass
    raise ValueError(f"namespace must be a UUID like {DEFAULT_KEY_NAMESPACE!r}, got {namespace!r}")
