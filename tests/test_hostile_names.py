"""Hostile names from a real broker come out exact and escaped in every format, and the
cardinality guard drops the least interesting groups first.

Group ids and client ids can hold almost anything (quotes, backslashes, newlines,
markup, unicode, 2000 characters); topic names only ``[a-zA-Z0-9._-]`` up to 249
characters. All of them must round-trip exactly through the Prometheus text
format, OpenMetrics, the JSON API (group id URL-encoded in the path) and the HTML
status page, and never break out of their label value, JSON string or table cell.
"""

from __future__ import annotations

import html
import json
import os
import threading
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families as prom_families

from devenv.kafka import KafkaCluster
from lagwatch_client import InstrumentedConsumer
from tests.conftest import commit_offsets, create_topic, exporter_config, produce, unique, wait_for
from tests.support.exporter_proc import ExporterProcess, parse_metrics, select, value

HOSTILE_SUFFIXES = {
    "dquote": 'say "hi"',
    "squote": "it's",
    "backslash": "back\\slash\\",
    "newline": "new\nline\r\nand\ttab",
    "html": "<script>alert('x')</script>&amp;",
    "injection": 'x"} 1\nfake_metric{a="b"} 2\n# HELP fake_metric',
    "unicode": "grüße/組/🚀/ÿ\u200b",
    "url": "a/b%2Fc?x=1#frag ..",
    "long": "L" * 2000,
}
HOSTILE_CLIENT_ID = 'cli"ent\n<i>ü\\ 🚀'
COMMITS = {0: 3, 1: 10}  # partition -> committed offset; each partition holds 10 records


