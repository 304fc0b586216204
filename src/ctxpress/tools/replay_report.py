"""`ctxpress replay`: recorded conversations through the middleware, per-call figures, an HTML report.

This is how new settings are checked against typical tool output and a target context window
(S23). Every recorded AI message marks one model call (`ctxpress.tools.replay.replay_messages`); the
summary model is the built-in offline model, so the replay needs no network. For each call the
report keeps the estimate before compression, what was sent, the decision (none, L1, L2), the
files written and the tokens saved; `render_html` draws the pressure (estimate / threshold) over
the conversation with the L1 / L2 calls marked, as one self-contained page (inline SVG, no
scripts, nothing fetched).
"""

from __future__ import annotations

import html
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, SystemMessage

from ctxpress.compaction import CompactionCache
from ctxpress.config import CompressionConfig
from ctxpress.events import FAILED, L1, L2, Level
from ctxpress.middleware import ContextCompressionMiddleware
from ctxpress.pressure import SUGGEST_COMPRESS_RATIO
from ctxpress.tokens import count_request_tokens
from ctxpress.tools.replay import ReplayStep, replay_messages
from ctxpress.tools.traces import Conversation
from ctxpress.workdir import LocalWorkdir


@dataclass(frozen=True)
class CallFigures:
    """One model call of a replayed conversation."""

    number: int  # 1-based, within the conversation
    position: int  # index of the recorded AI message (after the system message)
    tokens_before: int
    tokens_sent: int
    level: Level | None  # None: sent as it was
    files_written: tuple[str, ...]
    failed: str | None = None

    @property
    def tokens_saved(self) -> int:
        return max(0, self.tokens_before - self.tokens_sent) if self.level else 0


@dataclass
class ConversationFigures:
    name: str
    source: str
    messages: int
    #: System prompt and tool schemas: every request carries them, compression cannot shrink them.
    fixed_tokens: int = 0
    calls: list[CallFigures] = field(default_factory=list)
    error: str | None = None

    def count(self, level: Level) -> int:
        return sum(1 for call in self.calls if call.level == level)

    @property
    def tokens_saved(self) -> int:
        return sum(call.tokens_saved for call in self.calls)

    @property
    def peak_before(self) -> int:
        return max((call.tokens_before for call in self.calls), default=0)

    @property
    def peak_sent(self) -> int:
        return max((call.tokens_sent for call in self.calls), default=0)

    @property
    def compressed(self) -> bool:
        return any(call.level for call in self.calls)


@dataclass
class ReplayReport:
    trace: str
    config: CompressionConfig
    context_window: int | None
    conversations: list[ConversationFigures] = field(default_factory=list)

    @property
    def threshold(self) -> int:
        return self.config.threshold_tokens

    @property
    def calls(self) -> list[CallFigures]:
        return [call for conversation in self.conversations for call in conversation.calls]

    def count(self, level: Level) -> int:
        return sum(conversation.count(level) for conversation in self.conversations)

    @property
    def tokens_saved(self) -> int:
        return sum(conversation.tokens_saved for conversation in self.conversations)

    @property
    def fixed_over_threshold(self) -> list[ConversationFigures]:
        """Conversations whose system prompt and tool schemas alone reach the threshold (S23)."""
        return [c for c in self.conversations if c.fixed_tokens >= self.threshold]

    def over_window(self, call: CallFigures) -> bool:
        return self.context_window is not None and call.tokens_sent > self.context_window

    @property
    def calls_over_window(self) -> int:
        return sum(1 for call in self.calls if self.over_window(call))


def model_calls(conversation: Conversation) -> int:
    """How many model calls replaying `conversation` makes (AI messages after the first message)."""
    rest = (
        conversation.messages[1:]
        if conversation.messages and isinstance(conversation.messages[0], SystemMessage)
        else conversation.messages
    )
    return sum(1 for position, message in enumerate(rest) if isinstance(message, AIMessage) and position > 0)


