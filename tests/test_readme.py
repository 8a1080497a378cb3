"""The README is the front door, docs/ the rest: both must stay true and connected.

- The README stays short (at most README_MAX_LINES lines), names the two commands CI and
  newcomers use, and links every page of docs/.
- The generated tables of docs/ (the metrics table from exporter/expose/metrics.py, the alerts
  table from alerts/lagwatch.rules.yml) equal what their sources give;
  ``python -m tests.test_readme`` rewrites them.
- Every relative link in README.md, docs/*.md and bench/results/*.md resolves to a file
  of the repository (and, for a Markdown file, to one of its headings when it names one).
- No commit hash in README.md or docs/: measured results, with their commit, live in
  bench/results/.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from exporter.expose.metrics import compat_table, metrics_table
from tests.conftest import ROOT_DIR

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

README_MAX_LINES = 250
README_PATH = ROOT_DIR / "README.md"
DOCS = ROOT_DIR / "docs"
RULES = ROOT_DIR / "alerts" / "lagwatch.rules.yml"
README = README_PATH.read_text()


# -- generated tables -------------------------------------------------------------------

def alerts_table() -> str:
    """One row per alert of the shipped rules: name (linked to its runbook section),
    severity, `for:` and summary."""
    rules = yaml.safe_load(RULES.read_text())
    rows = ["| alert | severity | for | summary |", "|---|---|---|---|"]
    for group in rules["groups"]:
        for r in group["rules"]:
            if "alert" not in r:
                continue
            name = r["alert"]
            rows.append(f"| [{name}](../alerts/runbook.md#{name.lower()}) | {r['labels']['severity']} "
                        f"| {r.get('for', '–')} | {r['annotations']['summary']} |")
    return "\n".join(rows)


# (file, marker name, generator)
GENERATED = (
    (DOCS / "metrics.md", "metrics-table", metrics_table),
    (DOCS / "metrics.md", "compat-table", compat_table),
    (DOCS / "alerts.md", "alerts-table", alerts_table),
)


def _section(marker: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {marker}:start -->\n)(.*?)(\n<!-- {marker}:end -->)", re.S)


def regenerate() -> None:
    for path, marker, gen in GENERATED:
        text = path.read_text()
        new, n = _section(marker).subn(lambda m, gen=gen: m.group(1) + gen().strip() + m.group(3), text)
        assert n == 1, f"{path} lacks the {marker} markers"
        path.write_text(new)


@pytest.mark.parametrize(("path", "marker", "gen"), GENERATED, ids=[g[1] for g in GENERATED])
def test_generated_table_matches_its_source(path: Path, marker: str, gen) -> None:
    m = _section(marker).search(path.read_text())
    assert m, f"{path.relative_to(ROOT_DIR)} lacks the generated {marker} markers"
    assert m.group(2).strip() == gen().strip(), (
        f"the {marker} of {path.relative_to(ROOT_DIR)} is stale: run python -m tests.test_readme")


# -- the front door ---------------------------------------------------------------------

def test_readme_is_a_front_door() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the detail to docs/")


def test_ci_runs_exactly_the_readme_test_command() -> None:
    assert re.search(r"^make test\b", README, re.M)
    ci = (ROOT_DIR / ".ci" / "run").read_text()
    assert re.search(r"^exec make test$", ci, re.M)


def test_the_readme_commands_are_make_targets() -> None:
    makefile = (ROOT_DIR / "Makefile").read_text()
    for target in ("demo", "test"):
        assert re.search(rf"^make {target}\b", README, re.M), f"README lacks `make {target}`"
        assert re.search(rf"^{target}:", makefile, re.M), f"Makefile has no {target} target"


def test_readme_links_every_docs_page() -> None:
    linked = {Path(t.split("#")[0]).name for t in _links(README) if t.startswith("docs/")}
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages - linked == set(), f"docs pages the README does not link: {sorted(pages - linked)}"


def _helm_install(text: str) -> list[str]:
    m = re.search(r"^helm install (.*?[^\\])$", text.replace("\\\n", " "), re.M)
    assert m, "no helm install command"
    return shlex.split(m.group(1))


def test_the_readme_and_the_deployment_page_install_alike() -> None:
    """tests/test_chart.py renders the README's command; the deployment page shows the same."""
    readme = README[README.index("## Deploy on Kubernetes"):]
    assert _helm_install(readme) == _helm_install((DOCS / "deployment.md").read_text())


# -- links ------------------------------------------------------------------------------

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose(text: str) -> str:
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _links(text: str) -> list[str]:
    return LINK.findall(_prose(text))


def _anchors(md: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens,
    repeated headings numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", md).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _documents() -> list[Path]:
    return [README_PATH, *sorted(DOCS.glob("*.md")), *sorted((ROOT_DIR / "bench" / "results").glob("*.md"))]


def _broken_links(doc: Path, text: str | None = None) -> list[str]:
    """The links of ``doc`` (or of ``text``, read as if it were ``doc``) that resolve to no
    file of the repository, or to no heading of the Markdown file they name."""
    text = doc.read_text() if text is None else text
    root = ROOT_DIR.resolve()
    broken = []
    for target in _links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        if not path:  # #anchor: a heading of this very document
            if anchor not in _anchors(text):
                broken.append(f"{target}: no such heading")
            continue
        dest = (doc.parent / path).resolve()
        if root not in dest.parents or not dest.is_file():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(root)}")
    return broken


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT_DIR)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert _broken_links(doc) == []


def test_the_link_checker_catches_broken_links() -> None:
    text = ("# Probe\n[ok](metrics.md) [ok](statuses.md#lag-in-seconds) [ok](#probe) [bad](nope.md) "
            "[bad](statuses.md#no-such-heading) [bad](#nowhere) [dir](../docs) `[code](nope.md)` "
            "[web](https://example.com/x)\n```\n[fenced](nope.md)\n```\n")
    assert _broken_links(DOCS / "probe.md", text) == [
        "nope.md: no such file",
        "statuses.md#no-such-heading: no heading #no-such-heading in docs/statuses.md",
        "#nowhere: no such heading",
        "../docs: no such file",
    ]


# -- no history -------------------------------------------------------------------------

COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


@pytest.mark.parametrize("doc", [README_PATH, *sorted(DOCS.glob("*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT_DIR)))
def test_no_commit_hashes_outside_bench_results(doc: Path) -> None:
    """Where a figure was measured belongs with the figure, in bench/results/."""
    assert COMMIT.findall(doc.read_text()) == []


if __name__ == "__main__":
    regenerate()
    sys.exit(0)
