"""Prometheus text exposition (format 0.0.4) of the core's metrics, written as BookKeeper's
Prometheus provider writes them: counters and gauges under their plain names, latency summaries
in milliseconds with quantiles and ``_count``/``_sum`` per ``success`` label, histograms with
``le`` buckets; then whatever the process's ``prometheus_client`` registry holds. It formats; it
never decides which metrics exist.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, generate_latest

from pybkx._core import HistogramSnapshot
from pybkx.admin.quantiles import QUANTILES, Windows, quantile

if TYPE_CHECKING:
    from pybkx._core import Metric

__all__ = ["CONTENT_TYPE", "PrometheusText"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{key}="{_escape(value)}"' for key, value in pairs)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _braced(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + _labels(pairs) + "}" if pairs else ""


class PrometheusText:
    """Renders metric read-outs; keeps the summaries' rolling windows between renders."""

    def __init__(self, rollover_s: float) -> None:
        self._windows = Windows(rollover_s)

    def render(self, metrics: Iterable[Metric], *, process_registry: bool = True) -> str:
        """The exposition text of ``metrics`` (grouped by name, one ``# TYPE`` line each),
        followed by the process's ``prometheus_client`` registry unless told otherwise."""
        lines: list[str] = []
        typed: set[str] = set()
        for metric in _grouped(metrics):
            name, kind, unit, value = metric.name, metric.kind, metric.unit, metric.value
            if name not in typed:
                typed.add(name)
                lines.append(f"# TYPE {name} {kind}")
            extra = sorted(metric.labels.items())
            if kind in ("counter", "gauge"):
                assert isinstance(value, int | float)
                shown = str(value) if isinstance(value, int) else _number(value)
                lines.append(f"{name}{_braced(extra)} {shown}")
            elif kind == "summary":
                assert isinstance(value, dict)
                for success in ("false", "true"):
                    lines += self._summary(name, unit, extra, success, value[success])
            else:
                assert isinstance(value, HistogramSnapshot)
                lines += _histogram(name, unit, extra, value)
        text = "\n".join(lines) + "\n"
        if process_registry:
            text += generate_latest(REGISTRY).decode()
        return text

    def _summary(
        self,
        name: str,
        unit: str,
        extra: list[tuple[str, str]],
        success: str,
        snapshot: HistogramSnapshot,
    ) -> list[str]:
        scale = _scale(unit)
        window = self._windows.last_complete((name, tuple(extra), success), snapshot.buckets)
        # BookKeeper writes the outcome and quantile first, then the other labels after ", ".
        tail = (", " + _labels(extra)) if extra else ""
        out = []
        for q in QUANTILES:
            value = math.nan if window is None else quantile(window, q) * scale
            out.append(f'{name}{{success="{success}",quantile="{q!r}"{tail}}} {_number(value)}')
        out.append(f'{name}_count{{success="{success}"{tail}}} {snapshot.count}')
        out.append(f'{name}_sum{{success="{success}"{tail}}} {_number(snapshot.sum * scale)}')
        return out


def _scale(unit: str) -> float:
    """Latencies are recorded in microseconds and exported in milliseconds, as BookKeeper."""
    return 0.001 if unit == "us" else 1.0


def _histogram(
    name: str, unit: str, extra: list[tuple[str, str]], snapshot: HistogramSnapshot
) -> list[str]:
    buckets = snapshot.buckets
    scale = _scale(unit)
    out = []
    cumulative = 0
    for upper, n in buckets:
        cumulative += n
        le = "+Inf" if upper is None else _number(upper * scale)
        out.append(f"{name}_bucket{_braced([*extra, ('le', le)])} {cumulative}")
    if not buckets or buckets[-1][0] is not None:
        out.append(f"{name}_bucket{_braced([*extra, ('le', '+Inf')])} {cumulative}")
    out.append(f"{name}_count{_braced(extra)} {snapshot.count}")
    out.append(f"{name}_sum{_braced(extra)} {_number(snapshot.sum * scale)}")
    return out


def _grouped(metrics: Iterable[Metric]) -> list[Metric]:
    """Metrics with the same name next to each other, in order of first appearance."""
    order: dict[str, list[Metric]] = {}
    for metric in metrics:
        order.setdefault(metric.name, []).append(metric)
    return [m for group in order.values() for m in group]
