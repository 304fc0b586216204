"""The symptom table, one check per row, each on one conversation's snapshot.

Every check looks only at this conversation's own runs, checkpoint and workdir: S29 forbids
inferring one run's result from a neighbouring run's summary files or messages, so a finding always
names the run (or the checkpoint) it comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage, ToolMessage

from ctxpress.app.doctor.findings import Finding
from ctxpress.app.doctor.readonly_workdir import ReadThroughWorkdir
from ctxpress.app.doctor.snapshot import ConversationSnapshot, RunFacts, StoredEvent
from ctxpress.app.models.reply import BUILTIN_LABEL
from ctxpress.app.server.db.models import RUN_QUEUED, RUN_RUNNING, RUN_WAITING_INPUT
from ctxpress.app.server.errors import ErrorCode
from ctxpress.app.server.runtime.events import ERROR, MESSAGE, RUN_FINISHED
from ctxpress.compaction import CompactionCache, compact_view
from ctxpress.compaction.content import content_text
from ctxpress.events import COMPLETED, CONTEXT_COMPRESSION, CONTEXT_PRESSURE, FAILED, L2, STARTED
from ctxpress.summary.event import SUMMARY_MARKER, effective_messages
from ctxpress.summary.history import read_history
from ctxpress.summary.recovery import RecoveryError, recover_messages
from ctxpress.summary.summarizer import summary_output_budget
from ctxpress.tokens import TokenCounter
from ctxpress.workdir import WorkdirError

OVERFLOW_WORDS = (
    "ContextOverflowError",
    "context length",
    "context window",
    "context size",
    "too long",
    "上下文",
)
#: A piece of the current summary this long found in the chat record means it leaked (S21).
LEAK_PROBE_CHARS = 60
SUMMARY_TITLES = ("【抽取式摘要】", "[Extractive summary]")
LARGEST_SHOWN = 3

Check = Callable[[ConversationSnapshot, int | None], Finding]


def _when(event: StoredEvent) -> str:
    return event.created_at.strftime("%Y-%m-%d %H:%M:%S")


def check_started_not_completed(snapshot: ConversationSnapshot, _window: int | None = None) -> Finding:
    """S20: every `started` is followed by `completed` or `failed` in the same run."""
    problems: list[str] = []
    details: list[str] = []
    in_progress: list[str] = []
    events_seen = 0
    for run in snapshot.runs:
        open_event: StoredEvent | None = None
        unmatched: list[StoredEvent] = []
        for event in run.events_of(CONTEXT_COMPRESSION):
            events_seen += 1
            status = event.data.get("status")
            if status == STARTED:
                if open_event is not None:
                    unmatched.append(open_event)
                open_event = event
            elif status in (COMPLETED, FAILED):
                open_event = None
                if status == FAILED:
                    problems.append(
                        f"run {run.id}: {event.data.get('level', '?')} compression failed at {_when(event)}: "
                        f"{event.data.get('error', '(no error text)')}"
                    )
        if open_event is not None and run.status == RUN_RUNNING:
            in_progress.append(
                f"run {run.id} is running: its {open_event.data.get('level')} compression is in progress"
            )
        elif open_event is not None:
            unmatched.append(open_event)
        for event in unmatched:
            problems.append(
                f"run {run.id} ({run.status}, attempt {run.attempts}): {event.data.get('level', '?')} compression "
                f"started at {_when(event)} (estimate {event.data.get('tokens_before', '?')} tokens) and never completed"
            )
            details.extend(_run_error_lines(run))
    if problems:
        details.append(
            "check the worker log around those times and the main model's error; an interrupted process "
            "(restart, lease lost, cancel) leaves a started event without its pair"
        )
        return Finding(
            "started_not_completed",
            "problem",
            problems[0],
            [*problems[1:], *details],
            {"events": events_seen},
        )
    if in_progress:
        return Finding(
            "started_not_completed", "info", in_progress[0], in_progress[1:], {"events": events_seen}
        )
    return Finding(
        "started_not_completed",
        "ok",
        f"every started compression event has its completed/failed pair ({events_seen} events in {len(snapshot.runs)} runs)",
        data={"events": events_seen},
    )


def _run_error_lines(run: RunFacts) -> list[str]:
    lines = [f"  run {run.id} error: {run.error}"] if run.error else []
    lines.extend(f"  run {run.id} error event: {event.data.get('message')}" for event in run.events_of(ERROR))
    finished = run.events_of(RUN_FINISHED)
    if finished:
        lines.append(f"  run {run.id} finished: {finished[-1].data.get('status')}")
    elif run.status not in (RUN_RUNNING, RUN_WAITING_INPUT, RUN_QUEUED):
        lines.append(f"  run {run.id} has no run_finished event (status {run.status})")
    if not lines:
        lines.append(f"  run {run.id} recorded no error (status {run.status})")
    return lines


def check_old_content(snapshot: ConversationSnapshot, _window: int | None = None) -> Finding:
    """The checkpoint's `_summarization_event.file_path` and the history file in the workdir."""
    if snapshot.state_error:
        return Finding("old_content_missing", "info", snapshot.state_error)
    summaries = [
        (run, event)
        for run in snapshot.runs
        for event in run.events_of(CONTEXT_COMPRESSION)
        if event.data.get("status") == COMPLETED and event.data.get("level") == L2
    ]
    event = snapshot.summarization_event
    if event is None:
        if summaries:
            run, completed = summaries[-1]
            return Finding(
                "old_content_missing",
                "problem",
                "run events show a summary but the checkpoint has no _summarization_event",
                [
                    f"run {run.id} completed an L2 summary at {_when(completed)} (history {completed.data.get('file_path')})",
                    "the thread's state was replaced or belongs to another agent; read it with GET /api/conversations/{id}/state",
                ],
            )
        return Finding(
            "old_content_missing", "ok", "nothing has been summarised: every message is in the checkpoint"
        )
    path = event.get("file_path")
    cutoff = event.get("cutoff_index")
    count = event.get("summary_count")
    facts = [f"_summarization_event: cutoff_index {cutoff}, summary_count {count}, file_path {path}"]
    if not path:
        errors = [str(e.data["history_error"]) for _, e in summaries if e.data.get("history_error")]
        return Finding(
            "old_content_missing",
            "problem",
            "the current summary has no history file: the summarised messages were not saved (S27)",
            [
                *facts,
                *(f"history write error: {error}" for error in errors),
                "the chat record (GET /api/conversations/{id}/messages) still holds every message (S1)",
            ],
        )
    if snapshot.workdir is None or not snapshot.workdir.exists(path):
        return Finding(
            "old_content_missing",
            "problem",
            f"the history file {path} named by the checkpoint is missing from the workdir",
            [*facts, "the chat record (GET /api/conversations/{id}/messages) still holds every message (S1)"],
        )
    try:
        header, messages = read_history(snapshot.workdir, path)
        recovered = recover_messages(snapshot.workdir, path)
    except RecoveryError as exc:
        return Finding(
            "old_content_missing", "problem", f"the history file is there but incomplete: {exc}", facts
        )
    except (WorkdirError, ValueError) as exc:
        return Finding(
            "old_content_missing", "problem", f"the history file {path} cannot be read: {exc}", facts
        )
    missing_older = [
        str(e.data.get("file_path"))
        for _, e in summaries
        if e.data.get("file_path") and not snapshot.workdir.exists(str(e.data.get("file_path")))
    ]
    details = [
        *facts,
        f"history header: range {header.get('range')}, {len(messages)} messages; previous file {header.get('previous_history_file')}",
    ]
    if missing_older:
        return Finding(
            "old_content_missing",
            "problem",
            "an earlier history file is missing from the workdir",
            [*details, *(f"missing: {item}" for item in missing_older)],
        )
    return Finding(
        "old_content_missing",
        "ok",
        f"the history file {path} is in the workdir; its {len(recovered)} messages and the offloaded results they "
        "reference read back in full",
        details,
    )