def replay_conversation(
    conversation: Conversation,
    config: CompressionConfig,
    summary_model: BaseChatModel,
    *,
    workdir_root: Path | None = None,
    on_call: Callable[[CallFigures], None] | None = None,
) -> ConversationFigures:
    """Replay one conversation; its workdir is a temporary folder unless `workdir_root` is given.

    `summary_model` answers both the replayed model calls and the summary requests (the command line
    passes the built-in offline model, so a replay needs no network)."""
    system = (
        conversation.messages[0]
        if conversation.messages and isinstance(conversation.messages[0], SystemMessage)
        else None
    )
    figures = ConversationFigures(
        conversation.name,
        conversation.source,
        len(conversation.messages),
        fixed_tokens=count_request_tokens([], system, conversation.tools, config.token_profile),
    )

    def record(step: ReplayStep) -> None:
        call = _call_figures(len(figures.calls) + 1, step)
        figures.calls.append(call)
        if on_call is not None:
            on_call(call)

    with tempfile.TemporaryDirectory(prefix="ctxpress-replay-") as scratch:
        root = workdir_root / _folder_name(conversation.name) if workdir_root else Path(scratch)
        workdir = LocalWorkdir(root, durable=False)  # atomic writes without fsync: a replay
        middleware = ContextCompressionMiddleware(
            config, workdir=workdir, summary_model=summary_model, cache=CompactionCache()
        )
        try:
            replay_messages(
                conversation.messages,
                middleware,
                model=summary_model,
                tools=conversation.tools,
                on_step=record,
            )
        except Exception as exc:  # one broken conversation must not end the whole replay
            figures.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return figures


def _call_figures(number: int, step: ReplayStep) -> CallFigures:
    failed = next((event["error"] for event in step.events if event["status"] == FAILED), None)
    return CallFigures(
        number=number,
        position=step.position,
        tokens_before=step.tokens_before,
        tokens_sent=step.tokens_sent,
        level=step.level,
        files_written=tuple(dict.fromkeys(step.files_written)),
        failed=failed,
    )


def _folder_name(name: str) -> str:
    return "".join(character if character.isalnum() or character in "-_." else "_" for character in name)[
        :120
    ]


# --- the HTML page --------------------------------------------------------------------------------

PLOT_WIDTH = 960
PLOT_HEIGHT = 260
MARGIN_LEFT = 56
MARGIN_RIGHT = 16
MARGIN_TOP = 14
MARGIN_BOTTOM = 34
MAX_RATIO_SHOWN = 6.0
COLOR_BEFORE = "#9aa4b2"
COLOR_SENT = "#1f6feb"
COLOR_THRESHOLD = "#d1242f"
COLOR_HINT = "#bf8700"
COLOR_WINDOW = "#8250df"
COLOR_L1 = "#fb8500"
COLOR_L2 = "#cf222e"
DEFAULT_DETAILED_CONVERSATIONS = 40
#: Above this many conversations the overview draws no conversation boundaries (they would be a wall).
MAX_BOUNDARIES = 60
#: Above this many calls in one plot the marks get smaller.
DENSE_CALLS = 300


def render_html(report: ReplayReport, *, detailed_conversations: int = DEFAULT_DETAILED_CONVERSATIONS) -> str:
    """The report as one self-contained HTML page."""
    config = report.config
    settings = (
        f"threshold {config.summary_threshold:g}K ({report.threshold:,} tokens) · keep {config.summary_keep_messages} "
        f"· tool limit {config.summary_tool_result_token_limit} · profile {config.token_profile}"
        + (f" · context window {report.context_window:,}" if report.context_window else "")
    )
    # Conversations where compression happened first (stable: in replay order within each group).
    ordered = sorted(report.conversations, key=lambda conversation: not conversation.compressed)
    shown = [conversation for conversation in ordered if conversation.calls][:detailed_conversations]
    sections = "\n".join(_conversation_section(report, conversation) for conversation in shown)
    boundaries = _boundaries(report) if len(report.conversations) <= MAX_BOUNDARIES else []
    overview = _plot(report, report.calls, "All model calls, in order", boundaries)
    return _PAGE.format(
        title=html.escape(f"ctxpress replay · {report.trace}"),
        trace=html.escape(report.trace),
        settings=html.escape(settings),
        summary=_summary_table(report),
        legend=_legend(report),
        overview=overview,
        detailed=len(shown),
        total=len(report.conversations),
        sections=sections,
        table=_conversation_table(report),
    )


