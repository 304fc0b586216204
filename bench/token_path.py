"""Where a streamed token's CPU goes, framework against service (issue 17, the streaming lag goal).

    .venv/bin/python bench/token_path.py            # 50 concurrent streams of 200 tokens each
    .venv/bin/python bench/token_path.py --quick    # 10 streams

In this process, without HTTP or a database, the same fake model the streaming load uses
(`paced_service.PacedTokenModel`, here without its pacing) is streamed by N concurrent tasks, four
ways, each adding one layer of what a service run does per token:

1. `model.astream` alone (LangChain: callbacks, chunk merging);
2. the `create_agent` graph's `astream` with the service's stream modes (`messages`, `updates`,
   `custom`, subgraphs) -- what LangGraph's Agent Server also runs per token;
3. + ctxpress's `StreamMapper` (the SSE payload of each chunk);
4. + the `DeltaStream` that coalesces deltas onto the in-process live bus;
5. what the service runs now: the graph streamed with `updates` and `custom` only, the deltas taken
   by ctxpress's `TokenTap` callback (`runtime/token_tap.py`) into the `DeltaStream`.

CPU microseconds per token (process time ÷ tokens), the median of rounds run in turn. The ratio of
(4) to (2) is what the service's old path added on top of the framework, (5) ÷ (4) what the tap saves; 5,000 tokens/s (100 streams at 50
tokens/s, the streaming load) times the figure is the share of a core the token path needs.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from langchain.agents import create_agent

from common import bench_parser
from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.repositories.run_events import NewEvent
from ctxpress.app.server.runtime.delta_stream import DeltaStream
from ctxpress.app.server.runtime.live_events import MemoryLiveBus
from ctxpress.app.server.runtime.stream_mapping import StreamMapper
from ctxpress.app.server.runtime.token_tap import TokenTap
from paced_service import PacedTokenModel

TOKENS = 200
ROUNDS = 5
STREAM_MODES = ["messages", "updates", "custom"]
LOAD_TOKENS_PER_S = 5_000  # 100 streams × 50 tokens/s: the streaming load of bench/streaming_load.py


def main() -> None:
    args = bench_parser(__doc__, "10 streams instead of 50").parse_args()
    streams = 10 if args.quick else 50
    model = PacedTokenModel(tokens=TOKENS, tokens_per_s=1e9)
    graph = create_agent(model, tools=[])
    metrics = ServiceMetrics()
    bus = MemoryLiveBus(metrics=metrics, maxlen=10_000)

    async def model_only() -> None:
        async for _ in model.astream("hi"):
            pass

    async def through_graph(*, mapper: bool = False, deltas: bool = False) -> None:
        mapping = StreamMapper(tool_result_preview_chars=200)
        coalescer = DeltaStream(
            f"run-{id(mapping)}", bus=bus, metrics=metrics, window_seconds=0.05, max_chars=512
        )
        async for namespace, mode, data in graph.astream(
            {"messages": [("user", "hi")]}, stream_mode=STREAM_MODES, subgraphs=True
        ):
            if not mapper:
                continue
            for item in mapping.map(tuple(namespace), str(mode), data):
                if deltas and isinstance(item, NewEvent) and item.type == "message_delta":
                    coalescer.add(item.data)
        coalescer.close()

    async def tapped() -> None:
        coalescer = DeltaStream(
            f"run-{id(object())}", bus=bus, metrics=metrics, window_seconds=0.05, max_chars=512
        )
        tap = TokenTap(coalescer.add)
        async for _ in graph.astream(
            {"messages": [("user", "hi")]},
            {"callbacks": [tap]},
            stream_mode=["updates", "custom"],
            subgraphs=True,
        ):
            pass
        coalescer.close()

    layers: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("1 model.astream (LangChain)", model_only),
        ("2 + agent graph astream (LangGraph)", through_graph),
        ("3 + StreamMapper (ctxpress)", lambda: through_graph(mapper=True)),
        ("4 + DeltaStream and live bus (ctxpress)", lambda: through_graph(mapper=True, deltas=True)),
        ("5 the service now: updates + custom, TokenTap into DeltaStream", tapped),
    ]

    async def measure() -> dict[str, list[float]]:
        found: dict[str, list[float]] = {name: [] for name, _ in layers}
        for _ in range(ROUNDS):
            for name, stream in layers:
                started = time.process_time()
                await asyncio.gather(*(stream() for _ in range(streams)))
                found[name].append((time.process_time() - started) / (streams * TOKENS) * 1e6)
        return found

    found = asyncio.run(measure())
    medians = {name: statistics.median(values) for name, values in found.items()}
    print(f"{streams} concurrent streams × {TOKENS} tokens, median of {ROUNDS} rounds (CPU µs per token)")
    print("| layer | µs per token | share of a core at 5,000 tokens/s |")
    print("| --- | --- | --- |")
    for name, value in medians.items():
        print(f"| {name} | {value:.1f} | {value * LOAD_TOKENS_PER_S / 1e6:.0%} |")
    framework = medians[layers[1][0]]
    service = medians[layers[3][0]]
    print(f"ctxpress's token path ÷ the framework's (4 ÷ 2): {service / framework:.2f}×")
    print(f"the token tap ÷ the messages mode path (5 ÷ 4): {medians[layers[4][0]] / service:.2f}×")


if __name__ == "__main__":
    main()
