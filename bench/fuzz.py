"""The fuzzed flow (issue 44) as a campaign: generated conversations through real `create_agent`
graphs, sync and async, every invariant checked on every example.

    .venv/bin/python bench/fuzz.py --examples 100000 [--seed 0] [--repros 3] [--no-docs]

The examples come from the same Hypothesis strategy and go through the same runner and checks as
`tests/middleware/test_fuzzed_flow.py` (`ctxpress.app.testing.fuzz_flow`); Hypothesis generates
them (seeded, no example database, no shrinking) and the body records instead of raising, so one
failure does not end the campaign. Prints the examples per second, the paths reached (the deepest
of each example, and every model call's) and each distinct failure; the first `--repros` distinct
failures are then found again from the same seed and shrunk by Hypothesis to a minimal example
(within `--shrink-seconds` each). Without `--no-docs` the "Fuzzed flow" section of
`docs/benchmarks.md` is replaced with this run's figures.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

from ctxpress.app.testing.fuzz_flow import (
    PATH_LABELS,
    PATH_ORDER,
    FlowCase,
    Violation,
    check_case,
    flow_cases,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs" / "benchmarks.md"
MARKER = "fuzz"
REPR_CHARS = 3_000


@dataclass
class Campaign:
    examples: int = 0
    failed_examples: int = 0
    seconds: float = 0.0
    deepest: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)
    signatures: Counter[str] = field(default_factory=Counter)
    #: signature → (index of the first example showing it, that violation)
    first: dict[str, tuple[int, Violation]] = field(default_factory=dict)


def _settings(examples: int, phases: tuple[Phase, ...]) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )


def run_campaign(examples: int, seed_value: int, scratch: Path, progress: bool) -> Campaign:
    campaign = Campaign()

    @seed(seed_value)
    @_settings(examples, (Phase.generate,))
    @given(case=flow_cases())
    def one(case: FlowCase) -> None:
        index = campaign.examples
        campaign.examples += 1
        with tempfile.TemporaryDirectory(dir=scratch) as folder:
            report = check_case(case, Path(folder))
        campaign.deepest[report.deepest] += 1
        campaign.calls.update(report.call_paths)
        if report.violations:
            campaign.failed_examples += 1
        for signature in {v.signature(): v for v in report.violations}.items():
            campaign.signatures[signature[0]] += 1
            campaign.first.setdefault(signature[0], (index, signature[1]))
        if progress and campaign.examples % 100 == 0:
            rate = campaign.examples / (time.perf_counter() - started)
            print(
                f"  {campaign.examples} examples, {campaign.failed_examples} failed, {rate:.1f}/s",
                file=sys.stderr,
            )

    started = time.perf_counter()
    one()
    campaign.seconds = time.perf_counter() - started
    return campaign


@dataclass
class Repro:
    signature: str
    case: FlowCase | None = None
    violation: Violation | None = None


def shrink(signature: str, examples: int, seed_value: int, scratch: Path, budget_s: float) -> Repro:
    """The campaign's examples again (same seed and `max_examples`, on which Hypothesis's choices
    depend) until the first one showing `signature`, then Hypothesis's shrinker on it; past
    `budget_s` only the smallest failing case found so far still fails."""
    repro = Repro(signature)
    deadline = time.perf_counter() + budget_s

    @seed(seed_value)
    @_settings(examples, (Phase.generate, Phase.shrink))
    @given(case=flow_cases())
    def hunt(case: FlowCase) -> None:
        if repro.case is not None and time.perf_counter() > deadline and case != repro.case:
            return  # out of time: only the smallest case found so far fails
        with tempfile.TemporaryDirectory(dir=scratch) as folder:
            report = check_case(case, Path(folder))
        match = next((v for v in report.violations if v.signature() == signature), None)
        if match is not None:
            repro.case, repro.violation = case, match
            raise AssertionError(signature)

    try:
        hunt()
    except AssertionError:
        pass
    except Exception as exc:  # a flaky example: report what was found
        print(f"  shrinking stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
    return repro


def path_rows(campaign: Campaign) -> list[tuple[str, str, str, str]]:
    total = max(1, campaign.examples)
    calls = max(1, sum(campaign.calls.values()))
    rows = []
    for path in reversed(PATH_ORDER):
        rows.append(
            (
                PATH_LABELS[path],
                f"{campaign.deepest[path]:,}",
                f"{100 * campaign.deepest[path] / total:.1f}%",
                f"{campaign.calls[path]:,} ({100 * campaign.calls[path] / calls:.1f}%)",
            )
        )
    return rows


#: Issue 44's goal: this many examples in one campaign, none failing.
GOAL_EXAMPLES = 100_000


def goal_line(campaign: Campaign, rate: float) -> str:
    """Whether the campaign meets the goal, and if not, which half of it is missing."""
    if campaign.failed_examples == 0 and campaign.examples >= GOAL_EXAMPLES:
        return f"Goal ({GOAL_EXAMPLES:,} examples, 0 failures): **met**."
    missing = []
    if campaign.failed_examples:
        missing.append(f"{campaign.failed_examples:,} examples failed (the table below)")
    if campaign.examples < GOAL_EXAMPLES:
        hours = GOAL_EXAMPLES / rate / 3600 if rate else float("inf")
        missing.append(
            f"{campaign.examples:,} examples were run, not {GOAL_EXAMPLES:,} (at this rate that is "
            f"{hours:.0f} h of two cores)"
        )
    return f"Goal ({GOAL_EXAMPLES:,} examples, 0 failures): **not met**: {'; '.join(missing)}."


def report_lines(campaign: Campaign, seed_value: int, command: str) -> list[str]:
    rate = campaign.examples / campaign.seconds if campaign.seconds else 0.0
    lines = [
        "## Fuzzed flow",
        "",
        f"`{command}`",
        "",
        "Generated conversations (tool results of every JSON shape, huge strings and arguments, lone "
        "surrogates, NUL, CJK, emoji, images and files, reused and duplicated tool-call ids, parallel "
        "calls, system prompts; thresholds from 1 token to 1M, keep 1–50, every token profile; a fake "
        "model overflowing a random window) through real `create_agent` graphs with a real "
        "checkpointer, once with `invoke` and once with `ainvoke`; the invariants are those of "
        "`ctxpress.app.testing.fuzz_flow.check_case` (also `tests/middleware/test_fuzzed_flow.py`).",
        "",
        f"Run {datetime.now(UTC).date().isoformat()}, seed {seed_value}: {campaign.examples:,} examples "
        f"in {campaign.seconds:,.0f} s, **{rate:.1f} examples/s** (each example runs twice, sync and "
        f"async; 2 shared cores); **{campaign.failed_examples:,} failed** "
        f"({len(campaign.signatures)} distinct failures).",
        "",
        goal_line(campaign, rate),
        "",
        "| deepest path of an example | examples | share | model calls on that path |",
        "| --- | --- | --- | --- |",
        *(f"| {' | '.join(row)} |" for row in path_rows(campaign)),
    ]
    if campaign.signatures:
        lines += ["", "| failure (invariant: detail) | examples |", "| --- | --- |"]
        lines += [
            f"| {signature.replace('|', '/')} | {count:,} |"
            for signature, count in campaign.signatures.most_common(12)
        ]
    return lines


def update_docs(lines: list[str]) -> None:
    """Replace the section between `<!-- fuzz:start -->` and `<!-- fuzz:end -->` (appended when
    missing), as `bench/common.update_docs` does for the other benches."""
    start, end = f"<!-- {MARKER}:start -->", f"<!-- {MARKER}:end -->"
    block = "\n".join([start, *lines, end])
    text = DOCS.read_text(encoding="utf-8")
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    DOCS.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repros", type=int, default=3, help="distinct failures to shrink (0: none)")
    parser.add_argument("--shrink-seconds", type=float, default=300.0)
    parser.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args()
    # The middleware logs every forced summary and every failed write; thousands of them here.
    logging.getLogger("ctxpress").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="ctxpress-fuzz-") as folder:
        scratch = Path(folder)
        campaign = run_campaign(args.examples, args.seed, scratch, progress=not args.quiet)
        command = f".venv/bin/python bench/fuzz.py --examples {args.examples} --seed {args.seed}"
        lines = report_lines(campaign, args.seed, command)
        print("\n".join(lines))
        for signature, (index, violation) in sorted(campaign.first.items(), key=lambda item: item[1][0]):
            print(f"\n# first seen at example {index}: {signature}\n{violation.detail}")
            if violation.traceback:
                print(violation.traceback.rstrip()[-2_000:])
        firsts = sorted(campaign.first.items(), key=lambda item: item[1][0])[: args.repros]
        for signature, _first in firsts:
            repro = shrink(signature, args.examples, args.seed, scratch, args.shrink_seconds)
            print(f"\n# minimal example for: {signature}")
            if repro.case is None or repro.violation is None:
                print("  (not found again)")
                continue
            text = repr(repro.case)
            print(text if len(text) <= REPR_CHARS else text[:REPR_CHARS] + f"… ({len(text):,} characters)")
            print(repro.violation.detail)
            if repro.violation.traceback:
                print(repro.violation.traceback.rstrip()[-2_000:])
    if not args.no_docs:
        update_docs(lines)
    if os.environ.get("CI", "").lower() == "true" and campaign.failed_examples:
        sys.exit(1)


if __name__ == "__main__":
    main()
