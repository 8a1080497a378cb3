"""Configuration: CLI flags and an optional YAML file, validated into frozen dataclasses.

Every problem raises :class:`ConfigError` naming the field (``clusters[1].interval``)
so the CLI can print one line and exit 2. Values of the form ``${VAR}`` are
read from the environment, which is where secrets belong.

Each setting is declared once, as a field made by :func:`setting`: its default and its
documentation. The CLI's ``--help``, the tables of ``docs/configuration.md`` and the
reference file ``docs/lagwatch.reference.yaml`` are generated from these fields
(``exporter/config_docs.py``; ``python -m tests.test_config_docs`` rewrites the docs).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from exporter.kafka.oauth_props import AuthConfigError, AwsMskIam, token_spec
from lagwatch_client.wire import DEFAULT_REPORTS_TOPIC

DEFAULT_LISTEN = ("0.0.0.0", 9308)
DEFAULT_CLUSTER_NAME = "default"


class LagMode(StrEnum):
    """How lag seconds are computed."""

    INTERPOLATE = "interpolate"  # on the HW history: when the committed offset was the HW
    EXACT = "exact"  # from the timestamp of the record at the committed offset


class MetricsDetail(StrEnum):
    """Which group series /metrics serves."""

    FULL = "full"  # every series of every group
    BOUNDED = "bounded"  # per-group series only where an alert reads them (exporter/expose/detail.py)


LAG_MODES = tuple(m.value for m in LagMode)  # plain strings: argparse prints its choices
COMPAT_MODES = ("kafka_exporter",)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
METRICS_DETAIL = tuple(m.value for m in MetricsDetail)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# librdkafka properties whose values must never be printed.
SECRET_KEY_RE = re.compile(r"(password|secret|token|private|key\.pem|keystore|\.key$|jaas)", re.I)


def setting(help: str, default: Any = MISSING, *, factory: Callable[[], Any] | None = None,
            flag: str | None = None, metavar: str | None = None, key: str | None = None,
            shown: str | None = None, example: Any = None, choices: tuple[str, ...] | None = None,
            cluster_default: bool = False, see: str | None = None) -> Any:
    """A configuration field and its documentation, in one place.

    ``help``: what it does, one line; ``flag`` (and ``metavar``): the command-line flag that
    sets it; ``key``: its path in the YAML file when that is not the field's name;
    ``shown``: the default as written in YAML when the value is not (``listen``);
    ``example``: a value for the reference file when the default is none; ``choices``: the
    values allowed; ``cluster_default``: also a top-level key, the default of every cluster;
    ``see``: the page of docs/ (and section) that explains it."""
    doc = {"help": help, "flag": flag, "metavar": metavar, "key": key, "shown": shown,
           "example": example, "choices": choices, "cluster_default": cluster_default, "see": see}
    if factory is not None:
        return field(default_factory=factory, metadata=doc)
    return field(default=default, metadata=doc)


def default_of(cls: type, name: str) -> Any:
    """The default of a configuration field, as declared by :func:`setting`."""
    f = next(f for f in fields(cls) if f.name == name)
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


class ConfigError(ValueError):
    """A configuration problem, already phrased for the operator."""

    def __init__(self, field_path: str, problem: str) -> None:
        super().__init__(f"{field_path}: {problem}")
        self.field = field_path


@dataclass(frozen=True)
class Thresholds:
    """When a partition stops being `ok` (in seconds), and when a group's rebalances are a storm."""

    stall_after: float = setting(
        "how long a committed offset stays frozen, with lag > 0 and new records waiting, before "
        "the partition is `stalled` (and the rejoin-loop `livelocked`)", 300.0, flag="--stall-after",
        metavar="SECONDS")
    livelock_after: float = setting(
        "how old an instrumented consumer's last poll, or a Spark batch's running time, can get "
        "before it is `livelocked`", 180.0, flag="--livelock-after", metavar="SECONDS")
    lag_seconds: float = setting("a lag older than this is `lagging`, growing or not", 600.0)
    window: float = setting("how far back rejoins count (the rejoin-loop `livelocked`), and the span "
                            "consume and produce rates and the time to catch up are measured over", 600.0)
    report_expiry: float = setting(
        "reports older than this are forgotten, and their series vanish", 900.0)
    report_stale_after: float = setting(
        "a reporter (instrumented consumer, Spark driver) silent this long is stale", 60.0)
    rebalance_storm: float = setting(
        "more rebalances than this within `rebalance_window` is a rebalance storm: a note in the "
        "group's reasons, never a status (the alert rule has its own threshold)", 5.0, metavar="COUNT")
    rebalance_window: float = setting(
        "how far back rebalances count towards a storm, and the span of the livelock's rebalance "
        "count", 600.0)


