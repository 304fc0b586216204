"""tau-bench historical trajectories (sierra-research/tau-bench ``historical_trajectories/*.json``).

A JSON list of ``{task_id, reward, info, traj, trial}``; each ``traj`` is one conversation in
OpenAI chat format (system policy, user, assistant ``tool_calls``, ``tool`` results). The files
carry no tool schemas, so ``tools`` is empty. Some trajectories reuse a tool call id in a later
turn; results are matched to the earliest unanswered call and the later id is renamed.
"""

from __future__ import annotations

from typing import Any

from ctxpress.tools.traces.model import Conversation, TraceFormat, TracePayload, finalize_conversation
from ctxpress.tools.traces.openai_format import convert_openai_messages

FORMAT_NAME = "tau-bench"


def looks_like_tau_bench(payload: TracePayload) -> bool:
    data = payload.data
    first: Any = data[0] if isinstance(data, list) and data and not payload.json_lines else None
    return isinstance(first, dict) and isinstance(first.get("traj"), list) and "task_id" in first


def load_tau_bench(payload: TracePayload, label: str) -> list[Conversation]:
    return [
        finalize_conversation(FORMAT_NAME, f"{label}#{index}", convert_openai_messages(entry["traj"]))
        for index, entry in enumerate(payload.records())
    ]


TAU_BENCH_FORMAT = TraceFormat(FORMAT_NAME, looks_like_tau_bench, load_tau_bench)
