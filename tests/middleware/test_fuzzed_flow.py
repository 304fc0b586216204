"""Issue 44, the fuzzed flow: whole generated conversations through real `create_agent` graphs.

Hypothesis generates the conversation (tool results of every JSON shape, huge strings and
arguments, lone surrogates, NUL, CJK, emoji, binary-looking text, images and files, reused and
duplicated tool-call ids, parallel calls, system prompts), the configuration (threshold 1 token to
1M, keep 1 to 50, every token profile), a fake model overflowing a random window, a failing or
long-winded summary model and a real checkpointer (`InMemorySaver` or SQLite, LangGraph's
serializer or ctxpress's). Each example runs with `invoke` and with `ainvoke`, each with a fresh
checkpointer and `LocalWorkdir`. The generator, the runner and the oracles are
`ctxpress.app.testing.fuzz_flow` (shared with `bench/fuzz.py`); each property below asserts some of
the invariants listed on `fuzz_flow.check_case`.

Shrinking is off by default (a failing property would shrink for minutes); set
`CTXPRESS_FUZZ_SHRINK=1` for minimal examples, or run `bench/fuzz.py`, which shrinks the first
distinct failures of a campaign.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ctxpress.app.testing.fuzz_flow import CaseReport, FlowCase, check_case, flow_cases

PHASES = (
    tuple(Phase) if os.environ.get("CTXPRESS_FUZZ_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate)
)


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        phases=PHASES,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
        print_blob=True,
    )


@pytest.fixture(autouse=True)
def quiet_middleware() -> Iterator[None]:
    """Every forced summary logs a warning; hundreds of them hide the report."""
    logger = logging.getLogger("ctxpress")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def checked(case: FlowCase, invariants: set[str]) -> CaseReport:
    """Run `case` sync and async; fail on the first violation of one of `invariants`."""
    with tempfile.TemporaryDirectory(prefix="ctxpress-fuzz-") as folder:
        report = check_case(case, Path(folder))
    found = [v for v in report.violations if v.invariant in invariants]
    if found:
        lines = [f"{v.invariant}: {v.detail}" for v in found[:6]]
        pytest.fail("\n".join([*lines, case.short(), found[0].traceback[-4_000:]]), pytrace=False)
    return report


@fuzz_settings(60)
@given(case=flow_cases())
def test_no_unexpected_exception_and_sync_equals_async(case: FlowCase) -> None:
    """I1: every turn ends normally or with a documented error (`ContextOverflowError`,
    `SummarizerConflictError`); I5: `invoke` and `ainvoke` send the same requests, get the same
    outcomes, emit the same compression events and leave the same state and workdir files;
    I7: a model call's compression events are none, started → completed, or started → failed."""
    checked(case, {"exception", "sync==async", "events"})


@fuzz_settings(60)
@given(
    case=flow_cases(windows=st.one_of(st.integers(min_value=20, max_value=2_000), st.integers(2_000, 60_000)))
)
def test_requests_fit_or_end_with_the_documented_error(case: FlowCase) -> None:
    """I2: the first request of a model call is below the threshold unless the middleware could not
    send less: the kept part is minimal (the current message, or the current tool-call batch, which
    no cutoff may split), or the kept messages alone are below it and the summary message (bounded
    by `summary_output_budget`) tips it over -- `keep_that_fits` measures the kept part without the
    summary. Every retry after an overflow is strictly smaller than what overflowed.
    `ContextOverflowError` only after the model overflowed on a request that was minimal with its
    tool results trimmed, or whose least possible form (system prompt, an empty summary message
    when anything is cut, the kept part's non-tool messages) overflows too.
    I6: after a documented error the next turn (a short question) succeeds whenever the system
    prompt, a summary of the longest allowed length and that question fit the window.
    (Every case here has a window, so the overflow paths are reached often.)"""
    checked(case, {"size", "overflow", "recovery"})


@fuzz_settings(50)
@given(case=flow_cases())
def test_tool_call_pairs_stay_intact(case: FlowCase) -> None:
    """I3: in every request the model receives, each tool result follows the AI message that called
    it and every call is answered before the next message (as multisets: ids may repeat)."""
    checked(case, {"pairs"})


@fuzz_settings(50)
@given(case=flow_cases())
def test_every_compressed_byte_is_recoverable(case: FlowCase) -> None:
    """I4: a tool result or argument that a request or the state shows changed names a workdir file
    holding the original text (sha256 checked; `write_file`/`edit_file` content excepted, S7);
    every message before the final cutoff is whole in the history or conversation files, its
    offloaded results restored from the files their views name."""
    checked(case, {"recoverable"})
