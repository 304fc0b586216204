"""Finding and loading traces: format sniffing, one-file loading, and walking a folder of traces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ctxpress.tools.traces.acebench import ACEBENCH_FORMAT
from ctxpress.tools.traces.glaive import GLAIVE_FORMAT
from ctxpress.tools.traces.model import (
    MALFORMED_DATA_ERRORS,
    Conversation,
    TraceFormat,
    TraceFormatError,
    TracePayload,
    UnknownTraceFormatError,
    read_payload,
)
from ctxpress.tools.traces.openai_format import OPENAI_FORMAT
from ctxpress.tools.traces.openhands import OPENHANDS_FORMAT
from ctxpress.tools.traces.swe_agent import SWE_AGENT_FORMAT
from ctxpress.tools.traces.tau_bench import TAU_BENCH_FORMAT
from ctxpress.tools.traces.toolbench import TOOLBENCH_FORMAT

# Sniffing order: the most specific shapes first; plain OpenAI chat is the fallback.
TRACE_FORMATS: tuple[TraceFormat, ...] = (
    TOOLBENCH_FORMAT,
    SWE_AGENT_FORMAT,
    OPENHANDS_FORMAT,
    TAU_BENCH_FORMAT,
    GLAIVE_FORMAT,
    ACEBENCH_FORMAT,
    OPENAI_FORMAT,
)
FORMATS_BY_NAME = {trace_format.name: trace_format for trace_format in TRACE_FORMATS}
TRACE_SUFFIXES = frozenset({".json", ".jsonl", ".traj"})


def sniff_format(payload: TracePayload) -> TraceFormat | None:
    """The first format whose structure the payload has, or None."""
    return next((trace_format for trace_format in TRACE_FORMATS if trace_format.sniff(payload)), None)


def load_trace(path: Path, fmt: str | None = None, *, label: str | None = None) -> list[Conversation]:
    """The conversations in one trace file; the format is sniffed when ``fmt`` is None.

    ``label`` names the conversations (``f"{label}#{index}"``); it defaults to the file name.
    Raises ValueError (a ``TraceFormatError``) naming the file for unknown formats and bad data.
    """
    path = Path(path)
    if fmt is not None and fmt not in FORMATS_BY_NAME:
        raise ValueError(f"unknown trace format {fmt!r}; known formats: {', '.join(FORMATS_BY_NAME)}")
    payload = read_payload(path)
    trace_format = FORMATS_BY_NAME[fmt] if fmt is not None else sniff_format(payload)
    if trace_format is None:
        raise UnknownTraceFormatError(
            f"{path}: not a known trace format (known formats: {', '.join(FORMATS_BY_NAME)})"
        )
    return _load(trace_format, payload, path, label or path.name)


def iter_conversations(root: Path) -> Iterator[Conversation]:
    """Every conversation under ``root`` (or in ``root`` if it is a file), in a deterministic order.

    Files are visited in sorted relative-path order and named by that path. Hidden files, files
    that are not JSON/JSONL/.traj (licences, READMEs) and JSON that is no known trace format (e.g.
    ACEBench answer keys) are skipped; a trace file with broken JSON still raises.
    """
    root = Path(root)
    if root.is_file():
        yield from load_trace(root)
        return
    for path in trace_files(root):
        payload = read_payload(path)
        trace_format = sniff_format(payload)
        if trace_format is not None:
            yield from _load(trace_format, payload, path, path.relative_to(root).as_posix())


def trace_files(root: Path) -> list[Path]:
    """Candidate trace files under ``root``, sorted by relative path."""
    candidates = (
        path
        for path in root.rglob("*")
        if path.suffix in TRACE_SUFFIXES
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
        and path.is_file()
    )
    return sorted(candidates, key=lambda path: path.relative_to(root).as_posix())


def _load(trace_format: TraceFormat, payload: TracePayload, path: Path, label: str) -> list[Conversation]:
    try:
        conversations: list[Conversation] = trace_format.load(payload, label)
    except MALFORMED_DATA_ERRORS as exc:
        raise TraceFormatError(
            f"{path}: not a valid {trace_format.name} trace ({type(exc).__name__}: {exc})"
        ) from exc
    return conversations
