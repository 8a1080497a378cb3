"""The README is the front door: its metrics table and commands must stay true."""

from __future__ import annotations

import re

import pytest

from exporter.metrics import metrics_table
from tests.conftest import ROOT_DIR

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

README = (ROOT_DIR / "README.md").read_text()


def test_metrics_table_matches_the_code() -> None:
    m = re.search(r"<!-- metrics-table:start -->\n(.*?)\n<!-- metrics-table:end -->", README, re.S)
    assert m, "README lacks the generated metrics table markers"
    assert m.group(1).strip() == metrics_table().strip(), (
        "README metrics table is stale: paste the output of "
        "`python -c 'from exporter.metrics import metrics_table; print(metrics_table())'`")


def test_ci_runs_exactly_the_readme_test_command() -> None:
    assert "make test" in README
    ci = (ROOT_DIR / ".ci" / "run").read_text()
    assert re.search(r"^exec make test$", ci, re.M)
