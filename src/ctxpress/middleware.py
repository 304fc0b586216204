"""`ContextCompressionMiddleware`: the spec's automatic flow, in one place.

    effective messages (summary + raw tail, S15) → count (S12)
      below threshold → main model (S4)                      ─┐ ContextOverflowError → forced (S6)
      at/above → L1 view (S7–S13) → recount                   │
         below → main model with the L1 view (S5)             ─┤
         still at/above → L2: cutoff, history file, summary   │
                          → `_summarization_event` (S14, S15) │
                          → main model with [summary, *kept] ─┘
    forced: L1 + L2 even below the threshold, then smaller requests until one fits: fewer kept
    messages, the kept tool results trimmed further (written to the state, S30); each retry
    strictly smaller than the last overflow. When none is, emit `failed` and raise.

The flow is written once, as a generator that *yields* the effects it needs (call the main model,
build the L1 view, save history + summarise). `wrap_model_call` and `awrap_model_call` only differ
in how they carry those effects out: in order, or with the history write and the summary call
running concurrently.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Annotated, Any, NotRequired, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, BaseMessage
from langgraph.errors import GraphBubbleUp

from ctxpress.compaction import CompactionCache, CompactionResult, compact_view
from ctxpress.compaction.text_preview import GAP_MARKER_TOKENS, head_middle_tail_preview
from ctxpress.config import CompressionConfig
from ctxpress.containment import RULE_FLOW, RULE_PRESSURE, constant, contain
from ctxpress.events import CONTEXT_OVERFLOW, L1, L2, CompressionDetails, CompressionEvents, Level
from ctxpress.flow import (
    BuildL1View,
    CallModel,
    Effect,
    Flow,
    FlowDriver,
    SaveAndSummarize,
    TrimTail,
)
from ctxpress.graph_run import (
    response_with_update,
    state_messages,
    stream_writer,
    thread_id,
    tool_results_by_key,
)
from ctxpress.overflow_trim import trim_budgets, trim_kept_tool_results
from ctxpress.pressure import RequestPressure, measure_request
from ctxpress.retry_search import RetrySearch, smaller_keep
from ctxpress.summary.conflict import check_single_summarizer, guarded_state
from ctxpress.summary.event import (
    EVENT_KEY,
    EffectiveMessages,
    SummarizationEvent,
    effective_messages,
)
from ctxpress.summary.step import (
    SavedSummary,
    SummaryPlan,
    SummaryStep,
    asave_and_summarize,
    finish_summary,
    keep_freeing,
    keep_that_fits,
    plan_summary,
    save_and_summarize,
    summary_cutoff,
)
from ctxpress.summary.summarizer import SummaryOutcome, failed_summary_text, short_error
from ctxpress.tokens import TokenCounter, estimate_tokens
from ctxpress.workdir import Workdir

logger = logging.getLogger("ctxpress.middleware")

WorkdirResolver = Callable[[ModelRequest], Workdir]
PressureCallback = Callable[[RequestPressure], None]
DEFAULT_SUMMARY_TIMEOUT_S = 120.0
#: Summaries made for one call at most: a second, keeping fewer messages, when the first could not
#: quote the question it passes whole or left the request at the threshold (`keep_freeing`).
QUESTION_ATTEMPTS = 2
#: After an overflow a summary is cut to the room left, but never below this: less says nothing.
MIN_SHORTENED_SUMMARY_TOKENS = 16


class CompressionState(AgentState):
    """Agent state with the private summary event (S3)."""

    _summarization_event: Annotated[NotRequired[SummarizationEvent | None], PrivateStateAttr]


@dataclass
class _Call:
    """Everything one model call's flow needs, resolved once."""

    request: ModelRequest
    effective: EffectiveMessages
    events: CompressionEvents
    state_update: dict[str, Any] = field(default_factory=dict)
    summary: SummaryStep | None = None
    summary_parts: tuple[SummaryPlan, SavedSummary] | None = None  # to rebuild it without sections
    model_raised: bool = False  # the main model (or the chain inside ctxpress) raised, not ctxpress

    def with_messages(self, messages: list[BaseMessage]) -> ModelRequest:
        # The inner chain must not read the event again (S3: one summariser per state).
        return self.request.override(
            messages=cast("list[AnyMessage]", messages),
            state=cast("Any", guarded_state(self.request.state)),
        )