def _boundaries(report: ReplayReport) -> list[int]:
    """Call indexes (0-based, across the report) where a new conversation starts."""
    starts, index = [], 0
    for conversation in report.conversations:
        if conversation.calls and index:
            starts.append(index)
        index += len(conversation.calls)
    return starts


def _summary_table(report: ReplayReport) -> str:
    rows = [
        ("conversations", f"{len(report.conversations):,}"),
        ("model calls", f"{len(report.calls):,}"),
        ("calls with L1 only", f"{report.count(L1):,}"),
        ("calls with L2 (summary)", f"{report.count(L2):,}"),
        ("tokens saved (approx.)", f"{report.tokens_saved:,}"),
        (
            "peak estimate before / sent",
            f"{max((c.tokens_before for c in report.calls), default=0):,} / "
            f"{max((c.tokens_sent for c in report.calls), default=0):,}",
        ),
    ]
    if report.context_window:
        rows.append(("calls over the context window", f"{report.calls_over_window:,}"))
    fixed = report.fixed_over_threshold
    if fixed:
        rows.append(
            ("system prompt + tools alone ≥ threshold", f"{len(fixed):,} conversations: raise the threshold")
        )
    failures = [c for c in report.conversations if c.error]
    if failures:
        rows.append(("conversations that failed", f"{len(failures):,}"))
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="summary">{cells}</table>'


def _legend(report: ReplayReport) -> str:
    items = [
        (f'<span class="swatch" style="background:{COLOR_BEFORE}"></span>estimate before compression'),
        (f'<span class="swatch" style="background:{COLOR_SENT}"></span>sent to the model'),
        (f'<span class="swatch" style="background:{COLOR_THRESHOLD}"></span>threshold (1.0)'),
        (
            f'<span class="swatch" style="background:{COLOR_HINT}"></span>{SUGGEST_COMPRESS_RATIO:.0%}: manual-compress hint'
        ),
        (f'<span class="dot" style="background:{COLOR_L1}"></span>L1: tool results compacted'),
        (f'<span class="diamond" style="background:{COLOR_L2}"></span>L2: history summarised'),
    ]
    if report.context_window:
        items.append(f'<span class="swatch" style="background:{COLOR_WINDOW}"></span>model context window')
    return '<p class="legend">' + " ".join(f"<span>{item}</span>" for item in items) + "</p>"


def _conversation_section(report: ReplayReport, conversation: ConversationFigures) -> str:
    heading = (
        f"{conversation.name} — {len(conversation.calls)} calls, L1 {conversation.count(L1)}, "
        f"L2 {conversation.count(L2)}, saved {conversation.tokens_saved:,} tokens"
    )
    error = f'<p class="error">{html.escape(conversation.error)}</p>' if conversation.error else ""
    return (
        f'<section class="conversation"><h3>{html.escape(heading)}</h3>{error}'
        f"{_plot(report, conversation.calls, conversation.name, [])}</section>"
    )


