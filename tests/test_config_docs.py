"""Each default in one place: the configuration's docs are generated from its dataclasses.

- ``docs/lagwatch.reference.yaml`` (every setting at its default), the flag and settings
  tables of ``docs/configuration.md`` and the thresholds table of ``docs/statuses.md``
  equal what :mod:`exporter.config_docs` generates from the fields of
  ``exporter/config.py``; so does ``lagwatch --help``, built from the same fields.
- The judgement constants table of ``docs/statuses.md`` equals
  ``exporter/evaluate/constants.py``.
- The reference file is a working configuration whose values are the defaults.

``python -m tests.test_config_docs`` rewrites the generated docs.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from exporter import cli, config_docs
from exporter.config import ClusterConfig, Config, Filters, Thresholds, build_config
from tests.conftest import ROOT_DIR

pytestmark = pytest.mark.unit

DOCS = ROOT_DIR / "docs"
REFERENCE = DOCS / "lagwatch.reference.yaml"
CONSTANTS = ROOT_DIR / "exporter" / "evaluate" / "constants.py"


def constants_table() -> str:
    """One row per constant of exporter/evaluate/constants.py: name, value, its docstring."""
    body = ast.parse(CONSTANTS.read_text()).body
    rows = ["| constant | value | what it decides |", "|---|---|---|"]
    for node, doc in zip(body, body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)):
            text = " ".join(str(doc.value.value).split())
            rows.append(f"| `{node.target.id}` | {ast.unparse(node.value)} | {text} |")
    return "\n".join(rows)


# (file, marker, generator)
GENERATED: tuple[tuple[Path, str, Callable[[], str]], ...] = (
    (DOCS / "configuration.md", "cli-table", config_docs.cli_table),
    (DOCS / "configuration.md", "settings-table", config_docs.settings_table),
    (DOCS / "statuses.md", "thresholds-table", config_docs.thresholds_table),
    (DOCS / "statuses.md", "constants-table", constants_table),
)


def _section(marker: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {marker}:start -->\n)(.*?)(<!-- {marker}:end -->)", re.S)


def regenerate() -> None:
    for path, marker, gen in GENERATED:
        text = path.read_text()
        new, n = _section(marker).subn(
            lambda m, gen=gen: m.group(1) + gen().strip() + "\n" + m.group(3), text)
        assert n == 1, f"{path} lacks the {marker} markers"
        path.write_text(new)
    REFERENCE.write_text(config_docs.reference_yaml())


@pytest.mark.parametrize(("path", "marker", "gen"), GENERATED, ids=[g[1] for g in GENERATED])
def test_generated_table_matches_its_source(path: Path, marker: str, gen: Callable[[], str]) -> None:
    m = _section(marker).search(path.read_text())
    assert m, f"{path.relative_to(ROOT_DIR)} lacks the generated {marker} markers"
    assert m.group(2).strip() == gen().strip(), (
        f"the {marker} of {path.relative_to(ROOT_DIR)} is stale: run python -m tests.test_config_docs")


def test_reference_file_matches_the_dataclasses() -> None:
    assert REFERENCE.read_text() == config_docs.reference_yaml(), (
        "docs/lagwatch.reference.yaml is stale: run python -m tests.test_config_docs")


def test_reference_file_is_a_configuration_at_the_defaults() -> None:
    loaded = build_config(yaml.safe_load(REFERENCE.read_text()), {})
    (cluster,) = loaded.clusters
    assert loaded == Config(clusters=(ClusterConfig(bootstrap_servers=cluster.bootstrap_servers,
                                                    name="default"),))


def test_every_setting_is_documented_once() -> None:
    for cls in (Config, ClusterConfig, Thresholds, Filters):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help: declare it with setting()"
    keys = [s.key for s in config_docs.settings()]
    assert len(keys) == len(set(keys))
    flags = [s.flag for s in config_docs.cli_flags()]
    assert len(flags) == len(set(flags))


def test_cli_help_is_generated_from_the_same_fields() -> None:
    helps = {a.option_strings[-1]: a.help for a in cli.parser()._actions}
    assert {f: h for f, h in helps.items() if f != "--help"} == {
        **{s.flag: config_docs.cli_help(s) for s in config_docs.cli_flags()},
        **{flag: help for flag, (_, help) in config_docs.CLI_ONLY.items()}}


def test_a_flag_default_is_the_fields_default() -> None:
    """What the flags leave unset is what the dataclasses declare."""
    loaded = cli.load(["--bootstrap-servers", "kafka:9092"])
    assert loaded == Config(clusters=(ClusterConfig(bootstrap_servers="kafka:9092", name="default"),))


def test_constants_table_has_every_constant() -> None:
    names = re.findall(r"^([A-Z_]+): Final", CONSTANTS.read_text(), re.M)
    assert names and all(f"`{n}`" in constants_table() for n in names)


if __name__ == "__main__":
    regenerate()
