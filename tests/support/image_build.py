"""The container image for the tests: built once per session and base, run with ``buildah run``.

``tools/build-image`` builds the top-level Dockerfile with ``buildah bud --isolation chroot
--storage-driver vfs`` on a debootstrapped Debian bookworm base, with or without Debian's
python3-pip. ``make setup`` debootstraps the bases (``make image-bases``, minutes, once); the
session builds both images from the Dockerfile in the background as soon as it has collected
a test that needs them (those tests run after the long files, tests/conftest.py), and every
test module asks ``built()``, which waits for its base's build: each base is built at most
once per pytest process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from devenv.procs import children
from tests.conftest import unique

ROOT = Path(__file__).resolve().parents[2]
BASES = ("bookworm", "bookworm-pip")
TAGS = {"bookworm": "localhost/lagwatch:test", "bookworm-pip": "localhost/lagwatch:test-pip"}
BUILDAH = ["buildah", "--storage-driver", "vfs"]
RUN = ["run", "--isolation", "chroot", "--network", "host"]


def buildah(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # `make test` installs buildah; elsewhere deselect with -m "not image" rather than skip.
    assert shutil.which("buildah"), "buildah missing (apt-get install buildah)"
    r = subprocess.run([*BUILDAH, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"buildah {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


_BUILDS: dict[str, Future[dict[str, Any]]] = {}
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="image-build")  # one build at a time


def prebuild() -> None:
    """Start building every base in the background (no-op for a base already started)."""
    for base in BASES:
        if base not in _BUILDS:
            _BUILDS[base] = _POOL.submit(_build, base)


def built(base: str) -> dict[str, Any]:
    """The image on ``base`` (built once per session; the base rootfs is cached); its inspect JSON."""
    if base not in _BUILDS:
        _BUILDS[base] = _POOL.submit(_build, base)
    return _BUILDS[base].result()


def _stamp(base: str) -> Path:
    """Names the test run that last built ``base`` (pytest-xdist's id, shared by its workers)."""
    return ROOT / ".cache" / "image" / f"{base}.built-by"


def _build(base: str) -> dict[str, Any]:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    (ROOT / ".cache" / "image").mkdir(parents=True, exist_ok=True)
    # Held through the build (tools/build-image locks a file of its own): the other worker
    # waits, then finds the image built by this run.
    with open(ROOT / ".cache" / "image" / "tests.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if run is None or not _stamp(base).exists() or _stamp(base).read_text() != run:
            _build_now(base)
            if run is not None:
                _stamp(base).write_text(run)
    return json.loads(buildah("inspect", "--type", "image", TAGS[base]).stdout)


def _build_now(base: str) -> None:
    r = subprocess.run([str(ROOT / "tools" / "build-image"), "--base", base, TAGS[base]], cwd=ROOT,
                       capture_output=True, text=True, timeout=1700)
    assert r.returncode == 0, f"tools/build-image --base {base} exited {r.returncode}:\n" \
                              f"{(r.stdout + r.stderr)[-6000:]}"


@contextlib.contextmanager
def working_container(tag: str, prefix: str) -> Iterator[tuple[str, Path]]:
    """A working container of the image and the host path of its mounted root filesystem."""
    name = unique(prefix)
    buildah("from", "--pull=never", "--name", name, tag)
    try:
        yield name, Path(buildah("mount", name).stdout.strip())
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


def config(image: dict[str, Any]) -> dict[str, Any]:
    # Docker format: the OCI image config has no HEALTHCHECK.
    return image["Docker"]["config"]


def http_get(url: str, timeout: float = 5, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                    timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def find_exporter(root_pid: int, listen: str) -> int | None:
    """The exporter's own process under ``buildah run`` (not buildah's chroot helpers)."""
    todo, found = [root_pid], None
    while todo:
        pid = todo.pop()
        todo += children(pid)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # The `lagwatch` script's shebang makes the venv's python argv[0]; buildah's helpers
        # (re-executed buildah binaries) carry the same arguments but a different argv[0].
        if Path(argv[0].decode()).name.startswith("python") and listen.encode() in argv:
            found = pid
    return found


def ids(pid: int) -> tuple[set[int], set[int]]:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {int(x) for x in status["Uid"].split()}, {int(x) for x in status["Gid"].split()}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_run(proc: subprocess.Popen[Any], pid: int | None) -> None:
    """Clean-up after a `buildah run`: the exporter inside (pid), then buildah's process group."""
    if pid is not None and alive(pid):
        os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
