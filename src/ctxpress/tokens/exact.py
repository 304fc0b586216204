"""Exact counting as an option (S12): a `token_profile` that names a real tokenizer.

- ``tiktoken:<encoding>`` (``tiktoken:cl100k_base``, ``tiktoken:o200k_base``): OpenAI's encodings,
  with the optional ``tiktoken`` package. tiktoken downloads an encoding's file on first use;
  ctxpress never lets it: the file must already be in tiktoken's cache directory
  (``$TIKTOKEN_CACHE_DIR``, else ``$DATA_GYM_CACHE_DIR``, else ``<tmp>/data-gym-cache``), or the
  profile is refused with a message saying where to put it.
- ``tokenizer.json:<path>``: a Hugging Face ``tokenizer.json`` (Qwen, DeepSeek, GLM, Llama ...), with
  the optional ``tokenizers`` package; read from that local file only.

Such a profile counts each text exactly, and `TokenCounter` caches those counts like the estimate
(once per text, each message's total remembered whole). The functions that have no counter -- the
previews' and the summary request's budgets (``estimate_tokens``) -- use the estimate of the nearest
family (``approximate_profile``): a preview budget only has to be about right, the threshold is exact.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ctxpress.errors import CtxpressError

__all__ = [
    "TIKTOKEN_ENCODING_URLS",
    "ExactTokenizerError",
    "approximate_profile",
    "check_exact_profile",
    "is_exact_profile",
    "load_exact_counter",
]

TIKTOKEN_PREFIX: Final = "tiktoken:"
TOKENIZER_JSON_PREFIX: Final = "tokenizer.json:"
#: Where tiktoken fetches each encoding it knows; it caches the file under sha1(this address).
TIKTOKEN_ENCODING_URLS: Final = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
#: The estimate used where no counter is at hand, per tiktoken encoding.
_NEAREST_FAMILY: Final = {"cl100k_base": "cl100k", "o200k_base": "o200k"}

TextCounter = Callable[[str], int]


class ExactTokenizerError(CtxpressError, ValueError):
    """A `token_profile` naming a real tokenizer that cannot be used here (package, file, offline)."""


def is_exact_profile(profile: str) -> bool:
    return profile.startswith((TIKTOKEN_PREFIX, TOKENIZER_JSON_PREFIX))


def approximate_profile(profile: str) -> str:
    """The built-in profile whose estimate stands in for `profile` where no counter is at hand."""
    if profile.startswith(TIKTOKEN_PREFIX):
        return _NEAREST_FAMILY.get(profile.removeprefix(TIKTOKEN_PREFIX), "default")
    return "default" if is_exact_profile(profile) else profile


def _require(package: str, profile: str) -> None:
    if importlib.util.find_spec(package) is None:
        raise ExactTokenizerError(
            f"token_profile {profile!r} needs the optional package {package!r}, which is not installed "
            f"(pip install 'ctxpress[tokenizers]')"
        )


def tiktoken_cache_file(encoding: str) -> Path:
    """Where tiktoken looks for an encoding's file before it would download it."""
    directory = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    base = Path(directory) if directory else Path(tempfile.gettempdir()) / "data-gym-cache"
    return base / hashlib.sha1(TIKTOKEN_ENCODING_URLS[encoding].encode()).hexdigest()


def _check_tiktoken(profile: str) -> str:
    encoding = profile.removeprefix(TIKTOKEN_PREFIX)
    if encoding not in TIKTOKEN_ENCODING_URLS:
        raise ExactTokenizerError(
            f"unknown tiktoken encoding in token_profile {profile!r}; "
            f"choose one of {', '.join(f'{TIKTOKEN_PREFIX}{name}' for name in TIKTOKEN_ENCODING_URLS)}"
        )
    _require("tiktoken", profile)
    cached = tiktoken_cache_file(encoding)
    if not cached.is_file():
        raise ExactTokenizerError(
            f"token_profile {profile!r}: the {encoding} file is not available offline (ctxpress never "
            f"lets tiktoken download it). Put the encoding's .tiktoken file in tiktoken's cache "
            f"directory as {cached.name} (set TIKTOKEN_CACHE_DIR), or use an approximate profile"
        )
    return encoding


def _check_tokenizer_json(profile: str) -> Path:
    path = Path(profile.removeprefix(TOKENIZER_JSON_PREFIX)).expanduser()
    _require("tokenizers", profile)
    if not path.is_file():
        raise ExactTokenizerError(f"token_profile {profile!r}: no tokenizer.json file at that path")
    return path


def check_exact_profile(profile: str) -> None:
    """Raise `ExactTokenizerError` when `profile` names a tokenizer that cannot be loaded here."""
    if profile.startswith(TIKTOKEN_PREFIX):
        _check_tiktoken(profile)
    elif profile.startswith(TOKENIZER_JSON_PREFIX):
        _check_tokenizer_json(profile)


def load_exact_counter(profile: str) -> TextCounter:
    """The exact token count of a text under `profile` (special-token strings counted as text)."""
    if profile.startswith(TIKTOKEN_PREFIX):
        import tiktoken

        encode = tiktoken.get_encoding(_check_tiktoken(profile)).encode_ordinary
        return lambda text: len(encode(text))
    if profile.startswith(TOKENIZER_JSON_PREFIX):
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(_check_tokenizer_json(profile)))
        return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)
    raise ExactTokenizerError(f"token_profile {profile!r} does not name a real tokenizer")