@dataclass(frozen=True)
class GroupThresholds:
    """Thresholds of the groups whose id ``match`` finds (``re.search``): the settings in
    ``changes`` replace the cluster's, the others stay (``group_thresholds:`` in YAML)."""

    match: re.Pattern[str]
    changes: tuple[tuple[str, float], ...]

    def apply(self, base: Thresholds) -> Thresholds:
        return replace(base, **dict(self.changes))


def thresholds_for(base: Thresholds, overrides: Sequence[GroupThresholds], group: str) -> Thresholds:
    """A group's thresholds: the first override whose pattern matches it, over ``base``."""
    for o in overrides:
        if o.match.search(group):
            return o.apply(base)
    return base


@dataclass(frozen=True)
class Filters:
    """Which groups and topics of a cluster are watched (regular expressions, ``re.search``)."""

    group_allow: re.Pattern[str] | None = setting(
        "watch only the groups whose id this matches", None, key="groups.allow", example=".*")
    group_deny: re.Pattern[str] | None = setting(
        "leave out the groups whose id this matches", None, key="groups.deny",
        example="^(console-consumer|_confluent)")
    topic_allow: re.Pattern[str] | None = setting(
        "watch only the topics whose name this matches", None, key="topics.allow", example=".*")
    topic_deny: re.Pattern[str] | None = setting(
        "leave out the topics whose name this matches", None, key="topics.deny", example="^__")

    def group_ok(self, group: str) -> bool:
        return _allowed(group, self.group_allow, self.group_deny)

    def topic_ok(self, topic: str) -> bool:
        return _allowed(topic, self.topic_allow, self.topic_deny)


def _allowed(name: str, allow: re.Pattern[str] | None, deny: re.Pattern[str] | None) -> bool:
    if allow is not None and not allow.search(name):
        return False
    return not (deny is not None and deny.search(name))


