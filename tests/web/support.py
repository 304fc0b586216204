"""What the browser tests share: the real-data `query_kb` tool, the agents, the browser launch.

The agents answer with the built-in offline model (`/tool name {json}` becomes a tool call, `/ask`
asks the user), so every run is deterministic and needs no language model. `query_kb` searches the
real CrossWOZ knowledge-base documents (Chinese restaurants and attractions of Beijing) from the
shared data folder: its results are large, realistic retrieval output that fills the context fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from functools import cache
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, tool

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from tests.fakes import ScriptedChatModel

IN_CI = os.environ.get("CI", "").lower() == "true"
#: Debian's `chromium` package; CTXPRESS_CHROMIUM overrides. Never a downloaded browser.
DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts"

KB_SOURCES = ("restaurant_db.json", "attraction_db.json")


def chromium_executable() -> str | None:
    configured = os.environ.get("CTXPRESS_CHROMIUM")
    if configured:
        return configured if Path(configured).is_file() else None
    if Path(DEFAULT_CHROMIUM).is_file():
        return DEFAULT_CHROMIUM
    return shutil.which("chromium")


@cache
def _kb_records(folder: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for source in KB_SOURCES:
        data = json.loads((Path(folder) / source).read_text(encoding="utf-8"))
        for index, (name, fields) in enumerate(data):
            body = json.dumps(fields, ensure_ascii=False)
            records.append(
                {
                    "id": f"{source.split('_')[0]}-{index}",
                    "title": name,
                    "source": f"crosswoz/{source}",
                    "body": body,
                }
            )
    return records


def make_query_kb(crosswoz: Path) -> BaseTool:
    folder = str(crosswoz)

    @tool
    def query_kb(query: str, top_k: int = 3) -> str:
        """Search the Beijing knowledge base (restaurants and attractions); JSON results, best first."""
        terms = [term for term in query.split() if term]
        scored = []
        for record in _kb_records(folder):
            hits = sum(record["title"].count(term) * 3 + record["body"].count(term) for term in terms)
            if hits:
                scored.append((hits, record))
        scored.sort(key=lambda item: (-item[0], item[1]["id"]))
        results = [
            {
                "id": record["id"],
                "title": record["title"],
                "source": record["source"],
                "score": round(hits / (hits + 5), 3),
                "content": record["body"],
            }
            for hits, record in scored[: max(1, min(top_k, 10))]
        ]
        return json.dumps({"query": query, "total": len(scored), "results": results}, ensure_ascii=False)

    return query_kb


class UnreachableSummaryModel(BaseChatModel):
    """A summary model whose server cannot be reached: every call fails (S28: manual compression errors)."""

    @property
    def _llm_type(self) -> str:
        return "unreachable"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise ConnectionError("the summary model's server refused the connection")


def kb_agent(
    name: str,
    crosswoz: Path,
    *,
    threshold_k: float,
    keep_messages: int = 2,
    default: bool = False,
    usage_provider: str | None = None,
    capabilities: tuple[str, ...] = ("context_compression",),
    summary_model: BaseChatModel | None = None,
) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        description="北京知识库助手（内置离线模型）",
        default=default,
        model=ModelSpec(model="builtin", usage_provider=usage_provider),
        summary_model=ModelSpec(model=summary_model) if summary_model is not None else None,
        system_prompt="你是北京旅游知识库助手。用 query_kb 检索餐馆和景点；不确定时用 ask_user 提问。",
        tools=("ask_user", "list_files", "read_file", make_query_kb(crosswoz)),
        capabilities=capabilities,  # type: ignore[arg-type]
        compression={
            "summary_threshold": threshold_k,
            "summary_keep_messages": keep_messages,
            "summary_tool_result_token_limit": 300,
        },
    )


def tool_message(query: str, top_k: int = 3) -> str:
    """What a user types to make the built-in model call `query_kb`."""
    return "/tool query_kb " + json.dumps({"query": query, "top_k": top_k}, ensure_ascii=False)


#: A reply written in Markdown: a heading, a list, a table, a code fence, a link, inline HTML (shown
#: as text) and a javascript: link (never a link).
MARKDOWN_REPLY = """## 北京三日行程

- **第一天**：故宫、景山公园
- **第二天**：颐和园

| 景点 | 门票 |
| --- | ---: |
| 故宫 | 60 元 |
| 颐和园 | 30 元 |

```python
print("你好，北京")
```

详见 [官网](https://www.dpm.org.cn) 与 [坏链接](javascript:alert(1))，<b>原样</b>显示。
"""
#: What `SlowWriterModel` writes when asked to write slowly: long enough to stop half-way.
SLOW_REPLY = "".join(f"第 {index} 段：北京的胡同很长，慢慢走。\n" for index in range(1, 200))


class SlowWriterModel(ScriptedChatModel):
    """Replies in Markdown; a message containing "慢" gets `SLOW_REPLY`, streamed a chunk every `delay` s."""

    delay: float = 0.05

    def __init__(self, **data: Any) -> None:
        super().__init__(script=_writer_reply, provider="fake", model_name="writer", **data)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Any:
        slow = "慢" in str(messages[-1].content)
        for chunk in self._stream(messages, stop, None, **kwargs):
            if slow:
                await asyncio.sleep(self.delay)
            yield chunk


def _writer_reply(messages: Any) -> AIMessage:
    return AIMessage(content=SLOW_REPLY if "慢" in str(messages[-1].content) else MARKDOWN_REPLY)


def writer_agent(name: str) -> AgentDefinition:
    """An agent whose model writes Markdown (and, on request, a long reply slowly): no tools."""
    return AgentDefinition(
        name=name,
        description="Markdown 写作助手（脚本模型）",
        model=ModelSpec(model=SlowWriterModel()),
        system_prompt="你用 Markdown 回答。",
        tools=(),
        capabilities=("context_compression",),
        compression={"summary_threshold": 24, "summary_keep_messages": 2},
    )
