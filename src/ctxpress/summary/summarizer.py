"""The summary model call (S14, S21, S27): prompt, nostream tagging, output bounds, failure text."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import TAG_NOSTREAM

from ctxpress.compaction.content import content_text
from ctxpress.compaction.text_preview import head_middle_tail_preview
from ctxpress.config import MESSAGES_PLACEHOLDER, CompressionConfig
from ctxpress.containment import RULE_TRANSCRIPT, Degradation, contain, error_line
from ctxpress.summary.render import deterministic_digest, render_messages
from ctxpress.tokens import TokenCounter, count_request_tokens, estimate_tokens

SUMMARY_SOURCE_METADATA = {"lc_source": "summarization", "ctxpress_call": "summary"}
#: Share of the threshold the whole summary request may use, leaving room for the answer.
SUMMARY_INPUT_SHARE = 0.75
#: Transcript tokens the request always has room for, however small the threshold or long the prompt.
MIN_SUMMARY_INPUT_TOKENS = 512
#: Re-renders with less room when the measured request is over (estimates that did not add up).
FIT_ROUNDS = 4
MAX_SUMMARY_TOKENS = 4096


def summary_call_config(callbacks: Sequence[BaseCallbackHandler] = ()) -> RunnableConfig:
    """Tags that keep the internal call out of `stream_mode="messages"` (S21) and label its usage.

    Inside a graph run the run's own callbacks apply already; `callbacks` serves callers outside
    one (manual compression records the summary call's usage with it).
    """
    config: RunnableConfig = {
        "tags": [TAG_NOSTREAM, "ctxpress:summary"],
        "metadata": dict(SUMMARY_SOURCE_METADATA),
    }
    if callbacks:
        config["callbacks"] = list(callbacks)
    return config


def summary_output_budget(config: CompressionConfig) -> int:
    return max(256, min(MAX_SUMMARY_TOKENS, config.threshold_tokens // 4))


def _request(config: CompressionConfig, transcript: str) -> list[BaseMessage]:
    return [HumanMessage(content=config.render_summary_prompt(transcript))]


def _request_tokens(config: CompressionConfig, request: list[BaseMessage]) -> int:
    return count_request_tokens(request, profile=config.token_profile)


def summary_request_budget(config: CompressionConfig) -> int:
    """The most estimated tokens of the whole summary request (prompt and transcript together):
    `SUMMARY_INPUT_SHARE` of the threshold, and never less than the bare prompt plus
    `MIN_SUMMARY_INPUT_TOKENS`."""
    bare = _request_tokens(config, _request(config, ""))
    return max(int(config.threshold_tokens * SUMMARY_INPUT_SHARE), bare + MIN_SUMMARY_INPUT_TOKENS)


def build_summary_request(
    config: CompressionConfig,
    messages: Sequence[BaseMessage],
    counter: TokenCounter | None = None,
    degraded: list[Degradation] | None = None,
) -> list[BaseMessage]:
    """The summary model's input, within `summary_request_budget` by the same estimate (a rendering
    that raises is replaced by `plain_transcript` and recorded in `degraded`)."""
    budget = summary_request_budget(config)
    bare = _request_tokens(config, _request(config, ""))
    copies = max(1, config.summary_prompt.count(MESSAGES_PLACEHOLDER))  # each gets the transcript
    room = (budget - bare) // copies
    for _ in range(FIT_ROUNDS):
        transcript = contain(
            RULE_TRANSCRIPT,
            partial(render_messages, messages, room, config.token_profile, counter=counter),
            partial(plain_transcript, messages, room),
            degraded,
        )
        request = _request(config, transcript)
        tokens = _request_tokens(config, request)
        if tokens <= budget:
            return request
        room -= -(-(tokens - budget) // copies)  # the overshoot, shared by the copies (rounded up)
    return _request(config, "")


def plain_transcript(messages: Sequence[BaseMessage], room: int) -> str:
    """The fallback transcript: `[n] role: text` with each text cut to an equal share of `room`
    (in characters, so that a smaller room always gives a shorter transcript)."""
    share = max(0, room) // max(1, len(messages))
    return "\n".join(
        f"[{index}] {message.type}: {content_text(message.content)[:share]}"
        for index, message in enumerate(messages, start=1)
    )


@dataclass(frozen=True)
class SummaryOutcome:
    text: str
    error: str | None = None
    #: Rules that raised while the request was built (containment.py).
    degraded: tuple[Degradation, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


def outcome_from_response(config: CompressionConfig, response: BaseMessage) -> SummaryOutcome:
    text = response.text.strip() if hasattr(response, "text") else str(response.content).strip()
    if not text:
        return SummaryOutcome("", "the summary model returned an empty summary")
    budget = summary_output_budget(config)
    tokens = estimate_tokens(text, config.token_profile)
    if tokens > budget:
        # An over-long summary would defeat its purpose; keep its head and tail within the budget.
        text = head_middle_tail_preview(text, budget, config.token_profile, tokens)
    return SummaryOutcome(text)


def failed_summary_text(error: str, messages: Sequence[BaseMessage]) -> str:
    """S27: the error goes into the summary view, with a digest so the model is not left blind."""
    return (
        f"(The summary model failed: {error}. A deterministic digest of the summarised messages "
        f"follows instead.)\n{deterministic_digest(messages)}"
    )


def short_error(exc: BaseException) -> str:
    """A one-line error without provider internals (no bodies, no URLs)."""
    return error_line(exc, limit=200)


def summarize(
    model: BaseChatModel,
    config: CompressionConfig,
    messages: Sequence[BaseMessage],
    timeout: float | None = None,
    *,
    counter: TokenCounter | None = None,
) -> SummaryOutcome:
    """The sync summary call; with a `timeout` it runs in a daemon thread that is abandoned if it
    hangs (a sync call cannot be cancelled), so a hung summary model never hangs the run (S27).
    `counter` sizes the messages (a fresh one without)."""
    degraded: list[Degradation] = []
    request = build_summary_request(config, messages, counter, degraded)
    return _with_degraded(_summarize_sync(model, config, request, timeout), degraded)


def _with_degraded(outcome: SummaryOutcome, degraded: list[Degradation]) -> SummaryOutcome:
    return replace(outcome, degraded=tuple(degraded)) if degraded else outcome


def _summarize_sync(
    model: BaseChatModel, config: CompressionConfig, request: list[BaseMessage], timeout: float | None
) -> SummaryOutcome:
    if timeout is None:
        try:
            response = model.invoke(request, config=summary_call_config())
        except Exception as exc:
            return SummaryOutcome("", short_error(exc))
        return outcome_from_response(config, response)
    outcome: list[SummaryOutcome] = []
    context = contextvars.copy_context()  # callbacks and the run's config travel with the call

    def call() -> None:
        try:
            response = model.invoke(request, config=summary_call_config())
        except Exception as exc:
            outcome.append(SummaryOutcome("", short_error(exc)))
        else:
            outcome.append(outcome_from_response(config, response))

    worker = threading.Thread(target=context.run, args=(call,), name="ctxpress-summary", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive() or not outcome:
        return SummaryOutcome("", f"the summary model did not answer within {timeout:g} s")
    return outcome[0]


async def asummarize(
    model: BaseChatModel,
    config: CompressionConfig,
    messages: Sequence[BaseMessage],
    timeout: float | None,
    callbacks: Sequence[BaseCallbackHandler] = (),
    *,
    counter: TokenCounter | None = None,
) -> SummaryOutcome:
    degraded: list[Degradation] = []
    try:
        request = build_summary_request(config, messages, counter, degraded)
        call = model.ainvoke(request, config=summary_call_config(callbacks))
        # Not `wait_for`: on Python 3.11 it drops a cancellation (a cancelled run) that arrives
        # as the call ends.
        async with asyncio.timeout(timeout):
            response = await call
    except TimeoutError:
        return SummaryOutcome("", f"the summary model did not answer within {timeout:g} s")
    except Exception as exc:
        return SummaryOutcome("", short_error(exc))
    return _with_degraded(outcome_from_response(config, response), degraded)