def check_thread_busy(snapshot: ConversationSnapshot, _window: int | None = None) -> Finding:
    """S18: an active run, a run waiting for the user, or FIFO-queued requests make compression busy."""
    busy = snapshot.busy
    queued = [run for run in snapshot.runs if run.status == RUN_QUEUED]
    if busy is None:
        return Finding(
            "thread_busy",
            "ok",
            "idle: nothing running, nothing waiting for input, no queued request — manual "
            "compression would be accepted",
        )
    details: list[str] = []
    active = snapshot.run(busy.active_run_id) if busy.active_run_id else None
    if active is not None and active.status == RUN_RUNNING:
        details.append(
            f"run {active.id} is running since {active.started_at:%Y-%m-%d %H:%M:%S}"
            if active.started_at
            else f"run {active.id} is running"
        )
        if active.lease_expires_at is not None:
            details.append(
                f"its lease runs until {active.lease_expires_at:%Y-%m-%d %H:%M:%S} (UTC); an expired lease is failed by the recovery sweep"
            )
        details.append(f"wait for it, or cancel it: POST /api/runs/{active.id}/cancel")
    if active is not None and active.status == RUN_WAITING_INPUT:
        for item in active.interrupts:
            value = item.get("value")
            question = value.get("question") if isinstance(value, dict) else value
            details.append(f"run {active.id} waits for the user: {question!r} (interrupt {item.get('id')})")
        details.append(
            f"answer it (POST /api/runs/{active.id}/resume) or cancel it (POST /api/runs/{active.id}/cancel)"
        )
    if queued:
        details.append(f"{len(queued)} queued request(s), FIFO: " + ", ".join(run.id for run in queued))
    reason = {
        "running": "a run is executing",
        "waiting_input": "a run is waiting for the user's answer",
        "queued": "requests are queued",
    }
    return Finding(
        "thread_busy",
        "problem",
        f"busy: {reason[busy.reason]} — manual compression answers 409 {ErrorCode.THREAD_BUSY} now",
        details,
        {"reason": busy.reason, "active_run_id": busy.active_run_id, "queued": busy.queued_runs},
    )


