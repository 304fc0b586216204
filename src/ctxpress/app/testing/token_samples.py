"""Real text samples per text type, and a real long thread, for measuring the token estimator (S12).

Everything here is text written by other people: the traces and knowledge-base documents in the
shared data folder (the ``data_dir`` every loader takes), the Chinese and English specs beside it,
and source files of installed packages. Nothing is made up; samples are
only cut, grouped, or serialised the way an agent would see them.

A sample is one natural unit (a document, a group of records, a few conversation turns, a source
file) of at least ``MIN_SAMPLE_CHARS`` characters -- consecutive units are joined until then -- and
at most ``MAX_SAMPLE_CHARS`` (longer units are cut at a line break). That is the size of a typical
message or tool result, where the relative error of a per-character estimate is the largest
(a whole request averages the errors out).

Samples alternate between a *fit* half (used by ``bench/fit_token_profiles.py`` to choose the profile
coefficients) and an *eval* half (used by ``bench/token_estimate.py`` and the tests to report errors), so
the reported figures are measured on text the coefficients never saw.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

TEXT_TYPES: tuple[str, ...] = (
    "english_prose",
    "chinese_prose",
    "json_english",
    "json_chinese",
    "json_escaped",
    "source_code",
    "mixed_transcript",
)

MIN_SAMPLE_CHARS = 800
MAX_SAMPLE_CHARS = 6000
# Share of a mixed transcript's characters that come from Chinese dialogue turns (about half of those
# characters are ideographs; the rest are names, numbers, JSON and code quoted in the turns).
MIXED_CHINESE_SHARE = 0.2
# Packages whose source files make up the `source_code` samples (all installed with the project).
SOURCE_PACKAGES: tuple[str, ...] = ("langchain_core", "langgraph", "langchain", "httpx", "typer")

_HAN = re.compile(r"[\u3400-\u9fff]")


@dataclass(frozen=True)
class TextSample:
    text_type: str
    source: str  # where it came from, relative to the shared data folder or a package
    text: str


def _spec_dir(data_dir: Path) -> Path:
    return data_dir.parent / "spec"


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _cut(text: str, limit: int = MAX_SAMPLE_CHARS) -> str:
    """At most `limit` characters, cut at the last line break when there is one."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    line_end = head.rfind("\n")
    return head[:line_end] if line_end > limit // 2 else head


def _group(units: Iterable[tuple[str, str]], text_type: str, joiner: str = "\n\n") -> list[TextSample]:
    """Join consecutive (source, text) units until each sample has MIN_SAMPLE_CHARS, cut long ones."""
    samples: list[TextSample] = []
    texts: list[str] = []
    sources: list[str] = []
    size = 0
    for source, text in units:
        if not text.strip():
            continue
        texts.append(text)
        sources.append(source)
        size += len(text)
        if size >= MIN_SAMPLE_CHARS:
            label = sources[0] if len(set(sources)) == 1 else f"{sources[0]} (+{len(sources) - 1})"
            samples.append(TextSample(text_type, label, _cut(joiner.join(texts))))
            texts, sources, size = [], [], 0
    return samples  # a short remainder is dropped: it would be a sample below the minimum size


# --- Prose: the specs, dialogue turns (glaive), policy documents, questions, agents' reasoning ------


def _glaive(data_dir: Path, language: str) -> list[dict[str, Any]]:
    """glaive's ShareGPT-style dialogues in `language` (``en`` or ``zh``)."""
    data: list[dict[str, Any]] = _read_json(
        data_dir / "traces" / "glaive-toolcall" / "data" / f"glaive_toolcall_{language}_demo.json"
    )
    return data


def _spec_units(data_dir: Path, language: str) -> list[tuple[str, str]]:
    """The paragraphs of the spec in `language`, when it lies beside the data folder."""
    name = f"context-compression.{language}.md"
    path = _spec_dir(data_dir) / name
    spec = path.read_text(encoding="utf-8") if path.exists() else ""
    return [(f"spec/{name}", part) for part in spec.split("\n\n")]


def _dialogue_units(data_dir: Path, language: str) -> list[tuple[str, str]]:
    """The user and assistant turns of each glaive dialogue in `language`, one unit per dialogue."""
    return [
        (
            f"traces/glaive-toolcall/glaive_toolcall_{language}_demo.json#{index}",
            "\n".join(turn["value"] for turn in item["conversations"] if turn["from"] in ("human", "gpt")),
        )
        for index, item in enumerate(_glaive(data_dir, language))
    ]


