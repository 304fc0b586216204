"""ACEBench function-calling data (chenchen0103/ACEBench ``data_all/data_*/data_*.json``, JSON Lines).

What the files hold, and what a conversation is taken to be:

* ``normal_*`` and ``special_*`` records: ``question`` is a dialogue transcript, one turn per
  ``user: `` or ``system: `` line (a turn runs until the next such line). ACEBench calls the
  assistant "system", so ``system`` turns are AIMessages. A ``system`` turn written as a call list,
  ``[func(a=1, b={...})]``, is the assistant calling tools: it becomes an AIMessage with real tool
  calls. The transcript never records what the tool returned (the next ``system`` turn is the
  assistant's reply to the user), so each such call gets the placeholder result. ``time`` (or
  ``profile`` for preference data), which ACEBench puts in its system prompt, becomes the
  SystemMessage; ``function`` holds the tool schemas (BFCL style, converted to OpenAI format).
  The conversation ends with the user's last turn: the expected answer in ``possible_answer/`` is
  the evaluation target, never executed and without a result, so it is not appended.
* ``agent_multi_step``: ``question`` is the task the agent receives as its user message; the
  conversation is that one message plus the tool schemas (the expected call path is, again, a
  target without results, so it is not appended).
* ``agent_multi_turn``: ``question`` is the persona prompt of the simulated user ("你叫Grace, ..."),
  not a turn of any dialogue, and no dialogue is recorded: these records yield no conversation.

Files under ``possible_answer/`` are answer keys, not traces; they are not recognised as this format.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolCall

from ctxpress.tools.traces.model import (
    Conversation,
    TraceFormat,
    TracePayload,
    finalize_conversation,
    new_tool_call,
    openai_tool_schema,
    synthetic_call_id,
)

FORMAT_NAME = "acebench"
SIMULATED_USER_CATEGORY = "agent_multi_turn"
_TURN_PREFIX = re.compile(r"^(user|system): ", re.MULTILINE)
_LITERAL_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def looks_like_acebench(payload: TracePayload) -> bool:
    records = payload.records()
    first = records[0] if records else None
    return (
        isinstance(first, dict)
        and isinstance(first.get("question"), str)
        and isinstance(first.get("function"), list)
        and "id" in first
    )


def load_acebench(payload: TracePayload, label: str) -> list[Conversation]:
    conversations = []
    for index, record in enumerate(payload.records()):
        if str(record.get("id", "")).startswith(SIMULATED_USER_CATEGORY):
            continue
        messages: list[BaseMessage] = [
            SystemMessage(content=context)
            for context in (record.get("time"), record.get("profile"))
            if isinstance(context, str) and context
        ]
        messages.extend(dialogue_to_messages(record["question"]))
        tools = [openai_tool_schema(function) for function in record["function"]]
        conversations.append(finalize_conversation(FORMAT_NAME, f"{label}#{index}", messages, tools))
    return conversations


def dialogue_to_messages(question: str) -> list[BaseMessage]:
    """``user: ...`` / ``system: ...`` transcript turns to messages; other text is one user message."""
    pieces = _TURN_PREFIX.split(question)
    if len(pieces) == 1 or pieces[0].strip():
        return [HumanMessage(content=question)]
    messages: list[BaseMessage] = []
    for position, (speaker, text) in enumerate(zip(pieces[1::2], pieces[2::2], strict=True)):
        turn = text.removesuffix("\n")  # the newline separates turns; it is not part of the turn
        if speaker == "user":
            messages.append(HumanMessage(content=turn))
            continue
        calls = parse_call_list(turn, position)
        messages.append(AIMessage(content="", tool_calls=calls) if calls else AIMessage(content=turn))
    return messages


def parse_call_list(text: str, position: int) -> list[ToolCall] | None:
    """``[f(a=1), g(b="x")]`` (Python call syntax, JSON literals) to tool calls; None if it is not one."""
    stripped = text.strip()
    if not (stripped.startswith("[") and stripped.endswith("]")):
        return None
    try:
        tree = ast.parse(stripped, mode="eval").body
        if not isinstance(tree, ast.List) or not tree.elts:
            return None
        return [_tool_call(node, synthetic_call_id(position, index)) for index, node in enumerate(tree.elts)]
    except (SyntaxError, ValueError, TypeError):
        return None


def _tool_call(node: ast.expr, call_id: str) -> ToolCall:
    if not isinstance(node, ast.Call) or node.args or any(kw.arg is None for kw in node.keywords):
        raise ValueError("not a call with keyword arguments only")
    arguments = {str(keyword.arg): _literal(keyword.value) for keyword in node.keywords}
    return new_tool_call(ast.unparse(node.func), arguments, call_id)  # the callee: a plain or dotted name


def _literal(node: ast.expr) -> Any:
    """A literal argument value; JSON's true/false/null are accepted as ACEBench writes them."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in _LITERAL_NAMES:
        return _LITERAL_NAMES[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        mapping = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise ValueError("a ** spread in a dict")
            mapping[_literal(key)] = _literal(value)
        return mapping
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        if isinstance(value, int | float):
            return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(f"not a literal: {ast.unparse(node)}")


ACEBENCH_FORMAT = TraceFormat(FORMAT_NAME, looks_like_acebench, load_acebench)
