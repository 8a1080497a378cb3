"""Second Python environments for the tests, built once by ``make setup`` and cached in .cache/.

* PySpark driver virtualenvs, 3.5 and the newest (pyspark cannot be two versions in one
  process, and the suite's own venv has pyspark 4.0), holding pyspark and lagwatch-client's
  dependencies;
  the tests install the lagwatch-client wheel they build into it;
* a wheelhouse with the runtime dependencies of both distributions and the build backend,
  so the release and light-client tests install into fresh virtualenvs without the network.

Both are keyed by what they hold (pyspark and Python versions, the requirement list), so a
version bump builds a new one next to the old. ``python -m devenv.pyenvs 3.5.3 4.2.0`` builds them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from devenv.jars import CACHE, ROOT, SPARK35_VERSION

PY_TAG = f"py{sys.version_info.major}{sys.version_info.minor}"
# No pip cache: pyspark is an sdist of 300-450 MB, and pip's cache would keep it twice more
# (the download and the wheel built from it) beside the virtualenvs that hold it.
PIP = ("-m", "pip", "-q", "--disable-pip-version-check", "--no-input", "--no-cache-dir")


class EnvMissing(RuntimeError):
    pass


def _project(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def client_requirements() -> list[str]:
    """What lagwatch-client installs: its runtime dependencies (confluent-kafka)."""
    return list(_project(ROOT / "client" / "pyproject.toml")["project"]["dependencies"])


def wheelhouse_requirements() -> list[str]:
    """Runtime dependencies of both distributions, and the build backend (sdist installs)."""
    main = _project(ROOT / "pyproject.toml")
    reqs = {*main["project"]["dependencies"], *main["build-system"]["requires"],
            *client_requirements()}
    return sorted(reqs)


# What pyspark[connect] leaves open and does not work with: pandas 3 (PySpark warns it is
# not supported yet); for 3.5, which needs numpy<2, the pyarrow releases built for numpy 2.
CONNECT_PINS = {"3.": ("pandas<2.3", "pyarrow<18"), "4.": ("pandas<3",)}


def _ready(dest: Path) -> bool:
    return (dest / ".complete").exists()


def spark_python(version: str = SPARK35_VERSION, fetch: bool = True, *, connect: bool = False) -> Path:
    """The interpreter of a virtualenv with ``pyspark==version`` and confluent-kafka only;
    with ``connect``, a separate one with ``pyspark[connect]`` (gRPC, pandas, pyarrow) for
    Spark Connect's server and clients."""
    dest = CACHE / f"venv-pyspark{'-connect' if connect else ''}-{version}-{PY_TAG}"
    if not _ready(dest):
        if not fetch:
            raise EnvMissing(f"no PySpark {version} virtualenv in {dest}; run make setup")
        plain = spark_python(version) if connect else None
        shutil.rmtree(dest, ignore_errors=True)
        print(f"creating a PySpark {version} virtualenv in {dest}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(dest)], check=True)
        if plain is not None:
            _link_packages(_site_packages(plain.parent.parent), _site_packages(dest), ("pyspark", "py4j"))
        spec = f"pyspark[connect]=={version}" if connect else f"pyspark=={version}"
        subprocess.run([str(dest / "bin" / "python"), *PIP, "install", spec,
                        *(CONNECT_PINS[version[:2]] if connect else ()),
                        *client_requirements()], check=True)
        (dest / ".complete").touch()
    return dest / "bin" / "python"


def _site_packages(venv: Path) -> Path:
    """The site-packages of a virtualenv made by this interpreter (``sys.executable -m venv``)."""
    return Path(sysconfig.get_path("purelib", "venv", vars={"base": str(venv), "platbase": str(venv)}))


def _link_packages(src: Path, dest: Path, names: tuple[str, ...]) -> None:
    """Hard-links the installed distributions ``names`` (their packages and dist-info) from
    one site-packages into another, so pip finds them installed and adds only the extras:
    pyspark is 300-450 MB, and the connect virtualenv of a version holds the same files."""
    for path in src.iterdir():
        if path.name.split("-")[0] in names:
            if path.is_dir():
                shutil.copytree(path, dest / path.name, copy_function=os.link)
            else:
                os.link(path, dest / path.name)


def wheelhouse(fetch: bool = True) -> Path:
    """A directory of wheels to install the built distributions from, offline."""
    reqs = wheelhouse_requirements()
    key = hashlib.sha256("\n".join([PY_TAG, *reqs]).encode()).hexdigest()[:12]
    dest = CACHE / f"wheelhouse-{key}"
    if not _ready(dest):
        if not fetch:
            raise EnvMissing(f"no wheelhouse in {dest}; run make setup")
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"downloading wheels into {dest}: {' '.join(reqs)}", file=sys.stderr)
        subprocess.run([sys.executable, *PIP, "download", "--only-binary=:all:", "--dest",
                        str(tmp), *reqs], check=True)
        (tmp / ".complete").touch()
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    return dest


if __name__ == "__main__":
    for v in sys.argv[1:] or [SPARK35_VERSION]:
        spark_python(v)
        spark_python(v, connect=True)
    wheelhouse()
