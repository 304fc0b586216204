"""Run a module under cProfile until it exits or gets SIGTERM, then write the statistics:

    python bench/profiled.py OUT.prof MODULE [ARGS…]       # e.g. OUT.prof ctxpress.app.cli serve --port 8000

`bench/service_load.py --profile` runs `ctxpress serve` this way. uvicorn re-raises SIGTERM after its
graceful shutdown, so the handler installed here turns it into `SystemExit` and the statistics
are written on the way out. Only the main thread (the event loop) is profiled.
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
from collections import defaultdict
from pathlib import Path
from types import FrameType


def _exit(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


def by_package(stats_file: Path) -> tuple[float, dict[str, float]]:
    """Own time (tottime) per package -- site-packages top level, `ctxpress/<module>`, `stdlib`,
    or a builtin's name -- and the total, from a cProfile statistics file."""
    import pstats

    stats: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    stats = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    shares: defaultdict[str, float] = defaultdict(float)
    for (file, _line, function), (_cc, _nc, own, _cum, _callers) in stats.items():
        if "site-packages/" in file:
            name = file.split("site-packages/", 1)[1].split("/", 1)[0]
        elif "/src/ctxpress/" in file:
            name = "ctxpress/" + file.split("/src/ctxpress/", 1)[1].split("/", 1)[0]
        elif file == "~":
            name = function
        else:
            name = "stdlib"
        shares[name] += own
    return sum(shares.values()), dict(shares)


def main(argv: list[str]) -> None:
    out, module, *args = argv[1:]
    signal.signal(signal.SIGTERM, _exit)
    sys.argv = [module, *args]
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main(sys.argv)