def _swe_agent_reasoning(data_dir: Path) -> Iterator[tuple[str, str]]:
    """What SWE-agent's assistant wrote between its commands: an agent explaining its next step."""
    folder = data_dir / "traces" / "swe-agent"
    for path in sorted(folder.rglob("*.traj")):
        for index, entry in enumerate(_read_json(path)["history"]):
            content = entry.get("content")
            if entry["role"] == "assistant" and isinstance(content, str):
                yield f"traces/swe-agent/{path.relative_to(folder)}#{index}", content


def english_prose(data_dir: Path) -> list[TextSample]:
    """Four independent sources of English prose, so that one can be held out (issue 18 item 11):
    policy documents, a specification, chat turns and an agent's reasoning."""
    folder = data_dir / "kb" / "tau2-banking" / "documents"
    document_units = (
        (f"kb/tau2-banking/documents/{path.name}", _read_json(path)["content"])
        for path in sorted(folder.glob("*.json"))
    )
    return (
        _group(document_units, "english_prose")
        + _group(_spec_units(data_dir, "en"), "english_prose")
        + _group(_dialogue_units(data_dir, "en"), "english_prose")
        + _group(_swe_agent_reasoning(data_dir), "english_prose")
    )


def _acebench_questions(data_dir: Path) -> Iterator[tuple[str, str]]:
    folder = data_dir / "traces" / "acebench" / "data_all" / "data_zh"
    for path in sorted(folder.glob("*.json")):
        for record in _json_lines(path):
            question = record.get("question")
            if isinstance(question, str):
                yield f"traces/acebench/data_all/data_zh/{path.name}#{record.get('id')}", question


def chinese_prose(data_dir: Path) -> list[TextSample]:
    """The Chinese spec, the dialogue turns of glaive zh and ACEBench's questions."""
    return (
        _group(_spec_units(data_dir, "zh"), "chinese_prose")
        + _group(_dialogue_units(data_dir, "zh"), "chinese_prose")
        + _group(_acebench_questions(data_dir), "chinese_prose")
    )


# --- JSON: real tool results (English), CrossWOZ records (Chinese, raw and \\uXXXX-escaped) ---------


def _tau_bench(data_dir: Path) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = _read_json(
        data_dir / "traces" / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    )
    return data


def _is_json_text(value: object) -> bool:
    return isinstance(value, str) and value.lstrip().startswith(("{", "["))


def _tau_bench_tool_results(data_dir: Path) -> Iterator[tuple[str, str]]:
    for index, trial in enumerate(_tau_bench(data_dir)):
        for message in trial["traj"]:
            content = message.get("content")
            if message["role"] == "tool" and _is_json_text(content):
                yield f"traces/tau-bench/gpt-4o-airline.json#{index}", content


