"""The Grafana dashboard in docs/grafana: valid JSON whose every query names metrics a pybkx
bookie exports (so it keeps working as metrics change). Owns this check only."""

from __future__ import annotations

import json
import re
from pathlib import Path

from admin_helpers import http
from prometheus_client.parser import text_string_to_metric_families

from pybkx.tools.sandbox import Sandbox

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "pybkx-bookies.json"
PROMQL_WORDS = {
    "sum",
    "by",
    "rate",
    "max",
    "count",
    "or",
    "vector",
    "instance",
    "le",
    "histogram_quantile",
    "success",
    "quantile",
    "__name__",
}


def test_every_dashboard_query_names_exported_metrics(cluster: Sandbox) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["panels"]
    text = http("GET", f"{cluster.admin_urls[0]}/metrics").text
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    exported |= {name.removesuffix("_total") for name in exported}
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = re.sub(r'"[^"]*"|\[[^\]]*\]|\{[^}]*\}', "", target["expr"])
            names = {w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr)} - PROMQL_WORDS
            missing = names - exported
            assert not missing, (panel["title"], missing)
            pattern = re.search(r'__name__=~"([^"]+)"', target["expr"])
            if pattern is None:
                assert names, target["expr"]
            else:
                assert any(re.fullmatch(pattern.group(1), n) for n in exported), target["expr"]