def check_context_too_large(snapshot: ConversationSnapshot, context_window: int | None = None) -> Finding:
    """The L1 view, the kept messages, the tool schemas and the model's context window, measured."""
    runtime = snapshot.runtime
    if runtime is None or snapshot.state_error:
        return Finding("context_too_large", "info", snapshot.state_error or "the agent is not configured")
    config = runtime.compression
    profile = config.token_profile
    threshold = config.threshold_tokens
    system = SystemMessage(runtime.definition.system_prompt) if runtime.definition.system_prompt else None
    tools: list[Any] = list(runtime.tools)
    effective = effective_messages(snapshot.state_messages, snapshot.summarization_event)
    counter = TokenCounter()  # one for every figure below: the views share most messages
    system_tokens = counter.count_message(system, profile) if system else 0
    tool_tokens = counter.count_tools(tools, profile)
    total = counter.count_request(effective.messages, system, tools, profile)
    l1 = compact_view(
        effective.messages, config, ReadThroughWorkdir(snapshot.workdir), cache=CompactionCache()
    )
    l1_total = counter.count_request(l1.messages, system, tools, profile)
    keep = config.summary_keep_messages
    kept_view = l1.messages[-keep:]
    after_summary = counter.count_request(kept_view, system, tools, profile) + summary_output_budget(config)
    window = context_window or _model_window(runtime.main_model)
    figures = [
        f"threshold {threshold:,} tokens ({config.summary_threshold:g}K); model context window "
        + (f"{window:,}" if window else "unknown (the model declares none; give --context-window)"),
        f"next request now: {total:,} tokens = system {system_tokens:,} + {len(tools)} tool schemas {tool_tokens:,} "
        f"+ {len(effective.messages)} messages{' (summary + raw tail)' if effective.has_summary else ''}",
        f"after L1 (deterministic compaction): {l1_total:,} tokens ({len(l1.offloaded)} tool results offloaded, "
        f"{len(l1.truncated_arguments)} arguments cut)",
        f"kept messages: {len(snapshot.state_messages) - effective.cutoff_index} raw after the cutoff; "
        f"summary_keep_messages {keep}; after an L2 summary about {after_summary:,} tokens",
        *_largest(l1.messages, profile, counter),
    ]
    pressure = _last_pressure(snapshot)
    if pressure:
        figures.append(pressure)
    problems: list[str] = []
    if window and threshold >= window:
        problems.append(
            f"summary_threshold ({threshold:,}) is not below the model's context window ({window:,}): requests "
            "overflow before compression starts — lower summary_threshold (S23)"
        )
    if system_tokens + tool_tokens >= threshold:
        problems.append(
            f"the system prompt and tool schemas alone ({system_tokens + tool_tokens:,}) reach the threshold: "
            "every request compresses and no summary can make it fit — fewer tools or a shorter prompt"
        )
    if window and after_summary >= window:
        problems.append(
            f"even after a summary the request (~{after_summary:,}) exceeds the context window: the "
            f"{keep} kept messages are too large — lower summary_keep_messages or summary_tool_result_token_limit"
        )
    elif window and l1_total >= window and l1_total >= threshold:
        figures.append("the L1 view is above the window; the next call summarises first (L2)")
    problems.extend(_overflow_errors(snapshot))
    if problems:
        return Finding(
            "context_too_large",
            "problem",
            problems[0],
            [*problems[1:], *figures],
            {"threshold": threshold, "window": window, "l1_tokens": l1_total},
        )
    verdict = (
        "below the threshold"
        if total < threshold
        else ("below the threshold after L1" if l1_total < threshold else "L2 on the next call")
    )
    return Finding(
        "context_too_large",
        "ok",
        f"the next request fits: {total:,} tokens now, {l1_total:,} after L1 ({verdict})",
        figures,
        {"threshold": threshold, "window": window, "l1_tokens": l1_total, "tokens": total},
    )