def _conversation_table(report: ReplayReport) -> str:
    header = "".join(
        f"<th>{name}</th>"
        for name in (
            "conversation",
            "messages",
            "calls",
            "L1",
            "L2",
            "peak before",
            "peak sent",
            "saved",
            "note",
        )
    )
    rows = []
    for conversation in report.conversations:
        note = conversation.error or (
            f"system + tools {conversation.fixed_tokens:,} ≥ threshold"
            if conversation.fixed_tokens >= report.threshold
            else ""
        )
        if report.context_window:
            over = sum(1 for call in conversation.calls if report.over_window(call))
            note = note or (f"{over} calls over the window" if over else "")
        cells = [
            conversation.name,
            f"{conversation.messages:,}",
            f"{len(conversation.calls):,}",
            str(conversation.count(L1)),
            str(conversation.count(L2)),
            f"{conversation.peak_before:,}",
            f"{conversation.peak_sent:,}",
            f"{conversation.tokens_saved:,}",
            note,
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    return (
        f'<table class="conversations"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _plot(report: ReplayReport, calls: Sequence[CallFigures], label: str, boundaries: Sequence[int]) -> str:
    """An SVG line chart of estimate / threshold per call, with L1 / L2 marks."""
    threshold = report.threshold or 1
    ratios_before = [call.tokens_before / threshold for call in calls]
    ratios_sent = [call.tokens_sent / threshold for call in calls]
    window_ratio = report.context_window / threshold if report.context_window else None
    top = max([1.2, *ratios_before, *ratios_sent, (window_ratio or 0) * 1.05])
    top = min(top, MAX_RATIO_SHOWN)
    inner_w = PLOT_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    inner_h = PLOT_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    count = max(len(calls), 1)

    def x(index: int) -> float:
        return MARGIN_LEFT + (inner_w * (index + 0.5) / count)

    def y(ratio: float) -> float:
        return MARGIN_TOP + inner_h * (1 - min(ratio, top) / top)

    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" viewBox="0 0 {PLOT_WIDTH} {PLOT_HEIGHT}" '
        f'width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" aria-label="{html.escape(label, quote=True)}">',
        f"<title>{html.escape(label)}: pressure per model call</title>",
        f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{inner_w}" height="{inner_h}" fill="#fff" stroke="#d0d7de"/>',
    ]
    for tick in _ticks(top):
        parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + inner_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eaeef2"/>'
            f'<text x="{MARGIN_LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" class="tick">{tick:g}</text>'
        )
    for boundary in boundaries:
        bx = MARGIN_LEFT + inner_w * boundary / count
        parts.append(
            f'<line x1="{bx:.1f}" x2="{bx:.1f}" y1="{MARGIN_TOP}" y2="{MARGIN_TOP + inner_h}" stroke="#f0f2f4"/>'
        )
    parts.append(_hline(y(1.0), inner_w, COLOR_THRESHOLD, "threshold", dash=""))
    parts.append(_hline(y(SUGGEST_COMPRESS_RATIO), inner_w, COLOR_HINT, "85% hint", dash="4 3"))
    if window_ratio is not None and window_ratio <= top:
        parts.append(_hline(y(window_ratio), inner_w, COLOR_WINDOW, "context window", dash="8 4"))
    if calls:
        parts.append(
            _polyline([(x(i), y(r)) for i, r in enumerate(ratios_before)], COLOR_BEFORE, "before", "3 2")
        )
        parts.append(_polyline([(x(i), y(r)) for i, r in enumerate(ratios_sent)], COLOR_SENT, "sent", ""))
    size = 2.5 if len(calls) > DENSE_CALLS else 4.5
    for index, call in enumerate(calls):
        tip = html.escape(
            f"call {call.number}: estimate {call.tokens_before:,}, sent {call.tokens_sent:,}"
            + (f", {call.level.upper()}, saved {call.tokens_saved:,}" if call.level else "")
            + (f", {len(call.files_written)} files written" if call.files_written else "")
            + (f", failed: {call.failed}" if call.failed else "")
        )
        cx, cy = x(index), y(ratios_sent[index])
        if call.level == L2:
            d = size + 1.5  # a diamond
            parts.append(
                f'<path class="mark-l2" d="M{cx:.1f} {cy - d:.1f} L{cx + d:.1f} {cy:.1f} L{cx:.1f} {cy + d:.1f} '
                f'L{cx - d:.1f} {cy:.1f} Z" fill="{COLOR_L2}"><title>{tip}</title></path>'
            )
        elif call.level == L1:
            parts.append(
                f'<circle class="mark-l1" cx="{cx:.1f}" cy="{cy:.1f}" r="{size}" fill="{COLOR_L1}"><title>{tip}</title></circle>'
            )
        else:
            parts.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2" fill="{COLOR_SENT}"><title>{tip}</title></circle>'
            )
    parts.append(
        f'<text x="{MARGIN_LEFT + inner_w / 2:.1f}" y="{PLOT_HEIGHT - 8}" text-anchor="middle" class="axis">'
        f"model call (1 … {len(calls)})</text>"
        f'<text x="14" y="{MARGIN_TOP + inner_h / 2:.1f}" text-anchor="middle" class="axis" '
        f'transform="rotate(-90 14 {MARGIN_TOP + inner_h / 2:.1f})">estimate / threshold</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _ticks(top: float) -> list[float]:
    step = 0.25 if top <= 1.5 else 0.5 if top <= 3 else 1.0
    ticks, value = [], 0.0
    while value <= top + 1e-9:
        ticks.append(round(value, 2))
        value += step
    return ticks


def _hline(y: float, width: float, color: str, label: str, dash: str) -> str:
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + width}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}"{dash_attr}>'
        f"<title>{label}</title></line>"
    )