@dataclass(frozen=True)
class ClusterConfig:
    """One Kafka cluster to watch (an entry of ``clusters``)."""

    bootstrap_servers: str = setting(
        "the cluster's brokers", flag="--bootstrap-servers", metavar="HOST:PORT[,...]",
        example="kafka-1:9093,kafka-2:9093")
    name: str = setting("the cluster's name in the `cluster` label", flag="--cluster", metavar="NAME",
                        shown=DEFAULT_CLUSTER_NAME)
    client: dict[str, str] = setting(
        "librdkafka properties (security, SASL, TLS); not group.id, enable.auto.commit or "
        "bootstrap.servers, which lagwatch sets", factory=dict, see="security.md",
        example={"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                 "sasl.username": "lagwatch", "sasl.password": "${LAGWATCH_KAFKA_PASSWORD}"})
    interval: float = setting("seconds between sampling cycles", 30.0, flag="--interval",
                              metavar="SECONDS", cluster_default=True)
    request_timeout: float = setting("seconds per Kafka request", 10.0, cluster_default=True)
    lag_mode: LagMode = setting(
        "how lag seconds are computed: interpolated from the HW history, or read from the "
        "record's timestamp", LagMode.INTERPOLATE.value, flag="--lag-mode", choices=LAG_MODES,
        cluster_default=True, see="statuses.md#lag-in-seconds")
    filters: Filters = setting("which groups and topics are watched", factory=Filters)
    reports_topic: str = setting(
        "the topic instrumented consumers and the Spark listener report to",
        DEFAULT_REPORTS_TOPIC, key="reports.topic", see="instrumentation.md")
    reports_enabled: bool = setting("read the reports topic", True, key="reports.enabled")
    state_enabled: bool = setting(
        "keep the judgement's state in lagwatch's own compacted topic and read it back at start, "
        "so a restart continues every clock", True, key="state.enabled", see="design.md#state")
    state_topic: str = setting("the state topic (created if missing)", "__lagwatch_state",
                               key="state.topic", see="security.md")
    state_partitions: int = setting(
        "partitions of the state topic when lagwatch creates it (at most those of "
        "__consumer_offsets): the shards replicas divide", 50, key="state.partitions",
        metavar="COUNT", see="design.md#replicas")
    state_max_age: float = setting(
        "state written longer ago than this is not read back (seconds)", 3600.0, key="state.max_age")
    state_write_every: int = setting(
        "a group whose status did not change is written again every this many cycles (a change "
        "is written in its cycle)", 10, key="state.write_every", metavar="CYCLES")
    state_replicas: bool = setting(
        "replicas share the cluster's groups: each joins lagwatch's coordination group on the "
        "state topic and judges and serves only the groups of the partitions it is assigned "
        "(false: this process judges every group)", False, key="state.replicas",
        see="design.md#replicas")
    state_group: str = setting(
        "the coordination group the replicas join, the only group lagwatch ever joins (empty: "
        "lagwatch-<cluster name>)", "", key="state.group", see="security.md")
    state_session_timeout: float = setting(
        "the coordination group's session timeout (seconds): a replica that dies has its groups "
        "judged by the others after this and two cycles", 30.0, key="state.session_timeout")
    @property
    def coordination_group(self) -> str:
        """The replicas' coordination group (``state.group``, else ``lagwatch-<name>``)."""
        return self.state_group or f"lagwatch-{self.name}"

    thresholds: Thresholds | None = setting(
        "this cluster's thresholds: any of the top-level `thresholds` but report_expiry, each "
        "replacing the top-level one", None, example={"stall_after": 120},
        see="configuration.md#thresholds-per-cluster-and-per-group")
    # The cluster's own list first, then the top-level one; the first match wins.
    group_thresholds: tuple[GroupThresholds, ...] = setting(
        "thresholds of the groups whose id a regular expression finds, over the cluster's: a list "
        "of {match, thresholds}, before the top-level list; the first match wins", (),
        example=[{"match": "^payments-", "thresholds": {"stall_after": 30}}],
        see="configuration.md#thresholds-per-cluster-and-per-group")
    oauthbearer_token_file: str | None = setting(
        "SASL/OAUTHBEARER: a file holding the token (a Kubernetes projected service-account "
        "token), re-read when it changes; with sasl.mechanism OAUTHBEARER", None,
        example="/var/run/secrets/kafka/token", see="security.md#a-token-from-a-file")
    aws_msk_iam: AwsMskIam | None = setting(
        "AWS MSK IAM over SASL/OAUTHBEARER: region, optionally role_arn (assumed) or profile; "
        "credentials otherwise from the environment (IRSA, EKS Pod Identity); needs lagwatch[aws]",
        None, example={"region": "eu-west-1"}, see="security.md#aws-msk-iam")

    def redacted_client(self) -> dict[str, str]:
        return {k: ("***" if SECRET_KEY_RE.search(k) else v) for k, v in self.client.items()}

    def __repr__(self) -> str:  # never let a secret reach a log through repr()
        return (f"ClusterConfig(name={self.name!r}, bootstrap_servers={self.bootstrap_servers!r}, "
                f"client={self.redacted_client()!r}, interval={self.interval})")


@dataclass(frozen=True)
class Config:
    """Everything lagwatch runs with."""

    clusters: tuple[ClusterConfig, ...] = setting("the clusters to watch")
    listen: tuple[str, int] = setting(
        "HTTP address of /metrics, the JSON API and the status page", DEFAULT_LISTEN,
        flag="--listen", metavar="HOST:PORT", shown="0.0.0.0:9308")
    thresholds: Thresholds = setting("when a partition stops being `ok` (seconds)", factory=Thresholds,
                                     see="statuses.md#thresholds")
    # Merged into every cluster's ``group_thresholds``, after the cluster's own list.
    group_thresholds: tuple[GroupThresholds, ...] = setting(
        "thresholds of the groups whose id a regular expression finds, in every cluster: a list of "
        "{match, thresholds}, after each cluster's own list; the first match wins", (),
        example=[{"match": "^(reporting|batch)-", "thresholds": {"stall_after": 1200}}],
        see="configuration.md#thresholds-per-cluster-and-per-group")
    compat: frozenset[str] = setting(
        "also serve another exporter's metric names", frozenset(), flag="--compat",
        choices=COMPAT_MODES, example=["kafka_exporter"], see="metrics.md#kafka_exporter-compatibility")
    max_group_partitions: int = setting(
        "cardinality cap on group partitions (a group without partitions counts 1); the worst "
        "groups are kept", 500_000)
    history_points: int = setting("(time, HW) points kept per partition for lag in seconds", 120)
    metrics_detail: MetricsDetail = setting(
        "/metrics group series: every series of every group (`full`), or every group's status "
        "and max lag, and the other series only of the groups an alert reads them for: not "
        "`ok`, near retention, rebalancing, Spark (`bounded`; every group and partition in the "
        "JSON API)",
        MetricsDetail.FULL.value, flag="--metrics-detail", choices=METRICS_DETAIL,
        see="metrics.md#bounded-metrics")
    log_level: str = setting(f"how much to log: {', '.join(LOG_LEVELS[:-1])} or {LOG_LEVELS[-1]}", "INFO",
                             flag="--log-level", metavar="LEVEL")
    web_config: str | None = setting(
        "TLS and basic auth for the HTTP endpoints (exporter-toolkit format)", None,
        flag="--web-config", metavar="FILE", example="/etc/lagwatch/web.yml", see="security.md")
    record_dir: str | None = setting(
        "an existing directory: write each cycle's evaluator inputs to DIR/CLUSTER.jsonl, for "
        "replay", None, flag="--record", metavar="DIR", example="/var/lib/lagwatch/recordings",
        see="recordings.md")

    def cluster_thresholds(self, cluster: ClusterConfig) -> Thresholds:
        """The thresholds a cluster's groups are judged by unless an override matches."""
        return cluster.thresholds if cluster.thresholds is not None else self.thresholds


# -- parsing helpers -----------------------------------------------------------

def _expand_env(value: Any, where: str) -> Any:
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            var = m.group(1)
            if var not in os.environ:
                raise ConfigError(where, f"environment variable {var} is not set")
            return os.environ[var]
        return _ENV_RE.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand_env(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _positive(value: Any, where: str, *, minimum: float = 0.0, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(where, f"expected a number, got {type(value).__name__}")
    try:
        num = int(value) if integer else float(value)
    except ValueError:
        raise ConfigError(where, f"expected a number, got {value!r}") from None
    if integer and isinstance(value, float) and value != num:
        raise ConfigError(where, f"expected a whole number, got {value!r}")
    if num != num or num in (float("inf"), float("-inf")):
        raise ConfigError(where, f"expected a finite number, got {value!r}")
    if num <= minimum:
        raise ConfigError(where, f"must be greater than {minimum:g}, got {value!r}")
    return num


def _regex(value: Any, where: str) -> re.Pattern[str] | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(where, f"expected a regular expression string, got {type(value).__name__}")
    try:
        return re.compile(value)
    except re.error as e:
        raise ConfigError(where, f"invalid regular expression {value!r}: {e}") from None


def parse_listen(value: Any, where: str = "listen") -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(where, f"expected HOST:PORT, got {value!r}")
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(where, f"port must be 0-65535, got {port!r}")
    return host or "0.0.0.0", int(port)


def _bootstrap(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(where, "expected HOST:PORT[,HOST:PORT...]")
    for part in value.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(where, f"expected HOST:PORT, got {part.strip()!r}")
    return value.strip()


def _check_keys(d: dict[str, Any], allowed: set[str], where: str) -> None:
    for k in d:
        if k not in allowed:
            prefix = f"{where}." if where else ""
            known = ", ".join(sorted(allowed))
            raise ConfigError(f"{prefix}{k}", f"unknown setting (expected one of: {known})")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(where, f"expected a mapping, got {type(value).__name__}")
    return value


_THRESHOLD_KEYS = {"stall_after", "livelock_after", "lag_seconds", "window", "report_expiry",
                   "report_stale_after", "rebalance_storm", "rebalance_window"}
# Per cluster and per group: all but report_expiry, which the reports reader applies to
# every report of a cluster before any group is known.
_OVERRIDE_KEYS = _THRESHOLD_KEYS - {"report_expiry"}
_CLUSTER_KEYS = {"name", "bootstrap_servers", "client", "interval", "request_timeout", "lag_mode",
                 "groups", "topics", "reports_topic", "reports", "thresholds", "group_thresholds",
                 "oauthbearer_token_file", "aws_msk_iam", "state"}
_TOP_KEYS = {"clusters", "listen", "interval", "thresholds", "compat", "max_group_partitions",
             "history_points", "log_level", "lag_mode", "web_config", "request_timeout",
             "record_dir", "group_thresholds", "metrics_detail"}


def _threshold_values(raw: Any, where: str, keys: set[str]) -> dict[str, float]:
    raw = _mapping(raw, where)
    _check_keys(raw, keys, where)
    return {k: _positive(v, f"{where}.{k}") for k, v in raw.items()}


def _thresholds(raw: Any, base: Thresholds) -> Thresholds:
    return replace(base, **_threshold_values(raw, "thresholds", _THRESHOLD_KEYS))


def _group_thresholds(raw: Any, where: str) -> tuple[GroupThresholds, ...]:
    """``[{match: REGEX, thresholds: {...}}, ...]``, validated entry by entry."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(where, f"expected a list of {{match, thresholds}}, got {type(raw).__name__}")
    out = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        entry = _mapping(entry, at)
        _check_keys(entry, {"match", "thresholds"}, at)
        for key in ("match", "thresholds"):
            if entry.get(key) is None:
                raise ConfigError(f"{at}.{key}", "is required")
        values = _threshold_values(entry["thresholds"], f"{at}.thresholds", _OVERRIDE_KEYS)
        if not values:
            raise ConfigError(f"{at}.thresholds", "expected at least one threshold to override")
        pattern = _regex(entry["match"], f"{at}.match")
        assert pattern is not None
        out.append(GroupThresholds(pattern, tuple(sorted(values.items()))))
    return tuple(out)


def _with_thresholds(c: ClusterConfig, raw: dict[str, Any], where: str, top: Thresholds,
                     top_groups: tuple[GroupThresholds, ...]) -> ClusterConfig:
    """The cluster with its own thresholds (over the top-level ones) and group overrides."""
    own = None
    if raw.get("thresholds") is not None:
        own = replace(top, **_threshold_values(raw["thresholds"], f"{where}.thresholds", _OVERRIDE_KEYS))
    groups = _group_thresholds(raw.get("group_thresholds"), f"{where}.group_thresholds")
    return replace(c, thresholds=own, group_thresholds=groups + top_groups)


def _filters(groups: Any, topics: Any, where: str) -> Filters:
    g = _mapping(groups, f"{where}.groups")
    t = _mapping(topics, f"{where}.topics")
    _check_keys(g, {"allow", "deny"}, f"{where}.groups")
    _check_keys(t, {"allow", "deny"}, f"{where}.topics")
    return Filters(
        group_allow=_regex(g.get("allow"), f"{where}.groups.allow"),
        group_deny=_regex(g.get("deny"), f"{where}.groups.deny"),
        topic_allow=_regex(t.get("allow"), f"{where}.topics.allow"),
        topic_deny=_regex(t.get("deny"), f"{where}.topics.deny"),
    )


def _inherited(raw: dict[str, Any], defaults: dict[str, Any], key: str) -> Any:
    """A cluster's setting: its own, else the top-level default, else the declared one."""
    return raw.get(key, defaults.get(key, default_of(ClusterConfig, key)))


def _top(data: dict[str, Any], key: str) -> Any:
    """A top-level setting: the file's (or the flag's), else the declared default."""
    return data.get(key, default_of(Config, key))


def _cluster(raw: Any, where: str, defaults: dict[str, Any]) -> ClusterConfig:
    raw = _mapping(raw, where)
    _check_keys(raw, _CLUSTER_KEYS, where)
    name = raw.get("name", defaults.get("name", DEFAULT_CLUSTER_NAME))
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(f"{where}.name", f"expected 1-63 characters [A-Za-z0-9._-], got {name!r}")
    if "bootstrap_servers" not in raw:
        raise ConfigError(f"{where}.bootstrap_servers", "is required")
    client = _mapping(raw.get("client"), f"{where}.client")
    for k, v in client.items():
        if not isinstance(v, str | int | float | bool):
            raise ConfigError(f"{where}.client.{k}", "expected a scalar librdkafka property value")
    client_s = {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in client.items()}
    for forbidden in ("group.id", "enable.auto.commit", "bootstrap.servers"):
        if forbidden in client_s:
            raise ConfigError(f"{where}.client.{forbidden}",
                              "must not be set: lagwatch manages it (it never joins or commits)")
    token_file, aws = _token_source(raw, client_s, where)
    lag_mode = _inherited(raw, defaults, "lag_mode")
    if lag_mode not in LAG_MODES:
        raise ConfigError(f"{where}.lag_mode", f"expected one of {', '.join(LAG_MODES)}, got {lag_mode!r}")
    reports = _mapping(raw.get("reports"), f"{where}.reports")
    _check_keys(reports, {"enabled", "topic"}, f"{where}.reports")
    enabled = reports.get("enabled", default_of(ClusterConfig, "reports_enabled"))
    if not isinstance(enabled, bool):
        raise ConfigError(f"{where}.reports.enabled", f"expected true or false, got {enabled!r}")
    topic = reports.get("topic", raw.get("reports_topic", default_of(ClusterConfig, "reports_topic")))
    if not isinstance(topic, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic):
        key = "reports.topic" if "topic" in reports else "reports_topic"
        raise ConfigError(f"{where}.{key}", f"not a valid Kafka topic name: {topic!r}")
    return ClusterConfig(
        **_state(raw, where),
        name=name,
        bootstrap_servers=_bootstrap(raw["bootstrap_servers"], f"{where}.bootstrap_servers"),
        client=client_s,
        interval=_positive(_inherited(raw, defaults, "interval"), f"{where}.interval", minimum=0.05),
        request_timeout=_positive(_inherited(raw, defaults, "request_timeout"), f"{where}.request_timeout"),
        lag_mode=LagMode(lag_mode),
        filters=_filters(raw.get("groups"), raw.get("topics"), where),
        reports_topic=topic,
        reports_enabled=enabled,
        oauthbearer_token_file=token_file,
        aws_msk_iam=aws,
    )


def _token_source(raw: dict[str, Any], client: dict[str, str], where: str
                  ) -> tuple[str | None, AwsMskIam | None]:
    """The cluster's token file and MSK IAM settings, checked with its client properties
    (exporter/kafka/oauth_props.py): what no client can honour is refused here."""
    token_file = raw.get("oauthbearer_token_file")
    if token_file is not None and (not isinstance(token_file, str) or not token_file):
        raise ConfigError(f"{where}.oauthbearer_token_file", "expected a file path")
    aws = None
    if raw.get("aws_msk_iam") is not None:
        at = f"{where}.aws_msk_iam"
        m = _mapping(raw["aws_msk_iam"], at)
        _check_keys(m, {"region", "role_arn", "profile", "role_session_name"}, at)
        for k, v in m.items():
            if not isinstance(v, str) or not v:
                raise ConfigError(f"{at}.{k}", "expected a non-empty string")
        if "region" not in m:
            raise ConfigError(f"{at}.region", "is required")
        if "role_arn" in m and "profile" in m:
            raise ConfigError(f"{at}.profile", "give role_arn or profile, not both")
        aws = AwsMskIam(**m)
    try:
        token_spec(client, token_file, aws)
    except AuthConfigError as e:
        key = e.prop if e.prop in ("oauthbearer_token_file", "aws_msk_iam") else f"client.{e.prop}"
        raise ConfigError(f"{where}.{key}", str(e)) from None
    return token_file, aws


def _state(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """A cluster's ``state:`` mapping (exporter/state/), validated."""
    state = _mapping(raw.get("state"), f"{where}.state")
    _check_keys(state, {"enabled", "topic", "partitions", "max_age", "write_every", "replicas", "group",
                        "session_timeout"}, f"{where}.state")
    enabled = state.get("enabled", default_of(ClusterConfig, "state_enabled"))
    if not isinstance(enabled, bool):
        raise ConfigError(f"{where}.state.enabled", f"expected true or false, got {enabled!r}")
    topic = state.get("topic", default_of(ClusterConfig, "state_topic"))
    if not isinstance(topic, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic):
        raise ConfigError(f"{where}.state.topic", f"not a valid Kafka topic name: {topic!r}")
    def number(key: str, integer: bool = False) -> float:
        value = state.get(key, default_of(ClusterConfig, f"state_{key}"))
        return _positive(value, f"{where}.state.{key}", integer=integer)

    return {"state_enabled": enabled, "state_topic": topic,
            "state_partitions": int(number("partitions", True)), "state_max_age": number("max_age"),
            "state_write_every": int(number("write_every", True)),
            **_replicas(state, enabled, where)}


def _replicas(state: dict[str, Any], enabled: bool, where: str) -> dict[str, Any]:
    """The replicas' settings of a ``state:`` mapping (exporter/state/coordination.py)."""
    replicas = state.get("replicas", default_of(ClusterConfig, "state_replicas"))
    if not isinstance(replicas, bool):
        raise ConfigError(f"{where}.state.replicas", f"expected true or false, got {replicas!r}")
    if replicas and not enabled:
        raise ConfigError(f"{where}.state.replicas", "needs state.enabled: the state topic is "
                          "what the replicas share and how a moved group keeps its clocks")
    group = state.get("group", "")
    if not isinstance(group, str) or len(group) > 249:
        raise ConfigError(f"{where}.state.group", f"expected a group id, got {group!r}")
    timeout = _positive(state.get("session_timeout", default_of(ClusterConfig, "state_session_timeout")),
                        f"{where}.state.session_timeout", minimum=0.5)
    return {"state_replicas": replicas, "state_group": group, "state_session_timeout": timeout}


def load_yaml(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError("--config", f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(path, f"not UTF-8 text (byte {e.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        loc = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(path, f"invalid YAML{loc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(path, "the top level must be a mapping")
    return data


def build_config(file_data: dict[str, Any], overrides: dict[str, Any]) -> Config:
    """Merge the YAML file with CLI overrides (CLI wins) and validate everything, in the
    order the settings are listed here (the first problem found is the one reported)."""
    data = _expand_env(dict(file_data), "")
    _check_keys(data, _TOP_KEYS, "")
    for k, v in overrides.items():
        if v is not None and k not in ("bootstrap_servers", "cluster"):
            data[k] = v
    thresholds = _top_thresholds(data, overrides)
    top_groups = _group_thresholds(data.get("group_thresholds"), "group_thresholds")
    clusters = _clusters(data, overrides, _cluster_defaults(data), thresholds, top_groups)
    compat = _compat(data.get("compat"))
    log_level = str(_top(data, "log_level")).upper()
    if log_level not in LOG_LEVELS:
        raise ConfigError("log_level", f"expected DEBUG, INFO, WARNING or ERROR, got {log_level!r}")
    web_config = data.get("web_config")
    if web_config is not None and not isinstance(web_config, str):
        raise ConfigError("web_config", "expected a file path")
    record_dir = data.get("record_dir")
    if record_dir is not None and not (isinstance(record_dir, str) and os.path.isdir(record_dir)):
        raise ConfigError("record_dir", f"expected an existing directory, got {record_dir!r}")
    return Config(
        clusters=clusters,
        listen=parse_listen(data["listen"]) if "listen" in data else DEFAULT_LISTEN,
        thresholds=thresholds,
        group_thresholds=top_groups,
        compat=compat,
        max_group_partitions=int(_positive(_top(data, "max_group_partitions"), "max_group_partitions",
                                           integer=True)),
        history_points=int(_positive(_top(data, "history_points"), "history_points", minimum=2,
                                     integer=True)),
        log_level=log_level,
        metrics_detail=_metrics_detail(data),
        web_config=web_config,
        record_dir=record_dir,
    )


def _metrics_detail(data: dict[str, Any]) -> MetricsDetail:
    detail = _top(data, "metrics_detail")
    if detail not in METRICS_DETAIL:
        raise ConfigError("metrics_detail", f"expected one of {', '.join(METRICS_DETAIL)}, got {detail!r}")
    return MetricsDetail(detail)


def _top_thresholds(data: dict[str, Any], overrides: dict[str, Any]) -> Thresholds:
    """The file's ``thresholds:``, then the CLI's ``--stall-after`` and ``--livelock-after``."""
    thresholds = _thresholds(data.get("thresholds"), Thresholds())
    th_over = {k: overrides[k] for k in ("stall_after", "livelock_after") if overrides.get(k) is not None}
    if th_over:
        thresholds = replace(thresholds, **{k: _positive(v, f"--{k.replace('_', '-')}")
                                            for k, v in th_over.items()})
    return thresholds


def _cluster_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Top-level settings every cluster inherits unless it sets its own, validated here so
    that errors name the key the operator wrote."""
    defaults = {k: data[k] for k in ("interval", "lag_mode", "request_timeout") if k in data}
    if "interval" in defaults:
        _positive(defaults["interval"], "interval", minimum=0.05)
    if "request_timeout" in defaults:
        _positive(defaults["request_timeout"], "request_timeout")
    if "lag_mode" in defaults and defaults["lag_mode"] not in LAG_MODES:
        raise ConfigError("lag_mode", f"expected one of {', '.join(LAG_MODES)}, got {defaults['lag_mode']!r}")
    return defaults


def _clusters(data: dict[str, Any], overrides: dict[str, Any], defaults: dict[str, Any],
              thresholds: Thresholds, top_groups: tuple[GroupThresholds, ...]) -> tuple[ClusterConfig, ...]:
    """``clusters:``, or the one cluster ``--bootstrap-servers`` names (merged into the
    file's cluster when the file has exactly one), each with its thresholds; names unique."""
    clusters_raw = data.get("clusters")
    if overrides.get("bootstrap_servers"):
        clusters_raw = [{"bootstrap_servers": overrides["bootstrap_servers"],
                         "name": overrides.get("cluster") or DEFAULT_CLUSTER_NAME}]
        if isinstance(data.get("clusters"), list) and len(data["clusters"]) == 1:
            merged = dict(_mapping(data["clusters"][0], "clusters[0]"))
            merged.update(clusters_raw[0])
            clusters_raw = [merged]
    if clusters_raw is None:
        raise ConfigError("clusters", "no cluster configured: pass --bootstrap-servers or a config file")
    if not isinstance(clusters_raw, list) or not clusters_raw:
        raise ConfigError("clusters", "expected a non-empty list of clusters")
    clusters = tuple(_with_thresholds(_cluster(c, f"clusters[{i}]", defaults), c, f"clusters[{i}]",
                                      thresholds, top_groups) for i, c in enumerate(clusters_raw))
    names = [c.name for c in clusters]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise ConfigError(f"clusters[{i}].name", f"duplicate cluster name {n!r}")
    return clusters


def _compat(raw: Any) -> frozenset[str]:
    compat_raw = raw or []
    if isinstance(compat_raw, str):
        compat_raw = [compat_raw]
    if not isinstance(compat_raw, list):
        raise ConfigError("compat", "expected a list")
    for c in compat_raw:
        if c not in COMPAT_MODES:
            known = ", ".join(COMPAT_MODES)
            raise ConfigError("compat", f"unknown compatibility mode {c!r} (known: {known})")
    return frozenset(compat_raw)
