"""`ctxpress serve` with a probe of its garbage collector (for `test_collector_pauses.py`).

Run as `python heap_probe.py <port> <control>`: serves like `ctxpress serve --port <port>`; when the
caller creates `<control>/measure`, a thread of the serving process times a full collection as the
process stands, then again with every object back in the collector's reach (`gc.unfreeze()`), and
writes both to `<control>/heap.json`.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
from pathlib import Path

from ctxpress.app.cli import app as cli


def full_collection_seconds() -> float:
    began = time.perf_counter()
    gc.collect()
    return time.perf_counter() - began


def measure_when_asked(control: Path) -> None:
    while not (control / "measure").exists():
        time.sleep(0.05)
    as_served = {"seconds": full_collection_seconds(), "tracked": len(gc.get_objects())}
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    unfrozen = {"seconds": full_collection_seconds(), "tracked": len(gc.get_objects())}
    report = {"as_served": as_served, "unfrozen": unfrozen, "frozen": frozen}
    (control / "heap.json").write_text(json.dumps(report))


def main(argv: list[str]) -> None:
    port, control = argv[1], Path(argv[2])
    threading.Thread(target=measure_when_asked, args=(control,), daemon=True).start()
    cli(["serve", "--port", port, "--log-level", "warning"], standalone_mode=False)


if __name__ == "__main__":
    main(sys.argv)
