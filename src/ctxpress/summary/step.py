"""The L2 step (S14, S15), shared by automatic compression and the manual "compress context" action.

Two plain functions around the two slow parts. `plan_summary` picks the cutoff and says what the
summary model reads and what the history file keeps; the caller writes the history file and calls
the summary model (in order, or concurrently: `save_and_summarize`, `asave_and_summarize`); then
`finish_summary` turns the file path and the summary into the new event and the view to send.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ctxpress.compaction.content import content_text
from ctxpress.config import CompressionConfig
from ctxpress.containment import RULE_REFERENCES, Degradation, contain
from ctxpress.summary.carried import (
    QUESTION_HEADING,
    cumulative_files,
    files_budget,
    files_section,
    is_user_request,
    question_budget,
    question_section,
    question_to_carry,
)
from ctxpress.summary.cutoff import choose_cutoff
from ctxpress.summary.event import EffectiveMessages, SummarizationEvent, make_summary_message
from ctxpress.summary.history import HistoryRange, in_history_dir, write_conversation, write_history
from ctxpress.summary.references import (
    references_budget,
    references_in_summary,
    references_section,
    shown_text,
    span_references,
)
from ctxpress.summary.summarizer import (
    SummaryOutcome,
    asummarize,
    failed_summary_text,
    short_error,
    summarize,
)
from ctxpress.tokens import TokenCounter, estimate_tokens
from ctxpress.workdir import Workdir

logger = logging.getLogger("ctxpress.summary")


@dataclass(frozen=True)
class SummaryPlan:
    """The next summary before its slow parts: where it cuts, what it reads and what it stores."""

    span: HistoryRange  # `span.end` is the new global cutoff
    messages: list[BaseMessage]  # what the summary model reads: the bounded L1 view
    history: list[BaseMessage]  # what the history file keeps: see `history_messages`
    kept: list[BaseMessage]  # the L1 view after the cutoff, sent after the summary message
    first_kept_id: str | None
    summary_count: int  # this summary's sequence number in the thread
    question: str | None = None  # the user request this summary passes, quoted verbatim
    question_budget: int = 0  # the most tokens the quote keeps (`carried.question_budget`)
    files_budget: int = 0  # the most tokens the list of earlier files takes (`carried.files_budget`)
    profile: str = "default"  # the token profile the quote is measured in
    carried_question: str | None = None  # the previous summary's question section, still current
    #: The state before the new cutoff, as the state holds it: what the conversation file keeps.
    conversation: tuple[BaseMessage, ...] = ()
    references_budget: int = 0  # the most tokens the references take (`references.references_budget`)
    #: The references the previous summary message listed (older than this span's).
    earlier_references: tuple[str, ...] = ()

    def references(self, budget: int) -> list[str]:
        """The references of the summarised span (as the state holds it), then the earlier ones:
        enough for a section of `budget` tokens."""
        span = self.conversation[self.span.start : self.span.end]
        return span_references(span, self.earlier_references, budget)


@dataclass(frozen=True)
class SavedHistory:
    """What `save_history` wrote: the history file (or why not) and the conversation file."""

    file_path: str | None
    write_error: str | None
    conversation_file: str | None = None


@dataclass(frozen=True)
class SavedSummary:
    file_path: str | None
    write_error: str | None
    outcome: SummaryOutcome
    #: The thread's conversation file, when it was written (`history.write_conversation`).
    conversation_file: str | None = None


@dataclass(frozen=True)
class SummaryStep:
    """A finished L2 step: the new event, the view to send, and what went wrong on the way."""

    event: SummarizationEvent
    view: list[BaseMessage]
    summary_error: str | None
    write_error: str | None
    #: Tokens the free room lacked to quote the question whole (0: quoted whole, none to quote, or
    #: longer than its own budget and cut whatever the room): what keeping fewer messages would free.
    question_shortfall: int = 0
    #: Rules that raised on the way, their fallback used (containment.py).
    degraded: tuple[Degradation, ...] = ()


def history_messages(
    effective: Sequence[BaseMessage], view: Sequence[BaseMessage], cutoff: int
) -> list[BaseMessage]:
    """The summarised messages as the history file keeps them.

    Original messages (tool-call arguments uncut), except tool results that L1 stored in the
    workdir: those appear as their offload view, whose path leads to the full text. History plus
    those files therefore recover every byte without storing large results twice.
    """
    return [
        shown if isinstance(original, ToolMessage) and shown is not original else original
        for original, shown in zip(effective[:cutoff], view[:cutoff], strict=True)
    ]


def summary_cutoff(effective: EffectiveMessages, keep: int) -> int | None:
    """The local cutoff of the next summary, or None when there is nothing new to summarise."""
    # Loop guard: with only the previous summary before the cutoff there is nothing new to
    # summarise, so a cutoff after a summary takes at least one new message — into the keep
    # window when needed (S14 keeps `keep` messages "preferably").
    minimum = 2 if effective.has_summary else 1
    cutoff = choose_cutoff(effective.messages, keep, minimum=minimum)
    if cutoff is None or (effective.has_summary and cutoff <= 1):
        return None
    return cutoff


def keep_that_fits(
    effective: EffectiveMessages, keep: int, kept_fits: Callable[[Sequence[BaseMessage]], bool]
) -> int:
    """The largest keep up to `keep` whose kept messages fit (S14 keeps `keep` only "preferably")."""
    for candidate in range(keep, 0, -1):
        cutoff = summary_cutoff(effective, candidate)
        if cutoff is None or kept_fits(effective.messages[cutoff:]):
            return candidate
    return 1


def keep_freeing(
    effective: EffectiveMessages, keep: int, tokens: int, count: Callable[[Sequence[BaseMessage]], int]
) -> int | None:
    """The largest keep below `keep` whose kept messages are at least `tokens` smaller than those
    of `keep` (`count` measures them as sent), or None when no smaller keep frees that much."""
    cutoff = summary_cutoff(effective, keep)
    if cutoff is None:
        return None
    kept_tokens = count(effective.messages[cutoff:])
    for candidate in range(keep - 1, 0, -1):
        smaller = summary_cutoff(effective, candidate)
        if (
            smaller is not None
            and smaller > cutoff
            and kept_tokens - count(effective.messages[smaller:]) >= tokens
        ):
            return candidate
    return None


def plan_summary(
    effective: EffectiveMessages,
    view: Sequence[BaseMessage],
    state_messages: Sequence[BaseMessage],
    config: CompressionConfig,
    thread_id: str | None,
    keep: int | None = None,
) -> SummaryPlan | None:
    """The summary of `effective` (whose L1 view is `view`), or None when there is nothing to summarise.

    `keep` overrides `config.summary_keep_messages` (see `keep_that_fits`).
    """
    cutoff = summary_cutoff(effective, config.summary_keep_messages if keep is None else keep)
    if cutoff is None:
        return None
    previous = effective.event
    global_cutoff = effective.to_global(cutoff)
    if global_cutoff <= effective.cutoff_index or global_cutoff >= len(state_messages):
        return None  # a cutoff never moves backwards (S15)
    history = history_messages(effective.messages, view, cutoff)
    previous_file = previous["file_path"] if previous else None
    span = HistoryRange(
        thread_id=thread_id,
        start=effective.cutoff_index,
        end=global_cutoff,
        previous_file=previous_file,
        earlier_files=cumulative_files(
            previous.get("earlier_files", []) if previous else [], previous_file, history
        ),
    )
    kept = list(view[cutoff:])
    question = question_to_carry(effective.messages[:cutoff], effective.messages[cutoff:])
    carried = None
    if question is None and previous:
        carried = _still_current(previous, effective.messages[:cutoff], effective.messages[cutoff:])
    return SummaryPlan(
        span=span,
        messages=list(view[:cutoff]),
        history=history,
        kept=kept,
        first_kept_id=state_messages[global_cutoff].id,
        summary_count=(previous.get("summary_count", 0) if previous else 0) + 1,
        question=question,
        question_budget=question_budget(config.threshold_tokens),
        files_budget=files_budget(config.threshold_tokens),
        profile=config.token_profile,
        carried_question=carried,
        conversation=tuple(state_messages[:global_cutoff]),
        references_budget=references_budget(config.threshold_tokens),
        earlier_references=tuple(
            references_in_summary(content_text(previous["summary_message"].content)) if previous else ()
        ),
    )


def _still_current(
    previous: SummarizationEvent, summarised: Sequence[BaseMessage], kept: Sequence[BaseMessage]
) -> str | None:
    """The previous summary's question section, when no user request came after it."""
    if any(is_user_request(message) for message in [*summarised, *kept]):
        return None
    return previous.get("question_section")