def _each_text_once(units: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """`units` without the repeats of a text (glaive's dialogues share tool lists and calls, ACEBench's
    records share functions): a repeat would put the same text in both the fit and the eval half."""
    seen: set[str] = set()
    for source, text in units:
        if text not in seen:
            seen.add(text)
            yield source, text


def _glaive_en_json(data_dir: Path) -> Iterator[tuple[str, str]]:
    """The function calls and function results (JSON) of glaive's English conversations."""
    for index, item in enumerate(_glaive(data_dir, "en")):
        for turn in item["conversations"]:
            if turn["from"] in ("function_call", "observation") and _is_json_text(turn["value"]):
                yield f"traces/glaive-toolcall/glaive_toolcall_en_demo.json#{index}", turn["value"]


def _toolbench_responses(data_dir: Path) -> Iterator[tuple[str, str]]:
    """The JSON bodies real web APIs answered in ToolBench's solution trees (`observation.response`)."""
    folder = data_dir / "traces" / "toolbench" / "data_example" / "answer"

    def responses(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            observation = node.get("observation")
            if isinstance(observation, str) and observation.startswith("{"):
                try:
                    response = json.loads(observation).get("response")
                except (ValueError, AttributeError):
                    response = None
                if _is_json_text(response):
                    yield response
            for value in node.values():
                yield from responses(value)
        elif isinstance(node, list):
            for value in node:
                yield from responses(value)

    for path in sorted(folder.rglob("*.json")):
        source = f"traces/toolbench/{path.relative_to(folder).as_posix()}"
        yield from ((source, response) for response in dict.fromkeys(responses(_read_json(path))))


def json_english(data_dir: Path) -> list[TextSample]:
    """Real tool results in English JSON from three independent sources (tau-bench's airline tools,
    glaive's function calls and results, the web APIs of ToolBench), each grouped on its own."""
    return (
        _group(_tau_bench_tool_results(data_dir), "json_english", joiner="\n")
        + _group(_each_text_once(_glaive_en_json(data_dir)), "json_english", joiner="\n")
        + _group(_toolbench_responses(data_dir), "json_english", joiner="\n")
    )


def _crosswoz_record_groups(data_dir: Path, records_per_group: int = 3) -> Iterator[tuple[str, Any]]:
    """CrossWOZ records in small groups, as a knowledge-base search would return them."""
    folder = data_dir / "kb" / "crosswoz"
    for name in ("attraction_db.json", "hotel_db.json", "restaurant_db.json", "metro_db.json"):
        records = _read_json(folder / name)
        step = records_per_group if name != "metro_db.json" else records_per_group * 8
        for start in range(0, len(records), step):
            yield (
                f"kb/crosswoz/{name}[{start}:{start + step}]",
                [record for _, record in records[start : start + step]],
            )


def _acebench_functions(data_dir: Path) -> Iterator[tuple[str, str]]:
    """Tool schemas with Chinese descriptions: the functions of ACEBench's records, as JSON the way a
    provider receives a tool list (`json_chinese` keeps each once, and every third of those)."""
    folder = data_dir / "traces" / "acebench" / "data_all" / "data_zh"
    for path in sorted(folder.glob("*.json")):
        for record in _json_lines(path):
            for function in record.get("function") or ():
                source = f"traces/acebench/data_all/data_zh/{path.name}#{record.get('id')}"
                yield source, json.dumps(function, ensure_ascii=False)


def _glaive_zh_json(data_dir: Path) -> Iterator[tuple[str, str]]:
    """The tool lists, function calls and function results (JSON, Chinese values) of glaive's Chinese
    conversations (`json_chinese` keeps each text once: `_each_text_once`)."""
    for index, item in enumerate(_glaive(data_dir, "zh")):
        source = f"traces/glaive-toolcall/glaive_toolcall_zh_demo.json#{index}"
        if _is_json_text(item.get("tools")):
            yield source, item["tools"]
        for turn in item["conversations"]:
            if turn["from"] in ("function_call", "observation") and _is_json_text(turn["value"]):
                yield source, turn["value"]


def json_chinese(data_dir: Path) -> list[TextSample]:
    """JSON with Chinese text from three independent sources: CrossWOZ's knowledge-base records (a
    source per database file), ACEBench's tool schemas, and glaive's Chinese tool calls and results."""
    units = (
        (source, json.dumps(group, ensure_ascii=False)) for source, group in _crosswoz_record_groups(data_dir)
    )
    return (
        _group(units, "json_chinese", joiner="\n")
        # Every third distinct schema, so that this source weighs about as much as the others.
        + _group(
            itertools.islice(_each_text_once(_acebench_functions(data_dir)), 2, None, 3),
            "json_chinese",
            joiner="\n",
        )
        + _group(_each_text_once(_glaive_zh_json(data_dir)), "json_chinese", joiner="\n")
    )


def json_escaped(data_dir: Path) -> list[TextSample]:
    """The same records as `json_chinese`, as `json.dumps` writes them by default (ensure_ascii)."""
    units = ((source, json.dumps(group)) for source, group in _crosswoz_record_groups(data_dir))
    return _group(units, "json_escaped", joiner="\n")


# --- Source code of installed packages -------------------------------------------------------------


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:  # also covers namespace packages such as `langgraph`, which have no origin
        raise ModuleNotFoundError(package)
    return Path(locations[0])


def source_code(every_nth_file: int = 3) -> list[TextSample]:
    samples: list[TextSample] = []
    for package in SOURCE_PACKAGES:
        root = _package_dir(package)
        files = sorted(path for path in root.rglob("*.py") if path.stat().st_size >= MIN_SAMPLE_CHARS)
        units = (
            (f"{package}/{path.relative_to(root)}", path.read_text(encoding="utf-8"))
            for path in files[::every_nth_file]
        )
        samples += _group(units, "source_code", joiner="\n")
    return samples


# --- Mixed transcripts: English tau-bench conversations with Chinese glaive turns woven in ---------


def _render_openai_message(message: dict[str, Any]) -> str:
    parts = [f"{message['role']}: {message.get('content') or ''}"]
    for call in message.get("tool_calls") or []:
        function = call["function"]
        parts.append(f"tool_call {function['name']}: {function['arguments']}")
    return "\n".join(parts)


def _glaive_turns(data_dir: Path) -> Iterator[str]:
    for item in _glaive(data_dir, "zh"):
        for turn in item["conversations"]:
            yield f"{turn['from']}: {turn['value']}"


def mixed_transcript(data_dir: Path) -> list[TextSample]:
    """Each sample: one tau-bench conversation (without its shared system prompt) with Chinese glaive
    zh turns woven in between its messages, so that about a fifth of the characters (MIXED_CHINESE_SHARE)
    come from Chinese turns. Samples stop when the Chinese turns run out (each is used once)."""
    chinese_turns = _glaive_turns(data_dir)
    samples: list[TextSample] = []
    for index, trial in enumerate(_tau_bench(data_dir)):
        lines: list[str] = []
        size = chinese = 0
        ran_out = False
        for message in trial["traj"]:
            if message["role"] == "system":
                continue
            line = _render_openai_message(message)
            lines.append(line)
            size += len(line) + 1
            while chinese < MIXED_CHINESE_SHARE * size:
                turn = next(chinese_turns, None)
                if turn is None:
                    ran_out = True
                    break
                lines.append(turn)
                size += len(turn) + 1
                chinese += len(turn) + 1
            if size >= MAX_SAMPLE_CHARS or ran_out:
                break
        if ran_out:
            break
        text = _cut("\n".join(lines))
        if len(text) >= MIN_SAMPLE_CHARS:
            samples.append(TextSample("mixed_transcript", f"traces/tau-bench#{index} + glaive zh", text))
    return samples


# --- Calibration only: gettext catalogs (Japanese, Korean, Russian) ---------------------------------
#
# The goal text types contain almost no kana, hangul or Cyrillic, so their weights cannot be fitted
# on them. The translation catalogs that installed system packages ship (apt, bash, coreutils, ...)
# are real Japanese / Korean / Russian text; `fit_token_profiles.py` uses them, when present, for
# those weights only. Not a goal type.

CALIBRATION_LANGUAGES: tuple[str, ...] = ("ja", "ko", "ru")


def locale_dir() -> Path:
    """$CTXPRESS_LOCALE_DIR, else the Filesystem Hierarchy Standard location of gettext catalogs."""
    return Path(os.environ.get("CTXPRESS_LOCALE_DIR", "/usr/share/locale"))


def gettext_catalog_samples(language: str, folder: Path | None = None) -> list[TextSample]:
    """Translated messages of every catalog of one language, grouped into samples (empty if none)."""
    import gettext

    units: list[tuple[str, str]] = []
    for path in sorted(((folder or locale_dir()) / language / "LC_MESSAGES").glob("*.mo")):
        try:
            with path.open("rb") as handle:
                catalog = gettext.GNUTranslations(handle)
        except (OSError, ValueError, UnicodeDecodeError):
            continue  # a catalog in another encoding or format: skip it
        messages: dict[object, object] = vars(catalog)["_catalog"]  # msgid -> translation
        translated = [value for key, value in messages.items() if key and isinstance(value, str)]
        units.append((f"locale/{language}/{path.name}", "\n".join(translated)))
    return _group(
        ((source, part) for source, text in units for part in text.split("\n\n")),
        f"catalog_{language}",
        joiner="\n",
    )


# --- All samples, fit/eval halves -----------------------------------------------------------------


def build_samples(data_dir: Path) -> dict[str, list[TextSample]]:
    return {
        "english_prose": english_prose(data_dir),
        "chinese_prose": chinese_prose(data_dir),
        "json_english": json_english(data_dir),
        "json_chinese": json_chinese(data_dir),
        "json_escaped": json_escaped(data_dir),
        "source_code": source_code(),
        "mixed_transcript": mixed_transcript(data_dir),
    }


def fit_half(samples: list[TextSample]) -> list[TextSample]:
    return samples[0::2]


def eval_half(samples: list[TextSample]) -> list[TextSample]:
    return samples[1::2]


# --- A long real thread as LangChain messages (for the per-message cache figures) ------------------


def _tool_call_from_openai(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    try:
        args = json.loads(function["arguments"])
    except json.JSONDecodeError:
        args = {"input": function["arguments"]}
    return {
        "name": function["name"],
        "args": args if isinstance(args, dict) else {"input": args},
        "id": call["id"],
    }


def _openai_to_langchain(messages: list[dict[str, Any]]) -> list[BaseMessage]:
    converted: list[BaseMessage] = []
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "system":
            converted.append(SystemMessage(content))
        elif role == "user":
            converted.append(HumanMessage(content))
        elif role == "assistant":
            calls = [_tool_call_from_openai(call) for call in message.get("tool_calls") or []]
            converted.append(AIMessage(content, tool_calls=calls))
        elif role == "tool":
            converted.append(
                ToolMessage(content, tool_call_id=message["tool_call_id"], name=message.get("name"))
            )
    return converted


def _glaive_to_langchain(item: dict[str, Any], index: int) -> list[BaseMessage]:
    converted: list[BaseMessage] = []
    pending_id = ""
    for turn_number, turn in enumerate(item["conversations"]):
        kind, value = turn["from"], turn["value"]
        if kind == "human":
            converted.append(HumanMessage(value))
        elif kind == "gpt":
            converted.append(AIMessage(value))
        elif kind == "function_call":
            call = json.loads(value)
            pending_id = f"glaive_zh_{index}_{turn_number}"
            converted.append(
                AIMessage(
                    "",
                    tool_calls=[
                        {"name": call["name"], "args": call.get("arguments") or {}, "id": pending_id}
                    ],
                )
            )
        elif kind == "observation":
            converted.append(ToolMessage(value, tool_call_id=pending_id))
    return converted


def _swe_agent_threads(data_dir: Path) -> Iterator[list[BaseMessage]]:
    """SWE-agent function-calling trajectories: long shell and file outputs as tool results."""
    for path in sorted((data_dir / "traces" / "swe-agent").rglob("*.traj")):
        history = _read_json(path)["history"]
        openai_style: list[dict[str, Any]] = []
        for entry in history:
            message = {"role": entry["role"], "content": entry.get("content") or ""}
            if isinstance(message["content"], list):  # multimodal histories: keep the text parts
                message["content"] = "\n".join(part.get("text", "") for part in message["content"])
            calls = entry.get("tool_calls")
            ids = entry.get("tool_call_ids")
            if entry["role"] == "assistant" and isinstance(calls, list) and calls:
                message["tool_calls"] = calls
            if entry["role"] == "tool" and isinstance(ids, list) and ids:
                message["tool_call_id"] = ids[0]
            if entry["role"] == "tool" and "tool_call_id" not in message:
                message["role"] = "user"  # an observation without a call id: the user turn shows it
            openai_style.append(message)
        yield _openai_to_langchain(openai_style)


def real_thread(data_dir: Path, max_chars: int = 1_400_000, max_messages: int = 401) -> list[BaseMessage]:
    """A long thread concatenated from real traces: Chinese glaive zh dialogues with tool calls,
    SWE-agent trajectories (long tool outputs) and tau-bench airline conversations, interleaved,
    stopping at `max_messages` or `max_chars` characters of content."""
    sources: list[Iterator[list[BaseMessage]]] = [
        (_glaive_to_langchain(item, index) for index, item in enumerate(_glaive(data_dir, "zh"))),
        _swe_agent_threads(data_dir),
        (_openai_to_langchain(trial["traj"]) for trial in _tau_bench(data_dir)),
    ]
    thread: list[BaseMessage] = []
    size = 0
    while sources and len(thread) < max_messages and size < max_chars:
        for source in list(sources):
            conversation = next(source, None)
            if conversation is None:
                sources.remove(source)
                continue
            for message in conversation:
                if isinstance(message, SystemMessage) and thread:
                    continue  # one system prompt at the head of the thread, as in a real request
                thread.append(message)
                size += len(str(message.content))
                if len(thread) >= max_messages or size >= max_chars:
                    return thread
    return thread
