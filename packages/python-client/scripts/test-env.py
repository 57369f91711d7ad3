#!/usr/bin/env python3
"""Makes (once) and prints the Python environment the client's tests run in.

A venv in the user's cache dir, named by a hash of requirements-test.txt and the Python version, so
a change to either makes a new one and every run after reuses it. Packages come from pip's
configured index; if that fails and this runs as root with apt-get, Debian's python3-* packages are
installed and the venv sees them (--system-site-packages). Built under a temporary name and renamed
when complete, so concurrent runs never see a half-made venv (only ``python -m`` is used in it:
console scripts keep the temporary path in their shebang).

Prints the venv's python as the last line of stdout. Used by .ci/run (to install up front) and by
test/integration/python-client.test.ts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
REQUIREMENTS = HERE / "requirements-test.txt"
DEBIAN_PACKAGES = [
    "python3-venv",
    "python3-pytest",
    "python3-httpx",
    "python3-requests",
    "python3-hatchling",
    "mypy",
]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = Path(base) / "idempotency-proxy"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root):
            return root
    except OSError:
        # No writable home (a CI user without one): a per-user directory under the temp dir.
        fallback = Path(tempfile.gettempdir()) / f"idempotency-proxy-{os.getuid()}"
        fallback.mkdir(mode=0o700, exist_ok=True)
        return fallback


def env_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def run(*args: str | Path) -> None:
    # Progress on stderr: stdout's last line is the answer.
    subprocess.run([str(a) for a in args], check=True, stdout=sys.stderr)


def make(target: Path, python: str, system_site: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        run(python, "-m", "venv", *(["--system-site-packages"] if system_site else []), work)
        if not system_site:
            # One retry, not pip's five: an index that is not there at all (no DNS, no route) is
            # otherwise retried with backoff for every package before the next index is asked.
            run(
                env_python(work), "-m", "pip", "install", "-q", "--retries", "1", "-r", REQUIREMENTS
            )
        try:
            work.rename(target)
        except OSError:
            if not env_python(target).exists():  # not another run that won the race
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + sys.version.encode()).hexdigest()[:16]
    target = cache_root() / f"python-client-test-env-{digest}"
    if not env_python(target).exists():
        try:
            make(target, sys.executable, system_site=False)
        except subprocess.CalledProcessError as pip_failed:
            if os.geteuid() != 0 or shutil.which("apt-get") is None:
                print(
                    f"could not install {REQUIREMENTS.name} from pip's index ({pip_failed}), and "
                    "the fallback needs root and apt-get: apt-get install "
                    + " ".join(DEBIAN_PACKAGES),
                    file=sys.stderr,
                )
                return 1
            print("pip's index failed: falling back to Debian's packages", file=sys.stderr)
            run("apt-get", "install", "-y", "-qq", *DEBIAN_PACKAGES)
            target = target.with_name(target.name + "-debian")
            if not env_python(target).exists():
                make(target, "/usr/bin/python3", system_site=True)
    print(env_python(target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
