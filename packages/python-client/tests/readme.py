"""The README's tested examples: the python block after each ``<!-- test: NAME -->`` marker."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
README_PROXY = "http://localhost:8080"


def example(name: str, proxy_url: str) -> str:
    """The example's code, pointed at ``proxy_url`` instead of the README's proxy."""
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"<!-- test: {re.escape(name)} -->\n```python\n(.*?)\n```", text, re.S)
    if found is None:
        raise AssertionError(f"README.md has no python block marked <!-- test: {name} -->")
    code = found.group(1)
    assert README_PROXY in code, f"the {name} example does not name {README_PROXY}"
    return code.replace(README_PROXY, proxy_url)
