"""Operating a bookie: its metrics in Prometheus text under BookKeeper's names, BookKeeper's HTTP
admin API, and ``pybkx top``. It observes and administers bookies; it never moves entries.

``services_for(config)`` gives the HTTP services a bookie runs (``pybkx bookie`` starts them).
"""

from pybkx.admin.prometheus import CONTENT_TYPE, PrometheusText
from pybkx.admin.services import AdminHttpService, MetricsHttpService, services_for

__all__ = [
    "CONTENT_TYPE",
    "AdminHttpService",
    "MetricsHttpService",
    "PrometheusText",
    "services_for",
]
