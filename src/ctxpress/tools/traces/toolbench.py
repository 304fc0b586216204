"""ToolBench answers (OpenBMB/ToolBench ``data_example/answer/G*_answer/*.json``).

One JSON object per query. ``answer_generation.train_messages`` is a list of training samples
cut from the same solving path: each sample is the path up to one more assistant step (a few
samples also carry the DFS "previous trails failed" prompt only for the step they train). The
last sample is the whole path, so it is the one conversation taken per file; the others would
repeat it. Runs that never produced a valid answer (``valid_data`` "False") have no
``train_messages`` and yield no conversation.

Messages use the legacy OpenAI ``function_call`` / ``function`` style; results are linked to calls
by function name. The final ``Finish`` call is never answered in the data, so it gets the
placeholder result. ``answer_generation.function`` holds the legacy function schemas.
"""

from __future__ import annotations

import json
from typing import Any

from ctxpress.tools.traces.model import (
    Conversation,
    TraceFormat,
    TracePayload,
    finalize_conversation,
    openai_tool_schema,
)
from ctxpress.tools.traces.openai_format import convert_openai_messages

FORMAT_NAME = "toolbench"


def looks_like_toolbench(payload: TracePayload) -> bool:
    return isinstance(payload.data, dict) and isinstance(payload.data.get("answer_generation"), dict)


def load_toolbench(payload: TracePayload, label: str) -> list[Conversation]:
    answer = payload.data["answer_generation"]
    samples = answer.get("train_messages") or []
    if not samples:
        return []
    functions: Any = answer.get("function") or []
    if isinstance(functions, str):
        functions = json.loads(functions)
    tools = [openai_tool_schema(function) for function in functions]
    messages = convert_openai_messages(samples[-1])
    return [finalize_conversation(FORMAT_NAME, f"{label}#0", messages, tools)]


TOOLBENCH_FORMAT = TraceFormat(FORMAT_NAME, looks_like_toolbench, load_toolbench)