def _polyline(points: list[tuple[float, float]], color: str, name: str, dash: str) -> str:
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    coordinates = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    return f'<polyline class="line-{name}" points="{coordinates}" fill="none" stroke="{color}" stroke-width="1.6"{dash_attr}/>'


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "Noto Sans CJK SC", sans-serif; margin: 24px; color: #1f2328; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }}
h2 {{ font-size: 16px; margin: 28px 0 8px; }}
h3 {{ font-size: 13px; margin: 18px 0 4px; font-weight: 600; }}
.settings {{ color: #59636e; margin: 0 0 12px; }}
table {{ border-collapse: collapse; margin: 8px 0; }}
th, td {{ border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; font-size: 13px; }}
table.summary th {{ background: #f6f8fa; font-weight: 500; }}
table.conversations td:nth-child(n+2):nth-child(-n+8) {{ text-align: right; }}
.legend span {{ margin-right: 14px; white-space: nowrap; }}
.swatch {{ display: inline-block; width: 18px; height: 3px; vertical-align: middle; margin-right: 4px; }}
.dot {{ display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 4px; }}
.diamond {{ display: inline-block; width: 8px; height: 8px; transform: rotate(45deg); margin-right: 6px; }}
svg.plot {{ max-width: 100%; height: auto; }}
svg .tick, svg .axis {{ font-size: 11px; fill: #59636e; }}
.error {{ color: #cf222e; }}
</style>
</head>
<body>
<h1>ctxpress replay</h1>
<p class="settings">{trace}<br>{settings}</p>
{summary}
{legend}
<h2>Pressure over the replay</h2>
{overview}
<h2>Conversations ({detailed} of {total} plotted, those with compression first)</h2>
{sections}
<h2>Every conversation</h2>
{table}
</body>
</html>
"""


def report_as_dict(report: ReplayReport) -> dict[str, Any]:
    """The report's figures as plain data (for `--json`)."""
    return {
        "trace": report.trace,
        "threshold_tokens": report.threshold,
        "context_window": report.context_window,
        "conversations": [
            {
                "name": conversation.name,
                "source": conversation.source,
                "error": conversation.error,
                "calls": [
                    {
                        "call": call.number,
                        "tokens_before": call.tokens_before,
                        "tokens_sent": call.tokens_sent,
                        "level": call.level,
                        "tokens_saved": call.tokens_saved,
                        "files_written": list(call.files_written),
                        "failed": call.failed,
                    }
                    for call in conversation.calls
                ],
            }
            for conversation in report.conversations
        ],
    }