class LiveMember(threading.Thread):
    """An instrumented consumer with a hostile client id: consumes, commits, keeps polling."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = InstrumentedConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "client.id": HOSTILE_CLIENT_ID,
             "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000},
            report_interval=1.0, cluster="test")
        self.topic = topic
        self.stop_flag = threading.Event()
        self.assigned = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self.stop_flag.is_set():
            msg = self.consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.consumer.commit(msg, asynchronous=False)
            if self.consumer.assignment():
                self.assigned.set()
        self.consumer.close()


@pytest.fixture(scope="module")
def hostile(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    bs = kafka.bootstrap_servers
    prefix = unique("hn")
    topic_dots = create_topic(kafka, f"{prefix}.dotted_topic-name.", partitions=2)
    long_topic = f"{prefix}_" + "t" * (249 - len(prefix) - 1)
    assert len(long_topic) == 249
    create_topic(kafka, long_topic, partitions=2)
    for t in (topic_dots, long_topic):
        produce(kafka, t, {0: 10, 1: 10})
    groups = {k: f"{prefix}-{v}" for k, v in HOSTILE_SUFFIXES.items()}
    for g in groups.values():
        commit_offsets(bs, g, topic_dots, COMMITS)
        commit_offsets(bs, g, long_topic, COMMITS)
    member_group = f'{prefix}-member "\n<b>'
    member = LiveMember(bs, member_group, topic_dots)
    member.start()
    assert member.assigned.wait(30), "the hostile-client-id consumer never got its partitions"
    cfg = exporter_config(tmp_path_factory.mktemp("hostile"), bs, clusters=[
        {"name": "test", "bootstrap_servers": bs, "groups": {"allow": f"^{prefix}-"}}])
    exp = ExporterProcess(None, config=cfg)
    try:
        exp.wait_ready()
        all_groups = [*groups.values(), member_group]

        last: dict = {}

        def member_reported() -> bool:
            m = exp.metrics()
            got = select(m, "kafka_consumergroup_member_last_poll_age_seconds", group=member_group)
            seen = {dict(lab)["group"] for lab in select(m, "kafka_consumergroup_info")}
            last.update(missing=set(all_groups) - seen, extra=seen - set(all_groups), poll_age=got,
                        reports=select(m, "lagwatch_reports_received_total"),
                        dropped=select(m, "lagwatch_reports_dropped_total"),
                        members=exp.api(f"clusters/test/groups/{quote(member_group, safe='')}")["members"]
                        if member_group in seen else None)
            pos = select(m, "kafka_consumergroup_position_offset", group=member_group)
            return bool(got) and seen == set(all_groups) and sorted(pos.values()) == [10, 10]

        try:
            wait_for(member_reported, 60, "every hostile group and the instrumented member in /metrics")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{last}\n{exp.output()[-3000:]}") from None
        yield {"exp": exp, "groups": groups, "member_group": member_group, "all_groups": all_groups,
               "topics": (topic_dots, long_topic)}
    finally:
        exp.stop()
        os.unlink(exp.log.name)
        member.stop_flag.set()
        member.join(15)


def test_prometheus_text_round_trips(hostile: dict) -> None:
    exp: ExporterProcess = hostile["exp"]
    code, body, headers = exp.get("/metrics")
    assert code == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    fams = {f.name: f for f in prom_families(text)}  # the reference parser accepts the whole page
    assert "fake_metric" not in fams, "a group id broke out of its label value"
    m = parse_metrics(text)
    info_groups = sorted(dict(lab)["group"] for lab in select(m, "kafka_consumergroup_info"))
    assert info_groups == sorted(hostile["all_groups"])
    for g in hostile["groups"].values():
        for topic in hostile["topics"]:
            for p, off in COMMITS.items():
                assert value(m, "kafka_consumergroup_committed_offset", group=g, topic=topic,
                             partition=str(p)) == off, (g, topic, p)
                assert value(m, "kafka_consumergroup_lag_offsets", group=g, topic=topic,
                             partition=str(p)) == 10 - off
    ages = select(m, "kafka_consumergroup_member_last_poll_age_seconds", group=hostile["member_group"])
    assert [dict(lab)["client_id"] for lab in ages] == [HOSTILE_CLIENT_ID]
    # it reports while it keeps polling (its reporter thread never waits on the busy consumer)
    assert list(ages.values())[0] < 10
    # escaping as the text format defines it: \\, \" and \n inside the quoted label value
    assert 'group="' + hostile["groups"]["injection"].replace("\\", "\\\\").replace('"', '\\"').replace(
        "\n", "\\n") + '"' in text


def test_openmetrics_round_trips(hostile: dict) -> None:
    exp: ExporterProcess = hostile["exp"]
    code, body, headers = exp.get("/metrics", headers={
        "Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"})
    assert code == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n")
    samples = [s for f in om_families(text) for s in f.samples]
    info = sorted(s.labels["group"] for s in samples if s.name == "kafka_consumergroup_info")
    assert info == sorted(hostile["all_groups"])
    committed = {(s.labels["group"], s.labels["topic"], s.labels["partition"]): s.value for s in samples
                 if s.name == "kafka_consumergroup_committed_offset"}
    for g in hostile["groups"].values():
        for topic in hostile["topics"]:
            assert committed[(g, topic, "0")] == 3 and committed[(g, topic, "1")] == 10
    assert [s.labels["client_id"] for s in samples
            if s.name == "kafka_consumergroup_member_last_poll_age_seconds"] == [HOSTILE_CLIENT_ID]


def test_json_api_round_trips(hostile: dict) -> None:
    exp: ExporterProcess = hostile["exp"]
    summaries = exp.api("clusters/test/groups")
    assert sorted(s["group"] for s in summaries) == sorted(hostile["all_groups"])
    for g in hostile["groups"].values():
        doc = exp.api(f"clusters/test/groups/{quote(g, safe='')}")
        assert doc["group"] == g
        got = {(p["topic"], p["partition"]): p["committed_offset"] for p in doc["partitions"]}
        assert got == {(t, p): o for t in hostile["topics"] for p, o in COMMITS.items()}
    # '/' left unencoded in the path still reaches the group (group ids may contain '/')
    g = hostile["groups"]["unicode"]
    assert exp.api(f"clusters/test/groups/{quote(g, safe='/')}")["group"] == g
    doc = exp.api(f"clusters/test/groups/{quote(hostile['member_group'], safe='')}")
    assert [m["client_id"] for m in doc["members"]] == [HOSTILE_CLIENT_ID]
    # the raw bytes are valid UTF-8 JSON, with no NaN or Infinity tokens
    code, body, headers = exp.get("/api/v1/clusters/test/groups")
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    json.loads(body.decode("utf-8"), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


class _Cells(HTMLParser):
    """Text of the first cell of every group row, and of the members cell."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._in_row = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr" and ("class", "group") in attrs:
            self._in_row = True
            self.rows.append([])
        elif tag == "td" and self._in_row:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "tr":
            self._in_row = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_status_page_escapes(hostile: dict) -> None:
    exp: ExporterProcess = hostile["exp"]
    code, body, headers = exp.get("/")
    assert code == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    page = body.decode()
    for g in hostile["all_groups"]:
        assert html.escape(g, quote=True) in page
    for k in ("dquote", "html", "injection"):
        assert hostile["groups"][k] not in page  # never raw
    assert "<script>" not in page and "<b>" not in page and "<i>" not in page
    assert html.escape(HOSTILE_CLIENT_ID) in page
    # and a browser reading the page sees each name exactly
    cells = _Cells()
    cells.feed(page)
    assert sorted(r[0] for r in cells.rows) == sorted(hostile["all_groups"])
    member_row = next(r for r in cells.rows if r[0] == hostile["member_group"])
    assert f"{HOSTILE_CLIENT_ID}@" in member_row[5]