#: The share of the free room (the threshold less the bare summary, the kept messages and the next
#: exchange) a cut question may take, and the share of what the question leaves that the file list
#: may take: the rest stays free for the exchanges after the next one, so summaries do not follow
#: each other closely. A question that fits the free room whole is quoted whole (`carried_sections`).
CARRIED_SHARE_OF_HEADROOM = 0.5
#: Below this many tokens a quote is no help: the section is left out (the history file has it).
MIN_QUESTION_TOKENS = 24


def finish_summary(
    plan: SummaryPlan,
    saved: SavedSummary,
    headroom: Callable[[list[BaseMessage]], int] | None = None,
    *,
    one_file: bool = False,
) -> SummaryStep:
    """The new event and view, from the plan and what its history write and summary call gave.

    `headroom(view)` is how many tokens a request of `view` leaves below the threshold (or the
    context window); the carried sections (quoted question, earlier files) take only room that the
    bare summary, the kept messages and the next exchange leave (`carried_sections`), so they are
    never what keeps the request over. Without it only the threshold shares bound them.
    `one_file` (after an overflow, where every token counts): the message names the conversation
    file alone when there is one (it holds this summary's span too); the event still names the
    history file (S15).
    """
    outcome = saved.outcome
    text = outcome.text if outcome.ok else failed_summary_text(outcome.error or "", plan.messages)
    named_history = None if one_file and saved.conversation_file else saved.file_path
    bare = make_summary_message(text, named_history, plan.summary_count, (), saved.conversation_file)
    free = None
    if headroom is not None:
        # The next call adds about one more exchange like the last: that stays free as well.
        growth = headroom([]) - headroom(last_exchange(plan.kept))
        free = max(0, headroom([bare, *plan.kept]) - growth)
    sections = carried_sections(plan, saved.file_path, free, saved.conversation_file, text)
    summary_message = make_summary_message(
        text, named_history, plan.summary_count, sections.texts, saved.conversation_file
    )
    event: SummarizationEvent = {
        "cutoff_index": plan.span.end,
        "summary_message": summary_message,
        "file_path": saved.file_path,
        "first_kept_id": plan.first_kept_id,
        "summary_count": plan.summary_count,
        "question_section": sections.question,
        "earlier_files": list(plan.span.earlier_files),
    }
    return SummaryStep(
        event,
        [summary_message, *plan.kept],
        outcome.error,
        saved.write_error,
        sections.question_shortfall,
        (*outcome.degraded, *sections.degraded),
    )


