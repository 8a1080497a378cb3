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
# The phrases, each spelled with \s or a class, so that this line is not one of them.
RUN_DIARY = re.compile(r"fresh[-]clone|full\srun|in\sthe\srun\son|used\sto\b|first\sversion|\bearlier\sone\b"
                       r"|\bit\sreplaced\b|first\sdid\b")
# In code also "no longer" (what the code did before); the docs keep it for consumers
# ("alive but no longer polls").
CODE_DIARY = re.compile(RUN_DIARY.pattern + r"|\bno\slonger\b")


def test_no_run_diaries_in_code_or_docs() -> None:
    roots = ["exporter", "spark_metrics", "lagwatch_client", "docs"]
    files = [p for r in roots for p in (ROOT_DIR / r).rglob("*") if p.suffix in (".py", ".md")]
    files.append(ROOT_DIR / "README.md")
    hits = [f"{p.relative_to(ROOT_DIR)}:{i}" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if (CODE_DIARY if p.suffix == ".py" else RUN_DIARY).search(line)]
    assert hits == []


def test_the_diary_check_reads_code_stricter_than_docs() -> None:
    assert CODE_DIARY.search("# the sampler no longer retries") and not RUN_DIARY.search("no longer polls")
    assert RUN_DIARY.search("what the code used to do") and RUN_DIARY.search("the first version of")


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


def _imports(root: Path) -> dict[str, set[str]]:
    """Each module of ``root``'s package and the package's modules it imports, at any level
    of the file: top, inside functions, under TYPE_CHECKING."""
    package = root.name
    mods = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        base = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    up = base.split(".")[: len(base.split(".")) - node.level + 1]
                    mod = ".".join([*up, mod] if mod else up)
                names = [mod, *(f"{mod}.{a.name}" for a in node.names)]
            else:
                continue
            graph[m] |= {n for n in names if n in mods and n != m and n != package}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_exporter() -> None:
    assert import_cycles(_imports(ROOT_DIR / "exporter")) == []


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from pkg.b import B\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    assert import_cycles(_imports(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_families_a_cycle_renders_are_the_contracts_in_its_order() -> None:
    import dataclasses

    from exporter.expose.families import CompatFamilies, CycleFamilies, field_of
    from exporter.expose.metrics import COMPAT_FAMILIES, FAMILIES

    def names(cls: type) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    assert names(CycleFamilies) == [field_of(f.name) for f in FAMILIES if f.name.startswith("kafka_")]
    assert names(CompatFamilies) == [field_of(f.name) for f in COMPAT_FAMILIES]


# Names the names table (docs/design.md#names) retired: each meant two things, or nothing.
RETIRED = frozenset({
    "Sample", "GroupMemo", "RebalanceMemo", "GroupState", "TopicState", "queue_progress_at",
    "_share_progress", "extra_topics", "_extra", "_enum_name", "_STATE_NAMES", "NEW_GROUP_TYPES",
    "parse_subscriptions", "log_end_offsets",
})


def _identifiers(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out.update({node.name.rpartition(".")[2], node.asname or ""})
    return out


def test_no_retired_name_is_used_in_exporter() -> None:
    used = {f"{p.relative_to(ROOT_DIR)}: {n}" for p in sorted((ROOT_DIR / "exporter").rglob("*.py"))
            for n in _identifiers(ast.parse(p.read_text())) & RETIRED}
    assert used == set()


def test_the_retired_name_check_sees_attributes_and_imports() -> None:
    tree = ast.parse("from x import GroupMemo as M\nm.queue_progress_at = 1\n")
    assert _identifiers(tree) & RETIRED == {"GroupMemo", "queue_progress_at"}
