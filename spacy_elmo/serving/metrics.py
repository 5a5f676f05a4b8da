"""What ``GET /metrics`` shows, in Prometheus's text format (``prometheus_client``, which Ray Serve
brings): requests by route and status, their latency, the batches' sizes in docs and tokens, the
requests in the service and waiting for a batch, and replicas lost and restarted.

The gateway keeps these: it sees every request, and each answer tells it the replica that ran it and
the batch it ran in (one answer of each batch reports the batch, so each counts once).
"""

from __future__ import annotations

from typing import Set

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .batcher import BatchFigures

CONTENT_TYPE = CONTENT_TYPE_LATEST
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
DOC_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


class ServiceMetrics:
    """The service's metrics, in a registry of their own (one gateway, one set)."""

    def __init__(self, replicas: int) -> None:
        self.registry = CollectorRegistry()
        self.replicas = replicas
        self.requests = Counter(
            "spacy_elmo_requests", "Requests answered, by route and status", ["route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "spacy_elmo_request_seconds",
            "Time from a request's arrival to its answer, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_docs = Histogram(
            "spacy_elmo_batch_docs", "Docs in each batch a replica ran", buckets=DOC_BUCKETS, registry=self.registry
        )
        self.batch_tokens = Histogram(
            "spacy_elmo_batch_tokens", "Tokens in each batch run", buckets=TOKEN_BUCKETS, registry=self.registry
        )
        self.in_service = Gauge(
            "spacy_elmo_requests_in_service", "Embedding requests admitted and not yet answered", registry=self.registry
        )
        self.queue_depth = Gauge(
            "spacy_elmo_queue_depth",
            "Requests a replica left waiting when its last batch started",
            registry=self.registry,
        )
        self.replicas_lost = Counter(
            "spacy_elmo_replica_failures", "Requests whose replica died or was unreachable", registry=self.registry
        )
        self.restarts = Counter(
            "spacy_elmo_replica_restarts", "Replicas beyond the ones started first", registry=self.registry
        )
        self._seen_replicas: Set[str] = set()

    def answered(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def ran(self, replica: str, batch: BatchFigures) -> None:
        """An answer came from ``replica``, out of ``batch``: count the replica, and the batch where
        this answer is the one that reports it."""
        if replica not in self._seen_replicas:
            self._seen_replicas.add(replica)
            if len(self._seen_replicas) > self.replicas:
                self.restarts.inc()
        self.queue_depth.set(batch.waiting)
        if batch.reports:
            self.batch_docs.observe(batch.docs)
            self.batch_tokens.observe(batch.tokens)

    def text(self) -> bytes:
        """The Prometheus exposition of every metric."""
        return generate_latest(self.registry)
