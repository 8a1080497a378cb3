"""The human status page at ``/``: server-rendered HTML, no JavaScript build.

Every name that came from Kafka or a report is escaped with html.escape.
"""

from __future__ import annotations

import html
import time

from exporter.contracts.reports import CommitMode
from exporter.contracts.view import SEVERITY, ClusterView, GroupView
from exporter.evaluate.rates import fmt_duration

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em} h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;width:100%;font-size:.9em}
th,td{border-bottom:1px solid #ddd;padding:.35em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
.st{font-weight:600;padding:.1em .45em;border-radius:.3em;color:#fff}
.ok{background:#2e7d32}.lagging{background:#f9a825;color:#222}.rewind{background:#6a1b9a}
.stalled{background:#ef6c00}.livelocked{background:#c62828}.stopped{background:#424242}
.error{background:#000}.reason{color:#555;font-size:.85em;word-break:break-word}
.down{color:#c62828;font-weight:600}
"""


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


def _num(v: float | int | None, unit: str = "") -> str:
    if v is None:
        return "&ndash;"
    if isinstance(v, float):
        return f"{v:,.1f}{unit}"
    return f"{v:,}{unit}"


def _eta(g: GroupView) -> str:
    """Time to catch up at current rates; "falling behind" when it never will."""
    pr = g.progress
    if pr is None or pr.consume_rate is None:
        return "&ndash;"
    if pr.catchup_seconds is not None:
        return _e(f"~{fmt_duration(pr.catchup_seconds)}")
    return "<span class='down'>falling behind</span>" if pr.falling_behind else "&ndash;"


def _lost(g: GroupView) -> str:
    pr = g.progress
    if pr is None or not pr.records_lost_total:
        return _num(0 if pr else None)
    return f"<span class='down'>{_num(pr.records_lost_total)}</span>"


def _below(g: GroupView) -> str:
    """Records between the committed offsets and the log start now, counted or not."""
    pr = g.progress
    if pr is None or not pr.below_log_start:
        return _num(0 if pr else None)
    return f"<span class='down'>{_num(pr.below_log_start)}</span>"


def _rebalances(g: GroupView) -> str:
    """Rebalances within the storm window, and since lagwatch watches the group."""
    rb = g.rebalances
    if rb is None:
        return "&ndash;"
    text = _e(f"{rb.recent} / {rb.total}")
    return f"<span class='down'>{text}</span>" if rb.storm else text


def commit_mode_text(mode: CommitMode | None, interval: float | None) -> str:
    """"auto every 5s", "manual", "mixed" or "" (not reported)."""
    if mode == CommitMode.AUTO and interval is not None:
        return f"auto every {fmt_duration(interval)}"
    return mode or ""


def _exposure(g: GroupView) -> str:
    """Records a crash now would deliver again, and the commit mode the members report."""
    ex = g.exposure
    if ex is None:
        return "&ndash;"
    mode = commit_mode_text(ex.commit_mode, ex.auto_commit_interval)
    return f"{_num(ex.records)}" + (f" <span class='reason'>{_e(mode)}</span>" if mode else "")


def render(views: list[ClusterView], refresh_seconds: int = 10, now: float | None = None) -> str:
    now = time.time() if now is None else now
    out = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta http-equiv='refresh' content='{int(refresh_seconds)}'>",
        "<title>lagwatch</title>", f"<style>{_CSS}</style></head><body>",
        "<h1>lagwatch: consumer groups and Spark queries</h1>",
    ]
    for v in views:
        age = f"data {now - v.sampled_at:.0f}s old" if v.sampled_at else "no data yet"
        state = "" if v.up else f" <span class='down'>unreachable: {_e(v.last_error)}</span>"
        out.append(f"<h2>cluster {_e(v.cluster)} <small>({age}, {v.brokers} broker(s))"
                   f"</small>{state}</h2>")
        out.append("<table><thead><tr><th>group / query</th><th>type</th><th>status</th>"
                   "<th>lag (offsets)</th><th>lag (seconds)</th><th>members</th>"
                   "<th>reason</th><th>catch-up</th><th>records lost</th>"
                   "<th title='records between the committed offsets and the log start now, "
                   "deleted unread whenever that was'>below log start</th>"
                   "<th title='records fetched and not committed: a crash or a rebalance now "
                   "delivers them again'>redelivery exposure</th>"
                   "<th title='in the storm window / since watched'>rebalances</th></tr></thead><tbody>")
        groups = sorted(v.groups.values(), key=lambda g: (-SEVERITY[g.status], g.group))
        if not groups:
            out.append("<tr><td colspan='12'>no consumer groups seen</td></tr>")
        for g in groups:
            members = ", ".join(f"{m.client_id}@{m.host}" for m in g.members[:5])
            if len(g.members) > 5:
                members += f" (+{len(g.members) - 5})"
            reason = "<br>".join(_e(r) for r in (*g.reasons, *g.notes))
            out.append(
                f"<tr class='group' data-status='{_e(g.status)}'><td>{_e(g.group)}</td>"
                f"<td>{_e(g.type)}</td><td><span class='st {_e(g.status)}'>{_e(g.status)}</span>"
                f"</td><td class='num'>{_num(g.total_lag)}</td>"
                f"<td class='num'>{_num(g.max_lag_seconds)}</td>"
                f"<td>{len(g.members)} <span class='reason'>{_e(members)}</span></td>"
                f"<td class='reason'>{reason}</td>"
                f"<td class='num'>{_eta(g)}</td><td class='num'>{_lost(g)}</td>"
                f"<td class='num below'>{_below(g)}</td>"
                f"<td class='num exposure'>{_exposure(g)}</td>"
                f"<td class='num'>{_rebalances(g)}</td></tr>")
        out.append("</tbody></table>")
    out.append(f"<p class='reason'>refreshes every {int(refresh_seconds)}s &middot; "
               "<a href='/metrics'>/metrics</a> &middot; <a href='/api/v1/clusters'>API</a></p>")
    out.append("</body></html>")
    return "".join(out)
