"""S14: where to cut history for a summary without separating tool calls from their results.

A cutoff `c` splits messages into `[0, c)` (summarised) and `[c, n)` (kept). It is *safe* when no
AI message before `c` has a tool call answered at or after `c` — which would leave an orphaned
tool result in the kept part, or an unanswered call at the edge. Both make the next request
invalid for providers (the open bug of LangChain's and DeepAgents' summarisation).
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage


def unsafe_cutoffs(messages: Sequence[BaseMessage]) -> list[bool]:
    """`result[c]` is True when cutting at `c` would split a tool call from its result."""
    # Each result belongs to the latest call of its id before it: providers that reuse ids
    # (`call_0` in every AI message) must not glue a result to a later message's call.
    latest_call: dict[str, int] = {}
    delta = [0] * (len(messages) + 2)  # each (call at a, result at r) forbids cuts in (a, r]
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    latest_call[str(call["id"])] = index
        elif isinstance(message, ToolMessage):
            # A result whose call is not in this list must stay glued to what precedes it.
            owner = latest_call.get(message.tool_call_id, index - 1)
            if owner < index:
                delta[owner + 1] += 1
                delta[index + 1] -= 1
    unsafe = []
    running = 0
    for position in range(len(messages) + 1):
        running += delta[position]
        unsafe.append(running > 0)
    return unsafe


def choose_cutoff(messages: Sequence[BaseMessage], keep: int, *, minimum: int = 1) -> int | None:
    """The safe cutoff keeping at least `keep` recent messages where possible.

    Prefers the largest safe cutoff at or before `len - keep` (keeping more than asked when a tool
    batch straddles the edge); failing that, the smallest safe cutoff after it (keeping fewer, but
    at least one message). None when no safe cutoff summarises anything at or after `minimum`.
    """
    total = len(messages)
    if total < 2:
        return None
    unsafe = unsafe_cutoffs(messages)
    target = max(minimum, total - keep)
    for cutoff in range(min(target, total - 1), minimum - 1, -1):
        if not unsafe[cutoff]:
            return cutoff
    for cutoff in range(target + 1, total):
        if not unsafe[cutoff]:
            return cutoff
    return None
