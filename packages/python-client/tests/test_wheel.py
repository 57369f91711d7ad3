"""The package as users get it: a wheel and an sdist built with hatchling, the wheel installed alone
into a fresh venv, and the README's seed flow run from it against the proxy."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from proxy import ProxyProcess
from readme import example
from upstream import Upstream

PACKAGE_DIR = Path(__file__).resolve().parents[1]
MODULES = {
    "__init__.py",
    "errors.py",
    "exchange.py",
    "httpx_transport.py",
    "keys.py",
    "outcome.py",
    "policy.py",
    "py.typed",
    "retry_loop.py",
    "requests_adapter.py",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=PACKAGE_DIR,
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("idempotency_proxy_client-*.whl")
    (sdist,) = out.glob("idempotency_proxy_client-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_wheel_holds_the_typed_package_and_nothing_else(built: dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = wheel.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = wheel.read(metadata).decode()
    modules = {n.split("/", 1)[1] for n in names if n.startswith("idempotency_proxy_client/")}
    assert modules == MODULES
    assert not any(n.startswith(("tests/", "scripts/")) for n in names)
    assert "Requires-Python: >=3.10" in text
    assert "Provides-Extra: httpx" in text and "Provides-Extra: requests" in text
    # No dependency outside the extras.
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and all("extra ==" in line for line in requires), requires


def test_the_sdist_holds_the_sources_tests_and_readme(built: dict[str, Path]) -> None:
    with tarfile.open(built["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "src/idempotency_proxy_client/py.typed"} <= names
    assert "tests/test_wheel.py" in names


def test_the_installed_wheel_runs_the_seed_flow_once(
    built: dict[str, Path], proxy: ProxyProcess, upstream: Upstream, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(built["wheel"])],
        check=True,
        capture_output=True,
    )
    # httpx is this test environment's, reached by a .pth file, so the test needs no index; the
    # package itself comes only from the wheel.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = tmp_path / "seed_flow.py"
    script.write_text(
        example("seed-flow", proxy.url)
        + """
import json, idempotency_proxy_client as client
again = agent.post("/refunds", json=args, extensions=step)
print(json.dumps({"module": client.__file__, "run_id": run_id,
                  "replayed": [idempotency_of(response).replayed, idempotency_of(again).replayed]}))
"""
    )
    done = subprocess.run([str(python), str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed[0].startswith("201 IdempotencyInfo(")
    result = json.loads(printed[-1])
    assert result["module"].startswith(site), result["module"]
    assert result["replayed"] == [False, True]
    from idempotency_proxy_client import derive_key

    assert upstream.executions(derive_key(result["run_id"], 4, "refund_order")) == 1
