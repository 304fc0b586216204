"""How large one user message may be for an agent, checked at intake before anything is stored.

A message is never compressed while it is among the newest (S15 keeps the raw tail), so a
message too large for the model's input made every later turn fail: after any summary, the request
still held the message and stayed over the model's context window. The input budget is the smaller
of the agent's compression threshold and the main model's context window (when the model declares
one, `profile["max_input_tokens"]`). One message may use what is left of it after the system prompt
and the tool schemas, the summary (`summary_output_budget`) and an eighth kept for the replies and
tool previews beside it -- never less than an eighth of the budget, so a large prompt still leaves
room to talk. Agents list it (`max_message_tokens`) so the page can warn while typing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from ctxpress.app.server.errors import MessageTooLargeError
from ctxpress.app.server.runtime.agents import AgentRuntime
from ctxpress.app.server.usecases.pressure import system_message_of
from ctxpress.pressure import measure_request
from ctxpress.summary.summarizer import summary_output_budget
from ctxpress.tokens import count_message_tokens

#: 1/8 of the input budget stays for the replies and tool previews kept beside the message; a
#: message may use at least 1/8, however large the prompt and tools are.
BUDGET_EIGHTHS: Final = 8


@dataclass(frozen=True)
class MessageBudget:
    """The largest message an agent accepts, and what it is derived from (approximate tokens)."""

    max_message_tokens: int
    threshold_tokens: int
    context_window: int | None
    #: System prompt, tool schemas and per-request overhead.
    fixed_tokens: int
    #: The most a summary takes once older messages are summarised.
    summary_tokens: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_message_tokens": self.max_message_tokens,
            "threshold_tokens": self.threshold_tokens,
            "context_window": self.context_window,
            "fixed_tokens": self.fixed_tokens,
            "summary_tokens": self.summary_tokens,
        }


def model_context_window(model: BaseChatModel) -> int | None:
    """The input tokens the model declares it accepts (LangChain model profiles), if any."""
    profile = getattr(model, "profile", None)
    value = profile.get("max_input_tokens") if isinstance(profile, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def message_budget(runtime: AgentRuntime) -> MessageBudget:
    config = runtime.compression
    # The agent's own counter: its tool-schema cache makes this a lookup on every intake after the first.
    fixed = measure_request(
        [],
        system_message_of(runtime.definition.system_prompt),
        runtime.tools,
        config,
        counter=runtime.token_counter,
    )
    window = model_context_window(runtime.main_model)
    budget = min(config.threshold_tokens, window) if window else config.threshold_tokens
    summary = summary_output_budget(config)
    room = budget - fixed.total - summary - budget // BUDGET_EIGHTHS
    return MessageBudget(
        max_message_tokens=max(room, budget // BUDGET_EIGHTHS),
        threshold_tokens=config.threshold_tokens,
        context_window=window,
        fixed_tokens=fixed.total,
        summary_tokens=summary,
    )


def message_tokens(runtime: AgentRuntime, text: str) -> int:
    """The estimate of `text` as the user message the model would receive."""
    return count_message_tokens(HumanMessage(text), runtime.compression.token_profile)


def check_message_size(runtime: AgentRuntime, text: str, budget: MessageBudget | None = None) -> None:
    """`MessageTooLargeError` (413) when `text` alone is over the agent's message budget (`budget`:
    the caller's copy of `message_budget(runtime)`)."""
    budget = budget if budget is not None else message_budget(runtime)
    tokens = message_tokens(runtime, text)
    if tokens <= budget.max_message_tokens:
        return
    raise MessageTooLargeError(
        f"the message is about {tokens:,} tokens; agent {runtime.name!r} accepts at most "
        f"{budget.max_message_tokens:,} tokens in one message (its model input of "
        f"{min(budget.threshold_tokens, budget.context_window or budget.threshold_tokens):,} tokens "
        "less the system prompt, tools, summary and replies). Send it in smaller parts, or save the "
        "text as a file in the conversation's workdir and ask about that file.",
        details={"estimated_tokens": tokens, **budget.as_dict()},
    )
