"""Grafana dashboards for lagwatch, as code.

``python -m dashboards.generate`` writes ``dashboards/*.json`` from the
grafanalib modules in this package (``overview``, ``group``, ``spark``);
``dashboards.queries`` reads the generated JSON back and lists every PromQL
expression with the Grafana variables substituted.

Only the generator modules import grafanalib; ``dashboards.queries`` and the
exporter do not need it.
"""

# Fixed dashboard uids: Grafana URLs (/d/<uid>) and cross-dashboard links depend on them.
UID_OVERVIEW = "lagwatch-overview"
UID_GROUP = "lagwatch-group"
UID_SPARK = "lagwatch-spark"

# Output file name of each dashboard, relative to this package.
FILES = {
    UID_OVERVIEW: "lagwatch-overview.json",
    UID_GROUP: "lagwatch-group.json",
    UID_SPARK: "lagwatch-spark.json",
}
