"""Write the Grafana dashboards' JSON: ``python -m dashboards.generate [--check] [--out DIR]``.

Output is deterministic (sorted keys, fixed uids, panel ids in reading
order), so the committed files can be compared with a fresh generation:
``--check`` writes nothing and exits 1 when a committed file is missing or
differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dashboards import FILES, UID_GROUP, UID_OVERVIEW, UID_SPARK, group, overview, spark
from dashboards._lib import render

HERE = Path(__file__).resolve().parent


def rendered() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    builders = {UID_OVERVIEW: overview.build, UID_GROUP: group.build, UID_SPARK: spark.build}
    out = {}
    for uid, build in builders.items():
        d = build()
        if d.uid != uid:
            raise AssertionError(f"{build.__module__} built uid {d.uid!r}, expected {uid!r}")
        out[FILES[uid]] = render(d)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with the files on disk instead of writing; exit 1 if any differs")
    ap.add_argument("--out", type=Path, default=HERE,
                    help="directory of the JSON files (default: %(default)s)")
    args = ap.parse_args(argv)

    stale = []
    for name, text in rendered().items():
        path = args.out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run `make dashboards` (python -m dashboards.generate)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