# -- cardinality guard ---------------------------------------------------------------

def test_cardinality_guard_keeps_the_worst_groups(kafka: KafkaCluster, tmp_path: Path) -> None:
    """max_group_partitions=6 with five 3-partition groups: the two `stopped` groups are kept
    (although they sort last by name), the three `ok` ones are dropped and counted: 9."""
    bs = kafka.bootstrap_servers
    prefix = f"cap-{uuid.uuid4().hex[:8]}"
    topic = create_topic(kafka, f"{prefix}-t", partitions=3)
    produce(kafka, topic, {0: 10, 1: 10, 2: 10})
    ok_groups = [f"{prefix}-a{i}" for i in range(3)]
    worst = [f"{prefix}-z{i}" for i in range(2)]
    for g in ok_groups:
        commit_offsets(bs, g, topic, {0: 10, 1: 10, 2: 10})  # caught up: ok
    for g in worst:
        commit_offsets(bs, g, topic, {0: 0, 1: 0, 2: 0})  # lag 10 and nobody consuming: stopped
    cfg = exporter_config(tmp_path, bs, max_group_partitions=6, clusters=[
        {"name": "test", "bootstrap_servers": bs, "groups": {"allow": f"^{prefix}-"}}])
    with ExporterProcess(None, config=cfg) as exp:
        exp.wait_ready()

        last: list = []

        def capped() -> bool:
            m = exp.metrics()
            dropped = value(m, "lagwatch_dropped_group_partitions", cluster="test")
            seen = sorted(dict(lab)["group"] for lab in select(m, "kafka_consumergroup_info"))
            last[:] = [dropped, seen]
            return dropped == 9 and seen == worst

        try:
            wait_for(capped, 30, "the cap to keep exactly the two stopped groups")
        except AssertionError as e:
            raise AssertionError(f"{e}; last [dropped, groups]: {last}") from None
        m = exp.metrics()
        for g in worst:
            assert value(m, "kafka_consumergroup_status", group=g, status="stopped") == 1
            assert len(select(m, "kafka_consumergroup_committed_offset", group=g)) == 3
        assert not any(dict(lab).get("group", "").startswith(f"{prefix}-a") for (_, lab) in m)
        assert sorted(s["group"] for s in exp.api("clusters/test/groups")) == worst