def _model_window(model: object) -> int | None:
    profile = getattr(model, "profile", None)
    value = profile.get("max_input_tokens") if isinstance(profile, dict) else None
    return value if isinstance(value, int) and value > 0 else None


def _largest(messages: list[BaseMessage], profile: str, counter: TokenCounter) -> list[str]:
    sized = sorted(
        ((counter.count_message(message, profile), index, message) for index, message in enumerate(messages)),
        key=lambda item: -item[0],
    )[:LARGEST_SHOWN]
    lines = []
    for tokens, index, message in sized:
        kind = f"tool {message.name}" if isinstance(message, ToolMessage) else message.type
        lines.append(f"largest in the L1 view: #{index} {kind}, {tokens:,} tokens")
    return lines


def _last_pressure(snapshot: ConversationSnapshot) -> str | None:
    for run in reversed(snapshot.runs):
        events = [event for event in run.events_of(CONTEXT_PRESSURE) if not event.data.get("namespace")]
        if events:
            data = events[-1].data
            return (
                f"last recorded main-model request (run {run.id}): {data.get('total')} of {data.get('threshold')} "
                f"tokens (system {data.get('system')}, tools {data.get('tools')}, summary {data.get('summary')}, "
                f"messages {data.get('messages')})"
            )
    return None


def _overflow_errors(snapshot: ConversationSnapshot) -> list[str]:
    found = []
    for run in snapshot.runs:
        texts = [run.error or "", *(str(e.data.get("message", "")) for e in run.events_of(ERROR))]
        texts.extend(
            str(e.data.get("error", ""))
            for e in run.events_of(CONTEXT_COMPRESSION)
            if e.data.get("status") == FAILED
        )
        for text in texts:
            if any(word.lower() in text.lower() for word in OVERFLOW_WORDS):
                found.append(f"run {run.id} ({run.status}) reported: {text[:300]}")
                break
    return found


def check_summary_in_front_end(snapshot: ConversationSnapshot, _window: int | None = None) -> Finding:
    """S21: the internal summary call must never reach the chat record or what a stream showed."""
    probes = [SUMMARY_MARKER, *SUMMARY_TITLES]
    event = snapshot.summarization_event
    if event is not None:
        body = (
            content_text(event["summary_message"].content)
            .split("\n\n", 1)[-1]
            .removeprefix(BUILTIN_LABEL)
            .strip()
        )
        if len(body) >= LEAK_PROBE_CHARS:
            probes.append(body[:LEAK_PROBE_CHARS])
    leaks = [
        f"chat record message {message.id} ({message.role}, run {message.run_id}) contains summary text"
        for message in snapshot.messages
        if message.role == "assistant" and any(probe in message.content for probe in probes)
    ]
    # What a stream showed: deltas are live only (never stored); the stored `message` events that
    # replace them carry the same complete text.
    announced = 0
    for run in snapshot.runs:
        for stored in run.events_of(MESSAGE):
            announced += 1
            text = str(stored.data.get("content", ""))
            if any(probe in text for probe in probes):
                leaks.append(
                    f"run {run.id} announced summary text as message {stored.data.get('message_id')} "
                    "(message events)"
                )
    if leaks:
        return Finding(
            "summary_in_front_end",
            "problem",
            leaks[0],
            [
                *leaks[1:],
                "the summary call must carry TAG_NOSTREAM and lc_source 'summarization' (S21); check "
                "custom middleware that calls a model without them",
            ],
        )
    return Finding(
        "summary_in_front_end",
        "ok",
        f"no summary text in the chat record ({len(snapshot.messages)} messages) or in the messages "
        f"streams announced ({announced})",
    )


CHECKS: tuple[Check, ...] = (
    check_started_not_completed,
    check_old_content,
    check_thread_busy,
    check_context_too_large,
    check_summary_in_front_end,
)
