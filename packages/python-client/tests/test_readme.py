"""The README's examples run as written, against the real proxy."""

from __future__ import annotations

import contextlib
import io
import secrets
from typing import Any

from idempotency_proxy_client import business_key, derive_key

from proxy import ProxyProcess
from readme import example
from upstream import Upstream


def run(code: str) -> tuple[dict[str, Any], str]:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), namespace)
    return namespace, out.getvalue()


def test_the_seed_flow_runs_the_refund_once_however_often_it_is_sent(
    proxy: ProxyProcess, upstream: Upstream
) -> None:
    namespace, printed = run(example("seed-flow", proxy.url))
    key = derive_key(namespace["run_id"], 4, "refund_order")
    assert printed.startswith("201 IdempotencyInfo(key=" + repr(key))
    # The agent sends the same step again (a retry after a crash): a replay, not a second refund.
    again = namespace["agent"].post(
        "/refunds", json=namespace["args"], extensions=namespace["step"]
    )
    assert again.headers["idempotent-replayed"] == "true"
    assert upstream.executions(key) == 1


def test_a_wrapped_tool_call_keeps_its_key_across_retries(
    proxy: ProxyProcess, upstream: Upstream
) -> None:
    namespace, _ = run(example("tool-wrapping", proxy.url))
    refund_order = namespace["refund_order"]
    call_id = f"call_{secrets.token_hex(4)}"
    # A plain call stands in for the framework's (LangChain's @tool, the Agents SDK's
    # @function_tool): it passes the tool call's id, the same on every retry of that call.
    first = refund_order("ord_42", 40, tool_call_id=call_id)
    retried = refund_order("ord_42", 40, tool_call_id=call_id)
    other_call = refund_order("ord_42", 40, tool_call_id=call_id + "b")
    key = business_key(["refund_order", call_id])
    assert first["key"] == retried["key"] == key
    assert first == retried
    assert upstream.executions(key) == 1
    assert upstream.executions(business_key(["refund_order", call_id + "b"])) == 1
    assert other_call["key"] != key
    assert refund_order.__doc__ == "Refund an order."  # what a framework shows the model
