"""The configuration's documentation, generated from the fields of ``exporter/config.py``.

Each setting is declared once, by :func:`exporter.config.setting`: default, help, flag.
From those fields come the CLI's ``--help`` (:func:`cli_flags`), the tables of
``docs/configuration.md`` and ``docs/statuses.md`` (:func:`cli_table`,
:func:`settings_table`, :func:`thresholds_table`) and the reference file
``docs/lagwatch.reference.yaml`` (:func:`reference_yaml`), every setting at its default.
``tests/test_config_docs.py`` keeps the docs equal to these; ``python -m
tests.test_config_docs`` rewrites them.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Iterator
from typing import Any, NamedTuple

import yaml

from exporter.config import ClusterConfig, Config, Filters, Thresholds

# Flags that set no configuration field: flag -> (metavar, help).
CLI_ONLY: dict[str, tuple[str | None, str]] = {
    "--config": ("FILE", "a YAML file (docs/lagwatch.reference.yaml); command-line flags take precedence"),
    "--version": (None, "print the version"),
}


class Setting(NamedTuple):
    """One configuration field as the docs show it."""

    key: str  # its path in the YAML file: thresholds.stall_after, clusters[].groups.allow
    name: str  # the field's name in its dataclass
    default: Any  # dataclasses.MISSING when required
    doc: dict[str, Any]  # the field's metadata (exporter.config.setting)

    @property
    def help(self) -> str:
        return self.doc["help"]

    @property
    def flag(self) -> str | None:
        return self.doc["flag"]

    def shown(self) -> str:
        """The default as an operator writes it."""
        if self.doc["shown"] is not None:
            return self.doc["shown"]
        v = self.default
        if v is dataclasses.MISSING:
            return "required"
        if v is None or (isinstance(v, frozenset | dict | list | tuple) and not v):
            return "none"
        return yaml.safe_dump(_plain(v), default_flow_style=True).strip().removesuffix("...").strip()

    def flag_text(self) -> str:
        """``--interval SECONDS``, ``--lag-mode interpolate|exact``."""
        assert self.flag is not None
        choices = self.doc["choices"]
        arg = self.doc["metavar"] or ("|".join(choices) if choices else "")
        return f"{self.flag} {arg}".strip()


def _plain(v: Any) -> Any:
    """A default as YAML writes it: whole floats as integers, sets as lists."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, frozenset | tuple):
        return sorted(v)
    return v


def _settings(cls: type, prefix: str = "") -> Iterator[Setting]:
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if f.name == "filters":
            yield from _settings(Filters, prefix)
        elif f.name == "thresholds" and not prefix:  # a cluster's own: one row, an example
            yield from _settings(Thresholds, f"{prefix}thresholds.")
        elif f.name == "clusters":
            yield from _settings(ClusterConfig, f"{prefix}clusters[].")
        else:
            yield Setting(f"{prefix}{f.metadata['key'] or f.name}", f.name, default, dict(f.metadata))


def settings() -> list[Setting]:
    """Every configuration setting: the top-level ones, then a cluster's (each in the order
    of its dataclass)."""
    every = list(_settings(Config))
    return sorted(every, key=lambda s: s.key.startswith("clusters[]."))


def cli_flags() -> list[Setting]:
    """The settings a command-line flag sets: the cluster's first (the one flag needed)."""
    return sorted((s for s in settings() if s.flag), key=lambda s: not s.key.startswith("clusters[]."))


def _meaning(s: Setting) -> str:
    """A setting's help, with a link to the page that explains it (tables of docs/)."""
    see = s.doc["see"]
    if not see:
        return _cell(s.help)
    page = see.split("#")[0].removesuffix(".md")
    return f"{_cell(s.help)} ([{page}]({see}))"


def cli_help(s: Setting) -> str:
    """A flag's ``--help`` line: the setting's help and its default."""
    shown = s.shown()
    return s.help if shown in ("none", "required") else f"{s.help} (default: {shown})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def cli_table() -> str:
    rows = ["| flag | default | meaning |", "|---|---|---|"]
    for s in cli_flags():
        default = "–" if s.shown() in ("none", "required") else f"`{s.shown()}`"
        rows.append(f"| `{_cell(s.flag_text())}` | {default} | {_meaning(s)} |")
    rows += [f"| `{f'{flag} {metavar}' if metavar else flag}` | – | {help} |"
             for flag, (metavar, help) in CLI_ONLY.items()]
    return "\n".join(rows)