class ContextCompressionMiddleware(AgentMiddleware[CompressionState, Any, Any]):
    """Automatic context compression for `create_agent` (see the module docstring for the flow).

    Place it first (outermost) in `middleware=[...]`, before retry/fallback middleware, so that a
    `ContextOverflowError` from the model reaches it (see `ctxpress.overflow.middleware`).

    Each instance owns its caches: `token_counter` (token counts, with the whole-message memo) and
    `compaction_cache` (L1 decisions per content). Pass `counter=` / `cache=` to share them between
    instances, or with `compress_now` and `measure_request`.
    """

    state_schema = CompressionState

    def __init__(
        self,
        config: CompressionConfig | None = None,
        *,
        workdir: Workdir | WorkdirResolver,
        summary_model: BaseChatModel | None = None,
        summary_timeout: float | None = DEFAULT_SUMMARY_TIMEOUT_S,
        on_pressure: PressureCallback | None = None,
        cache: CompactionCache | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        super().__init__()
        self.config = config or CompressionConfig()
        self._workdir = workdir
        self.summary_model = summary_model
        self.summary_timeout = summary_timeout
        self.on_pressure = on_pressure
        self.compaction_cache = cache if cache is not None else CompactionCache()
        self.token_counter = counter if counter is not None else TokenCounter()

    @property
    def name(self) -> str:
        return "ContextCompressionMiddleware"

    # --- public entry points: two drivers of one flow ------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse | ExtendedModelResponse:
        flow = FlowDriver(self._flow(request))
        while (effect := flow.next_effect()) is not None:
            try:
                flow.resume(self._run_sync(effect, request, handler))
            except BaseException as exc:  # handed to the flow, which decides what to do with it
                flow.fail(exc)
        return flow.result

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse | ExtendedModelResponse:
        flow = FlowDriver(self._flow(request))
        while (effect := flow.next_effect()) is not None:
            try:
                flow.resume(await self._run_async(effect, request, handler))
            except BaseException as exc:
                flow.fail(exc)
        return flow.result

    # --- effect handlers ------------------------------------------------------------------------

    def _run_sync(
        self, effect: Effect, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> Any:
        if isinstance(effect, CallModel):
            return handler(effect.request)
        if isinstance(effect, BuildL1View):
            return self._build_l1(effect.messages, request)
        if isinstance(effect, TrimTail):
            return self._trim(effect, request)
        return save_and_summarize(
            effect.plan,
            self._resolve_workdir(request),
            self._summary_model(request),
            self.config,
            self.summary_timeout,
            counter=self.token_counter,
        )

    async def _run_async(
        self,
        effect: Effect,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> Any:
        if isinstance(effect, CallModel):
            return await handler(effect.request)
        if isinstance(effect, BuildL1View):
            return await asyncio.to_thread(self._build_l1, effect.messages, request)
        if isinstance(effect, TrimTail):
            return await asyncio.to_thread(self._trim, effect, request)
        return await asave_and_summarize(
            effect.plan,
            self._resolve_workdir(request),
            self._summary_model(request),
            self.config,
            self.summary_timeout,
            counter=self.token_counter,
        )

    def _resolve_workdir(self, request: ModelRequest) -> Workdir:
        return self._workdir(request) if callable(self._workdir) else self._workdir

    def _summary_model(self, request: ModelRequest) -> BaseChatModel:
        return self.summary_model or request.model

    def _build_l1(self, messages: list[BaseMessage], request: ModelRequest) -> CompactionResult:
        return compact_view(
            messages, self.config, self._resolve_workdir(request), cache=self.compaction_cache
        )

    def _trim(self, effect: TrimTail, request: ModelRequest) -> tuple[list[BaseMessage], list[BaseMessage]]:
        return trim_kept_tool_results(
            effect.view,
            effect.originals,
            self.config,
            self._resolve_workdir(request),
            self.compaction_cache,
            budget=effect.budget,
        )

    # --- the flow -------------------------------------------------------------------------------

    def _flow(self, request: ModelRequest) -> Flow:
        check_single_summarizer(request.messages, request.state.get(EVENT_KEY))
        state = state_messages(request)
        effective = contain(
            RULE_FLOW,
            partial(effective_messages, request.messages, request.state.get(EVENT_KEY), state),
            partial(EffectiveMessages, list(request.messages), None, 0, state),
        )
        call = _Call(
            request=request, effective=effective, events=CompressionEvents(writer=stream_writer(request))
        )
        threshold = self.config.threshold_tokens
        try:
            tokens_before = self._count(call, call.effective.messages)
            if tokens_before < threshold:
                return (yield from self._send(call, call.effective.messages, tokens_before, tokens_before))
            call.events.started(L1, tokens_before, threshold=threshold)
            l1: CompactionResult = yield BuildL1View(call.effective.messages)
            tokens_l1 = self._count(call, l1.messages)
            if tokens_l1 < threshold:
                return (yield from self._send(call, l1.messages, tokens_before, tokens_l1, L1, l1))
            summary = yield from self._summarize(call, l1)
            if summary is None:  # nothing left to summarise: send the L1 view (it may still fit)
                return (yield from self._send(call, l1.messages, tokens_before, tokens_l1, L1, l1))
            tokens_l2 = self._count(call, summary.view)
            return (yield from self._send(call, summary.view, tokens_before, tokens_l2, L2, l1))
        except (GraphBubbleUp, ContextOverflowError):
            raise
        except Exception as exc:
            call.events.failed(L2 if EVENT_KEY in call.state_update else L1, short_error(exc))
            if call.model_raised:
                raise  # the model's own error (or an inner middleware's): not ours to hide
            # Our own code failed: the request goes out uncompressed, the state as it was.
            logger.warning(
                "ctxpress could not compress this request (%s); sending it as it is", exc, exc_info=exc
            )
            call.state_update.clear()
            call.summary = call.summary_parts = None
            tokens = contain(
                RULE_FLOW, partial(self._count, call, call.effective.messages), constant(sys.maxsize)
            )
            return (yield from self._send(call, call.effective.messages, tokens, tokens))

    def _call_model(self, call: _Call, view: list[BaseMessage]) -> Generator[Effect, Any, ModelResponse]:
        """The main model with `view`; an error it raises is marked as the model's (not contained)."""
        try:
            response: ModelResponse = yield CallModel(call.with_messages(view))
        except ContextOverflowError:
            raise
        except BaseException:
            call.model_raised = True
            raise
        return response

    def _send(
        self,
        call: _Call,
        view: list[BaseMessage],
        tokens_before: int,
        tokens_after: int,
        level: Level | None = None,
        l1: CompactionResult | None = None,
    ) -> Flow:
        """Call the main model with `view` (`tokens_after` large); on overflow, the forced path (S6)."""
        try:
            response = yield from self._call_model(call, view)
        except ContextOverflowError as overflow:
            return (yield from self._forced(call, view, tokens_after, tokens_before, l1, overflow))
        self._record_pressure(call, view, tokens_after)
        if level is not None:
            call.events.completed(level, tokens_before, tokens_after, _details(l1, call.summary))
        return response_with_update(response, call.state_update)

    def _forced(
        self,
        call: _Call,
        sent: list[BaseMessage],
        tokens_sent: int,
        tokens_before: int,
        l1: CompactionResult | None,
        overflow: ContextOverflowError,
    ) -> Flow:
        """S6: an overflow forces L1 + L2, then a search for a request that fits (S30).

        Every retry is strictly smaller than the last request that overflowed (a size-based
        overflow would only repeat): the summary view without its carried sections, summaries
        keeping half as many messages each time (a summary text too long for the room cut to half
        or less each time), the kept tool results trimmed to smaller previews. Only when none of
        them is smaller, or each overflows too, does the call end with `ContextOverflowError`
        naming what was tried (`RetrySearch`).
        """
        logger.warning("context overflow from the main model; forcing a summary")
        call.events.started(L2, tokens_before, reason=CONTEXT_OVERFLOW)
        search = RetrySearch(limit=tokens_sent)
        try:
            if l1 is None:
                l1 = yield BuildL1View(call.effective.messages)
            if call.summary is not None:
                self._drop_carried_sections(call)
                label = "the summary without its sections, naming one file"
                response = yield from self._retry(call, search, label, l1)
                if response is not None:
                    return self._finish_forced(call, tokens_before, l1, response, search)
            # Summaries keeping fewer messages; each moves the cutoff past the last one made.
            keep: int | None = None
            summarised_to = (
                call.summary_parts[0].span.end if call.summary_parts else call.effective.cutoff_index
            )
            while keep != 0:
                made = yield from self._forced_summary(call, l1, search.limit, keep, summarised_to)
                if made is None:
                    break
                keep, summarised_to = made
                response = yield from self._retry(call, search, f"a summary keeping {keep} messages", l1)
                while response is None and self._shorten_summary(call, search.limit):
                    label = f"a summary keeping {keep} messages, its text cut to half or less"
                    response = yield from self._retry(call, search, label, l1)
                if response is not None:
                    return self._finish_forced(call, tokens_before, l1, response, search)
                keep = smaller_keep(keep)
            if call.summary is None:
                response = yield from self._retry(call, search, "the L1 view", l1)
                if response is not None:
                    return self._finish_forced(call, tokens_before, l1, response, search)
            for budget in trim_budgets(self.config):
                base = self._view_to_send(call, l1, search.limit)
                trimmed, replacements = yield TrimTail(
                    base, tool_results_by_key(call.request.messages), budget
                )
                if not replacements:
                    continue
                label = f"the kept tool results trimmed to {budget}-token previews"
                response = yield from self._retry(call, search, label, l1, trimmed)
                if response is not None:
                    # Only messages with ids can replace their state copies (a plain list has none).
                    if stored := [message for message in replacements if message.id]:
                        call.state_update["messages"] = stored
                    return self._finish_forced(call, tokens_before, l1, response, search, len(replacements))
            raise ContextOverflowError(search.exhausted()) from overflow
        except GraphBubbleUp:
            raise
        except Exception as exc:
            call.events.failed(L2, short_error(exc), reason=CONTEXT_OVERFLOW)
            raise

    def _retry(
        self,
        call: _Call,
        search: RetrySearch,
        label: str,
        l1: CompactionResult,
        view: list[BaseMessage] | None = None,
    ) -> Generator[Effect, Any, ModelResponse | None]:
        """Send `view` (by default the smaller of the summary view and the L1 view) when it is
        smaller than the last overflow; None when it is not, or when it overflows too."""
        view = self._view_to_send(call, l1, search.limit) if view is None else view
        size = self._count(call, view)
        if size >= search.limit:
            search.not_smaller(label, size)
            return None
        try:
            response = yield from self._call_model(call, view)
        except ContextOverflowError:
            search.overflowed(label, size)
            return None
        search.accept(view, size)
        return response

    def _view_to_send(self, call: _Call, l1: CompactionResult, limit: int) -> list[BaseMessage]:
        """`[summary, *kept]` when it is smaller than `limit` or than the L1 view (S6: an overflow
        forces a summary); otherwise the L1 view, and the summary leaves the state update: the
        checkpoint must describe the request the model is sent."""
        if call.summary is None:
            return l1.messages
        tokens_summary = self._count(call, call.summary.view)
        if tokens_summary < limit or tokens_summary < self._count(call, l1.messages):
            return call.summary.view
        call.summary = None  # its parts stay: `_shorten_summary` may still cut it to fit
        call.state_update.pop(EVENT_KEY, None)
        return l1.messages

    def _forced_summary(
        self, call: _Call, l1: CompactionResult, limit: int, keep: int | None, summarised_to: int
    ) -> Generator[Effect, Any, tuple[int, int] | None]:
        """A summary after an overflow of `limit` tokens that keeps at most `keep` messages (first
        the configured keep), only as many as are themselves smaller than `limit`, and summarises
        past `summarised_to` (a full-state cutoff); its keep and cutoff, or None when there is no
        such summary."""
        start = self.config.summary_keep_messages if keep is None else keep
        fits = keep_that_fits(call.effective, start, lambda kept: self._sent(call, l1, kept) < limit)
        while (cutoff := summary_cutoff(call.effective, fits)) is not None and (
            call.effective.to_global(cutoff) <= summarised_to
        ):
            fits = smaller_keep(fits)
            if fits == 0:
                return None
        step = yield from self._summarize(call, l1, room=0, keep=fits)
        return None if step is None else (fits, step.event["cutoff_index"])

    def _shorten_summary(self, call: _Call, limit: int) -> bool:
        """S6: a summary text too long for the room an overflow left is cut (head and tail) to half or
        less, and so that `[summary, *kept]` is smaller than `limit`; the history file still holds
        what it summarised.
        False when there is no summary to cut, or too little room for a useful one."""
        if call.summary_parts is None:
            return False
        plan, saved = call.summary_parts
        current = call.summary or finish_summary(plan, saved, lambda view: 0, one_file=True)
        excess = self._count(call, current.view) - limit + 1
        text = (
            saved.outcome.text
            if saved.outcome.ok
            else failed_summary_text(saved.outcome.error or "", plan.messages)
        )
        tokens = estimate_tokens(text, self.config.token_profile)
        # The window is not known: half the text at least, so that a few cuts reach any room.
        budget = min(tokens - excess - GAP_MARKER_TOKENS, tokens // 2)
        if excess <= 0 or budget < MIN_SHORTENED_SUMMARY_TOKENS:
            return False
        cut = head_middle_tail_preview(text, budget, self.config.token_profile, tokens)
        if not cut:
            return False
        shortened = replace(saved, outcome=SummaryOutcome(cut))
        step = replace(
            finish_summary(plan, shortened, lambda view: 0, one_file=True),
            summary_error=current.summary_error,
        )
        call.state_update[EVENT_KEY] = step.event
        call.summary = step
        call.summary_parts = (plan, shortened)
        return True

    def _drop_carried_sections(self, call: _Call) -> None:
        """S6/S30: after an overflow the summary message goes without its carried sections first,
        naming the conversation file alone (every token counts)."""
        if call.summary_parts is None:
            return
        plan, saved = call.summary_parts
        step = finish_summary(plan, saved, lambda view: 0, one_file=True)
        call.state_update[EVENT_KEY] = step.event
        call.summary = step

    def _finish_forced(
        self,
        call: _Call,
        tokens_before: int,
        l1: CompactionResult,
        response: ModelResponse,
        search: RetrySearch,
        trimmed_tool_results: int = 0,
    ) -> ModelResponse | ExtendedModelResponse:
        view, tokens_after = search.accepted
        self._record_pressure(call, view, tokens_after)
        details = _details(l1, call.summary)
        if trimmed_tool_results:
            details["trimmed_tool_results"] = trimmed_tool_results
        call.events.completed(L2, tokens_before, tokens_after, details, reason=CONTEXT_OVERFLOW)
        return response_with_update(response, call.state_update)

    def _summarize(
        self, call: _Call, l1: CompactionResult, room: int | None = None, keep: int | None = None
    ) -> Generator[Effect, Any, SummaryStep | None]:
        """L2 (S14, S15) for this call; records the event in the call's state update.

        Keeps the configured number of messages, fewer when they alone are at the threshold, or
        `keep` when given. The carried sections take only the headroom below the threshold (or
        below `room`: 0 after an overflow), so they are never what keeps the request over.
        """
        full_state = state_messages(call.request) or call.request.messages
        threshold = self.config.threshold_tokens

        def sent(kept: Sequence[BaseMessage]) -> int:
            return self._sent(call, l1, kept)

        automatic = keep is None
        if keep is None:
            # Room for the summary message too: the previous one's size is the best guess of the next.
            reserve = self._count_messages(call.effective.messages[:1]) if call.effective.has_summary else 0
            keep = keep_that_fits(
                call.effective,
                self.config.summary_keep_messages,
                lambda kept: sent(kept) + reserve < threshold,
            )
        limit = threshold if room is None else min(threshold, room)
        done: tuple[SummaryPlan, SavedSummary, SummaryStep] | None = None
        for _attempt in range(QUESTION_ATTEMPTS):
            plan = plan_summary(call.effective, l1.messages, full_state, self.config, thread_id(), keep)
            if plan is None:
                break
            saved: SavedSummary = yield SaveAndSummarize(plan)
            step = finish_summary(
                plan, saved, lambda view: limit - self._count(call, view), one_file=room is not None
            )
            done = (plan, saved, step)
            # Keep fewer (S14 keeps them "preferably") and summarise again when the question the
            # summary passes did not fit whole beside the kept messages (it is never cut), or when
            # the request is still at the threshold (else every next call would summarise again).
            # (The first attempt's history file stays, named by no event; the second covers it.)
            over = self._count(call, step.view) - threshold + 1 if automatic else 0
            needed = max(step.question_shortfall, over)
            if needed <= 0:
                break
            smaller = keep_freeing(call.effective, keep, needed, sent)
            if smaller is None:
                break
            keep = smaller
        if done is None:
            return None
        plan, saved, step = done
        call.state_update[EVENT_KEY] = step.event
        call.summary = step
        call.summary_parts = (plan, saved)
        return step

    # --- measuring ------------------------------------------------------------------------------

    def _count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """`messages` alone, without the system prompt and tools."""
        return self.token_counter.count_request(
            messages, None, None, self.config.token_profile, immutable_messages=True
        )

    def _sent(self, call: _Call, l1: CompactionResult, kept: Sequence[BaseMessage]) -> int:
        """The size of a request of `kept` as sent: the L1 view's tail of that length."""
        return self._count(call, l1.messages[len(l1.messages) - len(kept) :])

    def _count(self, call: _Call, messages: Sequence[BaseMessage]) -> int:
        # A LangGraph state's messages are values (replaced, never edited in place), so each one's
        # count is remembered whole by its id (`ctxpress.tokens.message_memo`).
        return self.token_counter.count_request(
            messages,
            call.request.system_message,
            call.request.tools,
            self.config.token_profile,
            immutable_messages=True,
        )

    def _record_pressure(self, call: _Call, view: Sequence[BaseMessage], total: int) -> None:
        if self.on_pressure is None:
            return
        request = call.request
        pressure = contain(
            RULE_PRESSURE,
            partial(
                measure_request,
                view,
                request.system_message,
                request.tools,
                self.config,
                total=total,
                counter=self.token_counter,
            ),
            constant(None),
        )
        if pressure is None:
            return
        try:
            self.on_pressure(pressure)
        except Exception:  # an observer must never break the model call
            logger.exception("pressure callback failed")


def _details(l1: CompactionResult | None, summary: SummaryStep | None) -> CompressionDetails:
    details: CompressionDetails = {}
    if l1 is not None:
        details["files_written"] = l1.paths_written
        details["offloaded"] = len(l1.offloaded)
        details["arguments_truncated"] = len(l1.truncated_arguments)
        if l1.failures:
            details["offload_failures"] = len(l1.failures)
    degraded = [*(l1.degraded if l1 is not None else ()), *(summary.degraded if summary is not None else ())]
    if degraded:
        details["degraded"] = [str(degradation) for degradation in degraded]
    if summary is not None:
        details["cutoff_index"] = summary.event["cutoff_index"]
        details["file_path"] = summary.event["file_path"]
        if summary.summary_error:
            details["summary_error"] = summary.summary_error
        if summary.write_error:
            details["history_error"] = summary.write_error
    return details


__all__ = ["EVENT_KEY", "CompressionState", "ContextCompressionMiddleware"]
