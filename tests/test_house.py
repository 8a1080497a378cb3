"""The house rules of exporter/: the process boundary, function length, no run diaries.

Issue-level checks anyone can rerun: the evaluator and what serves its results must not
load a Kafka client library (they run in the main process; all Kafka I/O is in the
worker, ``exporter/kafka``), and no function in exporter/, bench/ or devenv/ may outgrow
a screen.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT_DIR

pytestmark = pytest.mark.unit

KAFKA_LIBRARIES = ("confluent_kafka", "kafka")
MAX_FUNCTION_LINES = 60


@pytest.mark.parametrize("package", ["exporter.evaluate", "exporter.expose", "exporter.contracts",
                                     "exporter.reports.decode", "exporter.reports.match",
                                     "exporter.recording"])
def test_main_process_stages_load_no_kafka_library(package: str) -> None:
    code = (f"import sys, pkgutil, importlib; m = importlib.import_module({package!r})\n"
            "for s in pkgutil.walk_packages(getattr(m, '__path__', []), m.__name__ + '.'):\n"
            "    importlib.import_module(s.name)\n"
            f"print(sorted(k for k in sys.modules if k.split('.')[0] in {KAFKA_LIBRARIES!r}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT_DIR, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "[]", f"importing {package} loads {out}"


def test_the_boundary_check_catches_a_leak() -> None:
    out = subprocess.run([sys.executable, "-c", "import exporter.kafka.sampler, sys; "
                          "print('confluent_kafka' in sys.modules)"], cwd=ROOT_DIR,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True"


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    found.append(f"{path.relative_to(ROOT_DIR)}:{node.lineno} {node.name} ({n} lines)")
    return found


@pytest.mark.parametrize("root", ["exporter", "bench", "devenv"])
def test_no_function_over_60_lines(root: str) -> None:
    """The product, and the benchmarks and development environment that measure it."""
    assert long_functions(ROOT_DIR / root) == []


def test_the_length_check_counts_lines() -> None:
    assert long_functions(ROOT_DIR / "exporter", limit=5)  # plenty of functions are longer than 5


# Run diaries and history: code and docs say what is and why, in the present tense.
# ("no longer" is left out: "alive but no longer polls" describes a consumer, not the code.)
RUN_DIARY = re.compile(r"fresh-clone|full run|in the run on|used to\b|first version|\bearlier one\b"
                       r"|\bit replaced\b|first did\b")


def test_no_run_diaries_in_code_or_docs() -> None:
    roots = ["exporter", "spark_metrics", "lagwatch_client", "docs"]
    files = [p for r in roots for p in (ROOT_DIR / r).rglob("*") if p.suffix in (".py", ".md")]
    files.append(ROOT_DIR / "README.md")
    hits = [f"{p.relative_to(ROOT_DIR)}:{i}" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1) if RUN_DIARY.search(line)]
    assert hits == []


def test_group_types_are_a_closed_set() -> None:
    from exporter.contracts.snapshot import GroupSample, GroupType

    assert GroupSample(group_id="g", type="share", state="stable").type is GroupType.SHARE
    with pytest.raises(ValueError):
        GroupSample(group_id="g", type="sahre", state="stable")  # a typo is no new group type


# Fields of the contracts that hold a closed set: each is typed by its StrEnum, never str.
CLOSED_SET_FIELDS = {"type", "state", "status", "membership", "source", "commit_mode", "stage", "event"}


def test_no_closed_set_is_a_bare_str_in_a_contract() -> None:
    import dataclasses
    import importlib
    import pkgutil
    import typing

    import exporter.config
    import exporter.contracts

    bare = []
    for mod in pkgutil.iter_modules(exporter.contracts.__path__):
        m = importlib.import_module(f"exporter.contracts.{mod.name}")
        for cls in vars(m).values():
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == m.__name__):
                continue
            # contracts/worker.py names the configuration under TYPE_CHECKING only
            hints = typing.get_type_hints(cls, {**vars(exporter.config), **vars(m)})
            for f in dataclasses.fields(cls):
                if f.name in CLOSED_SET_FIELDS and str in (hints[f.name], *typing.get_args(hints[f.name])):
                    bare.append(f"{cls.__name__}.{f.name}")
    assert bare == []


# What exporter/contracts/ may import of the application besides itself: the worker's start
# message carries the cluster's configuration (contracts/worker.py, for annotations only).
CONTRACTS_MAY_IMPORT = {"exporter.config"}


def test_contracts_import_nothing_above_them() -> None:
    """Every import of exporter/contracts/, at any level (TYPE_CHECKING ones included), is
    of the standard library, of exporter/contracts/ itself, or CONTRACTS_MAY_IMPORT."""
    above = []
    for path in sorted((ROOT_DIR / "exporter" / "contracts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            above += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("exporter", "lagwatch_client")
                      and not n.startswith("exporter.contracts") and n not in CONTRACTS_MAY_IMPORT]
    assert above == []