def settings_table() -> str:
    rows = ["| key | default | flag | meaning |", "|---|---|---|---|"]
    for s in settings():
        meaning = _meaning(s) + ("; also a top-level key: the default of every cluster"
                                 if s.doc["cluster_default"] else "")
        flag = f"`{s.flag}`" if s.flag else ""
        rows.append(f"| `{s.key}` | `{_cell(s.shown())}` | {flag} | {meaning} |")
    return "\n".join(rows)


def thresholds_table() -> str:
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for s in settings():
        if s.key.startswith("thresholds."):
            flag = f" (`{s.flag}`)" if s.flag else ""
            unit = "" if s.doc["metavar"] == "COUNT" else " s"  # the thresholds are seconds but counts
            rows.append(f"| `{s.key}`{flag} | {s.shown()}{unit} | {s.help} |")
    return "\n".join(rows)


# -- the reference file --------------------------------------------------------------------

HEADER = """\
# lagwatch reference configuration: every setting, at its default.
#
# Generated from the fields of exporter/config.py (python -m tests.test_config_docs
# rewrites it). A setting left out takes its default; command-line flags take precedence
# over the file; a ${VAR} is read from the environment. A commented-out setting has no
# default: the value shown is an example. docs/configuration.md explains the file.
"""


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, 88 - len(indent), break_on_hyphens=False)]


def _help(s: Setting) -> str:
    notes = [n for n in (s.flag, s.doc["see"] and f"docs/{s.doc['see']}") if n]
    required = " Required." if s.default is dataclasses.MISSING else ""
    return s.help[0].upper() + s.help[1:] + (f" ({'; '.join(notes)})." if notes else ".") + required


def _lines(s: Setting, indent: str, key: str | None = None) -> list[str]:
    """A setting's comment, then its key at its default or, with none, its example."""
    key = key or s.key.rsplit(".", 1)[-1].removeprefix("clusters[].")
    out = _comment(_help(s), indent)
    empty = s.default is None or (isinstance(s.default, frozenset | dict | list | tuple) and not s.default)
    if empty and s.doc["example"] is not None:
        body = yaml.safe_dump({key: _plain(s.doc["example"])}, default_flow_style=False, sort_keys=False)
        out += [f"{indent}# {line}" for line in body.splitlines()]
        return out
    value = s.doc["shown"] or (s.doc["example"] if s.default is dataclasses.MISSING else _plain(s.default))
    body = yaml.safe_dump({key: value}, default_flow_style=True, sort_keys=False, width=200)
    out.append(indent + body.strip().removeprefix("{").removesuffix("}"))
    return out


def reference_yaml() -> str:
    every = settings()
    top = [s for s in every if "." not in s.key and "[]" not in s.key]
    inherit = [s for s in every if s.key.startswith("clusters[].") and s.doc["cluster_default"]]
    out = [HEADER]
    for s in top:
        out += _lines(s, "")
    out.append("\n# The defaults of every cluster (a cluster may set its own).")
    for s in inherit:
        out += _lines(s, "")
    out.append("\n# When a partition stops being `ok` (seconds): docs/statuses.md.")
    out.append("thresholds:")
    for s in every:
        if s.key.startswith("thresholds."):
            out += _lines(s, "  ")
    out.append("\n# The clusters to watch (required): a list, one entry per cluster.")
    out.append("clusters:")
    out += _cluster_lines([s for s in every if s.key.startswith("clusters[].")])
    return "\n".join(out) + "\n"


def _cluster_lines(cluster: list[Setting]) -> list[str]:
    """One cluster entry: its own settings; nested keys (groups.allow) under their parent;
    the inherited ones commented out (the top-level value applies)."""
    out: list[str] = []
    parents: set[str] = set()
    for s in cluster:
        path = s.key.removeprefix("clusters[].")
        if s.doc["cluster_default"]:
            out += _comment(f"{s.help[0].upper()}{s.help[1:]}; default: the top-level {path}.", "    ")
            out.append(f"    # {path}: {s.shown()}")
            continue
        if "." in path:
            parent, child = path.split(".", 1)
            if parent not in parents:
                parents.add(parent)
                out.append(f"    {parent}:")
            out += _lines(s, "      ", child)
            continue
        out += _lines(s, "    ")
    out[0] = "  - " + out[0].removeprefix("    ")
    return out
