"""The Prometheus text format (0.0.4) encoder of the view families.

prometheus_client's generic encoder costs about 3 µs a sample, too slow for
the hundreds of thousands of per-partition series of a large cluster; these
few functions encode each sample once, straight into one buffer per family.
Format: https://prometheus.io/docs/instrumenting/exposition_formats/
"""

from __future__ import annotations

import math


def escape_label(v: str) -> str:
    """A label value as the text format wants it: backslash, newline and quote escaped."""
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def fmt_value(v: float | int) -> str:
    if isinstance(v, int):
        return str(v)
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def finite(v: float | None) -> bool:
    """Unknown values are left out, never NaN or Inf."""
    return v is not None and math.isfinite(v)


class Lines:
    """Sample lines of one family, encoded as they are added (a list of 400k small
    strings would cost more memory than the text itself)."""

    __slots__ = ("name", "help", "kind", "buf")

    def __init__(self, name: str, help_text: str, kind: str = "gauge") -> None:
        self.name, self.help, self.kind = name, help_text, kind
        self.buf = bytearray()

    def add(self, labels: str, v: float | int) -> None:
        self.buf += f"{self.name}{{{labels}}} {fmt_value(v)}\n".encode()

    def header(self) -> str:
        return f"# HELP {self.name} {escape_help(self.help)}\n# TYPE {self.name} {self.kind}\n"
