"""The service's Prometheus metrics (`GET /metrics` when `metrics_enabled`): one registry per process.

Every metric of the service is defined here, once; the code that observes something calls a
method or a metric of `ServiceMetrics` (e.g. the checkpoint pruning helper calls
`checkpoint_pruned(checkpoints, bytes_freed)`). On several processes each exposes its own numbers;
Prometheus scrapes each process and sums.
"""

from __future__ import annotations

from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

METRICS_CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
#: Latencies from milliseconds to minutes (time to first event/token, queue wait, summary calls).
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs_finished = Counter(
            "ctxpress_runs_finished", "Runs that ended, by outcome.", ["outcome"], registry=r
        )
        self.runs_active = Gauge("ctxpress_runs_active", "Runs executing in this process.", registry=r)
        self.queue_depth = Gauge(
            "ctxpress_queue_depth", "Queued runs (all processes; read at scrape time).", registry=r
        )
        self.queue_wait = Histogram(
            "ctxpress_queue_wait_seconds",
            "From a run's creation to its start.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.run_start_yield = Histogram(
            "ctxpress_run_start_yield_seconds",
            "How long a run's first step waited for the messages this process was accepting.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.first_event = Histogram(
            "ctxpress_time_to_first_event_seconds",
            "From a run's creation to its run_started event.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.first_token = Histogram(
            "ctxpress_time_to_first_token_seconds",
            "From a run's creation to its first message_delta.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.sse_clients = Gauge("ctxpress_sse_clients", "Open SSE run streams on this process.", registry=r)
        self.live_published = Counter(
            "ctxpress_live_events_published", "Events handed to the live bus.", registry=r
        )
        self.live_delivered = Counter(
            "ctxpress_live_events_delivered",
            "Events written to SSE clients, by where they were read: sql or bus.",
            ["source"],
            registry=r,
        )
        self.live_dropped = Counter(
            "ctxpress_live_events_dropped",
            "Live events lost: a slow client's full queue or an unreachable bus.",
            registry=r,
        )
        self.stream_watch_reads = Counter(
            "ctxpress_stream_watch_reads",
            "Reads of the silent-stream watch (PostgreSQL without Redis): one transaction each, for "
            "all of the process's streams.",
            registry=r,
        )
        self.stream_watch_wakes = Counter(
            "ctxpress_stream_watch_wakes",
            "Streams the silent-stream watch woke to read their run's new stored events or its end.",
            registry=r,
        )
        self.compression_events = Counter(
            "ctxpress_compression_events",
            "context_compression events, by level and status.",
            ["level", "status"],
            registry=r,
        )
        self.compression_tokens_before = Counter(
            "ctxpress_compression_tokens_before",
            "Estimated request tokens before completed compressions, by level.",
            ["level"],
            registry=r,
        )
        self.compression_tokens_after = Counter(
            "ctxpress_compression_tokens_after",
            "Estimated request tokens after completed compressions, by level.",
            ["level"],
            registry=r,
        )
        self.summary_latency = Histogram(
            "ctxpress_summary_seconds",
            "L2 compressions: from started to completed (the summary-model call and the history file).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.summary_failures = Counter(
            "ctxpress_summary_failures",
            "L2 compressions that failed or completed without a model summary.",
            registry=r,
        )
        self.checkpoint_prunes = Counter(
            "ctxpress_checkpoint_prunes",
            "Prunes of a conversation's checkpoints to its latest one, by outcome (done, failed).",
            ["outcome"],
            registry=r,
        )
        self.checkpoints_pruned = Counter(
            "ctxpress_checkpoints_pruned",
            "Checkpoints removed by pruning (SQLite; PostgreSQL's saver does not report them).",
            registry=r,
        )
        self.checkpoint_bytes_pruned = Counter(
            "ctxpress_checkpoint_bytes_pruned",
            "Bytes of checkpoints and their writes removed by pruning (SQLite; as above).",
            registry=r,
        )

    def checkpoint_pruned(self, checkpoints: int, bytes_freed: int) -> None:
        self.checkpoints_pruned.inc(max(0, checkpoints))
        self.checkpoint_bytes_pruned.inc(max(0, bytes_freed))

    def compression_event(self, data: dict[str, Any]) -> None:
        """Count one `context_compression` event (its payload, `ctxpress.events`)."""
        level, status = str(data.get("level", "")), str(data.get("status", ""))
        self.compression_events.labels(level=level, status=status).inc()
        if status == "completed":
            self.compression_tokens_before.labels(level=level).inc(_count(data.get("tokens_before")))
            self.compression_tokens_after.labels(level=level).inc(_count(data.get("tokens_after")))
        if level == "l2" and (status == "failed" or (status == "completed" and data.get("summary_error"))):
            self.summary_failures.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0
