"""GET /metrics (Prometheus text format) when `metrics_enabled`; 404 when not."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.testing.api import create_conversation, read_events, send

from .conftest import ServerFactory
from .test_sse import echo_agent


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_of_a_run(start_server: ServerFactory) -> None:
    server = start_server(agents=[echo_agent()], metrics_enabled=True)
    alice = server.client(server.create_user("alice"))
    events = read_events(alice, send(alice, create_conversation(alice), "数一数")["run"]["id"])
    assert events[-1].type == "run_finished"

    response = server.client().get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    values = samples(response.text)
    assert values[("ctxpress_runs_finished_total", (("outcome", "succeeded"),))] == 1
    assert values[("ctxpress_time_to_first_event_seconds_count", ())] == 1
    assert values[("ctxpress_time_to_first_token_seconds_count", ())] == 1
    assert values[("ctxpress_queue_wait_seconds_count", ())] == 1
    assert values[("ctxpress_run_start_yield_seconds_count", ())] == 1
    assert values[("ctxpress_queue_depth", ())] == 0
    assert values[("ctxpress_sse_clients", ())] == 0  # the stream above has ended
    assert values[("ctxpress_live_events_published_total", ())] >= len(events)
    delivered = sum(v for (name, _), v in values.items() if name == "ctxpress_live_events_delivered_total")
    assert delivered == len(events)
    assert values[("ctxpress_live_events_dropped_total", ())] == 0


def test_metrics_are_off_by_default(start_server: ServerFactory) -> None:
    server = start_server(agents=[echo_agent()])
    assert server.client().get("/metrics").status_code == 404


def test_compression_and_pruning_counters() -> None:
    metrics = ServiceMetrics()
    metrics.compression_event({"type": "context_compression", "status": "started", "level": "l2"})
    metrics.compression_event(
        {
            "status": "completed",
            "level": "l2",
            "tokens_before": 9000,
            "tokens_after": 2000,
            "summary_error": "x",
        }
    )
    metrics.compression_event(
        {"status": "completed", "level": "l1", "tokens_before": 5000, "tokens_after": 4000}
    )
    metrics.compression_event({"status": "failed", "level": "l2", "error": "model down"})
    metrics.checkpoint_pruned(checkpoints=12, bytes_freed=34_000)
    values = samples(metrics.exposition().decode())
    assert values[("ctxpress_compression_events_total", (("level", "l2"), ("status", "completed")))] == 1
    assert values[("ctxpress_compression_events_total", (("level", "l2"), ("status", "failed")))] == 1
    assert values[("ctxpress_compression_tokens_before_total", (("level", "l1"),))] == 5000
    assert values[("ctxpress_compression_tokens_after_total", (("level", "l2"),))] == 2000
    assert values[("ctxpress_summary_failures_total", ())] == 2  # the failure and the fallback summary
    assert values[("ctxpress_checkpoints_pruned_total", ())] == 12
    assert values[("ctxpress_checkpoint_bytes_pruned_total", ())] == 34_000


def test_prunes_after_runs_are_counted(start_server: ServerFactory, backend: str) -> None:
    """Each run ends by pruning its conversation to the latest checkpoint (issue 16); the operator sees
    every prune and what it removed, on both databases."""
    server = start_server(agents=[echo_agent()], metrics_enabled=True)
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    for text in ("一", "二"):
        assert read_events(alice, send(alice, conversation_id, text)["run"]["id"])[-1].type == "run_finished"

    values = samples(server.client().get("/metrics").text)
    assert values[("ctxpress_checkpoint_prunes_total", (("outcome", "done"),))] >= 2
    assert values.get(("ctxpress_checkpoint_prunes_total", (("outcome", "failed"),)), 0) == 0
    removed = values[("ctxpress_checkpoints_pruned_total", ())]
    removed_bytes = values[("ctxpress_checkpoint_bytes_pruned_total", ())]
    # Every run wrote several checkpoints, all but the last removed.
    assert removed >= 2 and removed_bytes > 0
