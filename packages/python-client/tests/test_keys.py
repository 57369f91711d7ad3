"""derive_key and business_key against the vectors the TypeScript client is tested against."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from idempotency_proxy_client import DEFAULT_KEY_NAMESPACE, business_key, derive_key


def test_the_default_namespace_is_the_typescript_clients(vectors: dict[str, Any]) -> None:
    assert vectors["defaultNamespace"] == DEFAULT_KEY_NAMESPACE
    assert (
        str(uuid.uuid5(uuid.NAMESPACE_URL, "urn:idempotency-proxy:client")) == DEFAULT_KEY_NAMESPACE
    )


def test_uuid5_known_answers_hold_here(vectors: dict[str, Any]) -> None:
    for v in vectors["uuidV5"]:
        assert str(uuid.uuid5(uuid.UUID(v["namespace"]), v["name"])) == v["key"]


def test_derive_key_matches_every_step_vector(vectors: dict[str, Any]) -> None:
    assert len(vectors["stepKeys"]) >= 5
    for v in vectors["stepKeys"]:
        namespace = v.get("namespace", DEFAULT_KEY_NAMESPACE)
        assert derive_key(v["runId"], v["step"], v["tool"], namespace) == v["key"], v


def test_business_key_matches_every_business_vector(vectors: dict[str, Any]) -> None:
    assert len(vectors["businessKeys"]) >= 5
    for v in vectors["businessKeys"]:
        namespace = v.get("namespace", DEFAULT_KEY_NAMESPACE)
        assert business_key(v["parts"], namespace) == v["key"], v


def test_a_uuid_namespace_object_gives_the_same_key() -> None:
    ns = "6f1c2a0e-3b7d-4c55-9a1e-2d8f0b7c4e11"
    assert derive_key("r", 1, "t", uuid.UUID(ns)) == derive_key("r", 1, "t", ns)


def test_another_run_step_or_tool_gives_another_key() -> None:
    keys = {
        derive_key("run-1", 3, "refund_order"),
        derive_key("run-2", 3, "refund_order"),
        derive_key("run-1", 4, "refund_order"),
        derive_key("run-1", 3, "send_email"),
    }
    assert len(keys) == 4


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("", 0, "t"), ValueError, "run_id must be a non-empty str"),
        (("a:b", 0, "t"), ValueError, 'run_id must not contain ":"'),
        (("r", -1, "t"), ValueError, "step must be an int >= 0, got -1"),
        (("r", 1.5, "t"), TypeError, "step must be an int"),
        (("r", True, "t"), TypeError, "step must be an int"),
        (("r", "1", "t"), TypeError, "step must be an int"),
        (("r", 0, ""), ValueError, "tool must be a non-empty str"),
        (("r", 0, None), TypeError, "tool must be a non-empty str"),
        (("r\ud800", 0, "t"), ValueError, "lone surrogate"),
    ],
)
def test_derive_key_refuses_bad_input(
    args: tuple[Any, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        derive_key(*args)


def test_derive_key_refuses_a_namespace_that_is_not_a_uuid() -> None:
    with pytest.raises(ValueError, match="namespace must be a UUID"):
        derive_key("r", 0, "t", "ns")


@pytest.mark.parametrize(
    ("parts", "error"),
    [
        ("", ValueError),
        ([], TypeError),
        (["refund", ""], ValueError),
        (["refund", 2**53], ValueError),
        (["refund", None], TypeError),
        (["refund", 1.5], TypeError),
        (42, TypeError),
    ],
)
def test_business_key_refuses_bad_parts(parts: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        business_key(parts)
