"""Prometheus metrics (prometheus-client): one registry per app so tests and several apps in one
process do not collide."""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)


class Family(Generic[M]):
    """A labelled metric whose children are looked up once per label tuple: prometheus-client's
    `labels()` validates and locks on every call, a few µs each, several times per job. Label values
    here come from small fixed sets (statuses, directions, route templates), so the cache is bounded."""

    def __init__(self, metric: M) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.jobs_created = Family(Counter("gateway_jobs_created", "Jobs accepted", ["mode"], registry=r))
        self.jobs_finished = Family(
            Counter("gateway_jobs_finished", "Jobs that reached a terminal status", ["status"], registry=r)
        )
        self.filter_seconds = Family(
            Histogram(
                "gateway_filter_seconds",
                "Time to filter one message",
                ["direction"],
                buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0),
                registry=r,
            )
        )
        self.webhook_attempts = Family(
            Counter("gateway_webhook_attempts", "Webhook attempts by outcome", ["outcome"], registry=r)
        )
        self.webhook_seconds = Histogram(
            "gateway_webhook_seconds",
            "Webhook attempt duration",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.http_requests = Family(
            Counter(
                "gateway_http_requests", "API requests by route and status", ["route", "status"], registry=r
            )
        )
        self.queue_depth = Family(Gauge("gateway_queue_depth", "Jobs per queue", ["queue"], registry=r))
        self.queue_oldest = Family(
            Gauge("gateway_queue_oldest_age_seconds", "Oldest job per queue", ["queue"], registry=r)
        )
