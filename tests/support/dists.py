"""Build lagwatch's two distributions and install them into other virtualenvs, offline."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devenv.pyenvs import wheelhouse

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = {"lagwatch": ROOT, "lagwatch-client": ROOT / "client"}


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


def run(*cmd: str | Path, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run a command outside the checkout (``python -m``/``-c`` would import the checkout's
    packages from the working directory); fail with its output when it fails."""
    kw.setdefault("cwd", tempfile.gettempdir())
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p


def build(project: Path, outdir: Path) -> Dist:
    """``python -m build``: the sdist, then the wheel built from the unpacked sdist.

    ``--no-isolation`` uses the suite's setuptools (pinned by the ``test`` extra) instead
    of downloading it for an isolated build environment: same backend, no network.
    """
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", outdir, project)
    sdists, wheels = list(outdir.glob("*.tar.gz")), list(outdir.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(outdir.iterdir())
    return Dist(sdists[0], wheels[0])


def fresh_venv(dest: Path) -> Path:
    """A new virtualenv without pip (the suite's pip installs into it); returns its python."""
    run(sys.executable, "-m", "venv", "--without-pip", dest)
    return dest / "bin" / "python"


def pip_install(python: Path, *args: str | Path) -> None:
    """The suite's pip installing into ``python``'s environment, from the wheelhouse only."""
    run(sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check", "-q",
        "install", "--no-index", "--find-links", wheelhouse(), *args, timeout=300)


def distributions(python: Path) -> set[str]:
    """Names of the distributions installed in ``python``'s environment (pip excluded)."""
    out = run(python, "-c", "import importlib.metadata as m; "
              "print('\\n'.join(d.metadata['Name'] for d in m.distributions()))").stdout
    return {n.strip().lower().replace("_", "-") for n in out.split()} - {"pip", "setuptools"}