def last_exchange(kept: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The latest model turn among `kept`: its last AI message and the tool results after it."""
    for index in range(len(kept) - 1, -1, -1):
        if isinstance(kept[index], AIMessage):
            return list(kept[index:])
    return list(kept[-1:])


@dataclass(frozen=True)
class CarriedSections:
    question: str | None  # the question section carried on to the next summary (kept whole)
    texts: list[str]  # the sections this summary message shows
    question_shortfall: int = 0  # see `SummaryStep.question_shortfall`
    degraded: tuple[Degradation, ...] = ()  # a section whose rule raised is left out


def carried_sections(
    plan: SummaryPlan,
    file_path: str | None,
    free: int | None,
    conversation_file: str | None = None,
    summary_text: str = "",
) -> CarriedSections:
    """The quoted question, the earlier files and the references, within the `free` tokens the
    request leaves (None: only their own budgets bound them). With a conversation file there is no
    list: the summary message names that file, which holds every earlier message (`carried.py`).
    The references (`references.py`) take what the question and the list leave of that share,
    without those the summary text, the question or the kept messages already show.

    The question comes first: quoted whole when it fits its budget and the free room -- the current
    request is what the kept messages answer, and a cut quote loses its middle -- else its head and
    tail within `CARRIED_SHARE_OF_HEADROOM` of the free room. The files take that share of what the
    question leaves, so the rest stays free for the exchanges after the next one. A section that
    does not fit even shortened is left out of the message; the history file keeps its text.
    """
    full_text_in = conversation_file or file_path  # where a cut question is whole
    raw = plan.question
    if raw is None and plan.carried_question:
        raw = plan.carried_question.removeprefix(QUESTION_HEADING).lstrip("\n")
    question = (
        question_section(plan.question, full_text_in, plan.question_budget, plan.profile)
        if plan.question is not None
        else plan.carried_question
    )
    unbounded = plan.question_budget + plan.files_budget + plan.references_budget
    degraded: list[Degradation] = []
    texts: list[str] = []
    used = 0
    shortfall = 0
    if question and raw is not None:
        whole = plan.question_budget if free is None else min(plan.question_budget, free)
        cut = plan.question_budget if free is None else min(plan.question_budget, _share(free))
        question_tokens = estimate_tokens(question, plan.profile)
        if question_tokens <= whole:
            texts.append(question)
        elif free is not None and question_tokens <= plan.question_budget:
            shortfall = question_tokens - free
        if question_tokens > whole and cut >= MIN_QUESTION_TOKENS:
            texts.append(question_section(raw, full_text_in, cut // 2, plan.profile))
        used = sum(estimate_tokens(text, plan.profile) for text in texts)
    left = unbounded - used if free is None else _share(max(0, free - used))
    files = plan.span.earlier_files
    budget = min(plan.files_budget, left)
    if files and budget > 0 and conversation_file is None:
        listed = files_section(files, file_path, budget, plan.profile)
        listed_tokens = estimate_tokens(listed, plan.profile)
        if listed_tokens > budget:  # only where the list is, when that fits
            listed = files_section(files, file_path, 0, plan.profile)
            listed_tokens = estimate_tokens(listed, plan.profile)
        if listed_tokens <= left:
            texts.append(listed)
            left -= listed_tokens
    # Half of what the question and the list leave: the references are the least needed of the
    # three (the conversation file holds them in context), and each token they take brings the
    # next summary nearer.
    budget = min(plan.references_budget, _share(left))
    if budget > 0:

        def section() -> str | None:
            shown = "\n".join([summary_text, *texts, *(shown_text(message) for message in plan.kept)])
            return references_section(plan.references(budget), shown, budget, plan.profile)

        if references := contain(RULE_REFERENCES, section, lambda: None, degraded):
            texts.append(references)
    return CarriedSections(question, texts, shortfall, tuple(degraded))


def _share(free: int) -> int:
    return int(free * CARRIED_SHARE_OF_HEADROOM)


def save_history(workdir: Workdir, plan: SummaryPlan) -> SavedHistory:
    """The history file, then the conversation file; a failure is logged, never raised (S27).

    Without the history file the summary has no file to name (S27, S28); without the conversation
    file it lists the earlier files instead (a warning: nothing is lost, a read may take two)."""
    try:
        file_path = write_history(workdir, plan.span, plan.history)
    except Exception as exc:
        logger.error("could not save conversation history %s: %s", plan.span, short_error(exc))
        return SavedHistory(None, short_error(exc))
    if not plan.conversation:
        return SavedHistory(file_path, None)
    history_files = [path for path in plan.span.earlier_files if in_history_dir(path)]
    try:
        conversation_file = write_conversation(
            workdir, plan.span.thread_id, plan.conversation, [*history_files, file_path]
        )
    except Exception as exc:
        logger.warning(
            "could not save the conversation file of %s (the summary lists the earlier files): %s",
            plan.span,
            short_error(exc),
        )
        return SavedHistory(file_path, None)
    return SavedHistory(file_path, None, conversation_file)


def save_and_summarize(
    plan: SummaryPlan,
    workdir: Workdir,
    model: BaseChatModel,
    config: CompressionConfig,
    timeout: float | None = None,
    *,
    counter: TokenCounter | None = None,
) -> SavedSummary:
    """The history write, then the summary call (sync callers); neither raises (S27)."""
    saved = save_history(workdir, plan)
    outcome = summarize(model, config, plan.messages, timeout, counter=counter)
    return SavedSummary(saved.file_path, saved.write_error, outcome, saved.conversation_file)


async def asave_and_summarize(
    plan: SummaryPlan,
    workdir: Workdir,
    model: BaseChatModel,
    config: CompressionConfig,
    timeout: float | None,
    *,
    counter: TokenCounter | None = None,
) -> SavedSummary:
    """The history write and the summary call running concurrently; neither raises (S27)."""
    saved, outcome = await asyncio.gather(
        asyncio.to_thread(save_history, workdir, plan),
        asummarize(model, config, plan.messages, timeout, counter=counter),
    )
    return SavedSummary(saved.file_path, saved.write_error, outcome, saved.conversation_file)
