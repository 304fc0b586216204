"""Leave-one-source-out error of the token estimate (S12; issue 18 item 11).

    .venv/bin/python bench/token_loso.py     # print the table (bench/token_estimate.py includes it)
    .venv/bin/python bench/token_loso.py --chinese-catalogs   # the experiment below

`--chinese-catalogs` adds the installed Simplified Chinese gettext catalogs (the translated messages
of system packages, `locale/zh_CN`) as a fourth Chinese-prose source, held out like the others and
in the fit of every other source -- an experiment, not what the shipped weights are fitted on
(docs/benchmarks.md says why).

For every independent source of real text (a trace dataset, a knowledge-base file, a package's
source tree), the profiles are fitted again (``fit_token_profiles.fit_profiles``, the same fit as
the shipped weights) on the fit half of every *other* source, and measured on all samples of the
held-out one. The figure per text type and tokenizer family is the mean over that type's sources of
each held-out source's mean absolute relative error, with the worst source beside it: how the
estimate does on text from a source it has never seen. A type with a single source is measured
with no sample of its own type in the fit at all.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from ctxpress.app.testing.real_tokenizers import PROFILE_FAMILIES, load_real_tokenizers
from ctxpress.app.testing.token_samples import (
    CALIBRATION_LANGUAGES,
    TEXT_TYPES,
    TextSample,
    build_samples,
    fit_half,
    gettext_catalog_samples,
    locale_dir,
)
from ctxpress.tokens.estimate import estimate
from fit_token_profiles import (
    DEFAULT_FAMILIES,
    FITTED_FAMILIES,
    TokenTable,
    fit_profiles,
    one_token_ideographs,
)
from shared_data import require_data_dir

GOAL_MARE = 0.08
DEFAULT_LOW, DEFAULT_HIGH = -0.10, 0.25  # the `default` profile's goal band, mean signed error
#: Families whose counts differ by more than this ratio leave the default band no room.
DEFAULT_BAND_SPREAD = (1 + DEFAULT_HIGH) / (1 + DEFAULT_LOW)


def sources_of(sample: TextSample) -> frozenset[str]:
    """The independent sources a sample's text comes from (a mixed transcript has two)."""
    if sample.text_type == "mixed_transcript":
        return frozenset({"traces/tau-bench", "traces/glaive-toolcall"})
    label = sample.source.split(" (+")[0].split("#")[0].split("[")[0]
    parts = label.split("/")
    if sample.text_type == "source_code":
        return frozenset({f"package {parts[0]}"})
    if parts[:2] == ["kb", "crosswoz"]:
        return frozenset({"/".join(parts[:3])})  # one database file: attractions, hotels, ...
    return frozenset({"/".join(parts[:2])})


@dataclass(frozen=True)
class HeldOut:
    source: str
    text_type: str
    family: str
    profile: str
    mare: float  # mean |estimate - real| / real over the held-out source's samples of this type
    signed: float
    # Mean over the samples of the hungriest family's count / the leanest one's, among this family
    # and the families `default` is fitted to: above DEFAULT_BAND_SPREAD no single estimate can sit
    # in the default band of all of them.
    spread: float
    # Of the held-out source's ideographs (U+4000-9FFF), the share this family encodes in more than
    # one token: what its cost per ideograph moves with, which no character class can see.
    split_share: float


IDEOGRAPH: Final = re.compile(r"[\u4000-\u9fff]")


def split_share(one_token: frozenset[str], samples: Sequence[TextSample]) -> float:
    """Of the ideographs in `samples`, the share outside `one_token` (a family's one-token
    ideographs, `fit_token_profiles.one_token_ideographs`); 0 when there are none."""
    ideographs = [char for sample in samples for char in IDEOGRAPH.findall(sample.text)]
    return sum(char not in one_token for char in ideographs) / len(ideographs) if ideographs else 0.0


def _relative(
    samples: Sequence[TextSample], weights: tuple[float, ...], reals: Sequence[float]
) -> list[float]:
    return [(estimate(s.text, weights) - real) / real for s, real in zip(samples, reals, strict=True)]


#: The catalogs `--chinese-catalogs` adds as Chinese prose.
CHINESE_CATALOG_LANGUAGE = "zh_CN"


def leave_one_source_out(verbose: bool = True, chinese_catalogs: bool = False) -> list[HeldOut]:
    all_samples = build_samples(require_data_dir())
    if chinese_catalogs:
        catalogs = gettext_catalog_samples(CHINESE_CATALOG_LANGUAGE)
        if not catalogs:
            raise SystemExit(f"no {CHINESE_CATALOG_LANGUAGE} gettext catalogs under {locale_dir()}")
        all_samples["chinese_prose"] += [replace(s, text_type="chinese_prose") for s in catalogs]
    goal = {kind: all_samples[kind] for kind in TEXT_TYPES}
    calib = [s for lang in CALIBRATION_LANGUAGES for s in fit_half(gettext_catalog_samples(lang))]
    table = TokenTable(load_real_tokenizers())
    sources = sorted({source for samples in goal.values() for s in samples for source in sources_of(s)})
    one_token = {family: frozenset(one_token_ideographs(table.count(family))) for family in FITTED_FAMILIES}
    results: list[HeldOut] = []
    for number, source in enumerate(sources, 1):
        train = [s for kind in TEXT_TYPES for s in fit_half(goal[kind]) if source not in sources_of(s)]
        if verbose:
            print(f"[{number}/{len(sources)}] holding out {source}: fit on {len(train)}", file=sys.stderr)
        profiles = fit_profiles(train, calib, table)
        for kind, samples in goal.items():
            held = [s for s in samples if source in sources_of(s)]
            if not held:
                continue
            counts = {family: table.counts(family, held) for family in FITTED_FAMILIES}
            for family in FITTED_FAMILIES:
                reals = counts[family]
                # `default` aims at DEFAULT_FAMILIES: how far apart they and this family are.
                banded = [counts[f] for f in {*DEFAULT_FAMILIES, family}]
                spread = statistics.fmean(max(row) / min(row) for row in zip(*banded, strict=True))
                split = split_share(one_token[family], held)
                for profile in {"default", family if family in PROFILE_FAMILIES else "default"}:
                    relative = _relative(held, tuple(float(w) for w in profiles[profile]), reals)
                    results.append(
                        HeldOut(
                            source,
                            kind,
                            family,
                            profile,
                            statistics.fmean(abs(x) for x in relative),
                            statistics.fmean(relative),
                            spread,
                            split,
                        )
                    )
    return results


def loso_lines(results: Sequence[HeldOut]) -> tuple[list[str], list[str]]:
    """The Markdown table and the goal misses: a matching profile's mean over sources above 8%, a
    held-out source's mean signed error of `default` outside its band (with the families' spread)."""
    header = [
        "text type (sources)",
        *(f"{f}: matching" for f in PROFILE_FAMILIES),
        *(f"{f}: default" for f in FITTED_FAMILIES),
    ]
    rows: list[str] = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    missed: list[str] = []
    for kind in TEXT_TYPES:
        mine = [r for r in results if r.text_type == kind]
        if not mine:
            continue
        sources = sorted({r.source for r in mine})
        cells = [f"{kind} ({len(sources)}: {', '.join(sources)})"]
        for family in PROFILE_FAMILIES:
            cell = [r for r in mine if r.family == family and r.profile == family]
            mean = statistics.fmean(r.mare for r in cell)
            worst = max(cell, key=lambda r: r.mare)
            cells.append(f"{mean:.1%} (worst {worst.mare:.1%})")
            if mean > GOAL_MARE:
                missed.append(
                    f"{kind}, {family}: {mean:.1%} mean absolute error on held-out sources (worst {worst.source} {worst.mare:.1%})"
                )
        for family in FITTED_FAMILIES:
            cell = [r for r in mine if r.family == family and r.profile == "default"]
            low, high = min(r.signed for r in cell), max(r.signed for r in cell)
            mean_signed = statistics.fmean(r.signed for r in cell)
            cells.append(f"{low:+.0%} … {high:+.0%} (mean {mean_signed:+.0%})")
            for r in cell:
                if not DEFAULT_LOW <= r.signed <= DEFAULT_HIGH:
                    why = (
                        f"the families disagree there: the hungriest needs {r.spread:.2f}x the leanest's "
                        f"tokens, past the band's {DEFAULT_BAND_SPREAD:.2f}x"
                        if r.spread > DEFAULT_BAND_SPREAD
                        else f"families {r.spread:.2f}x apart, within the band's {DEFAULT_BAND_SPREAD:.2f}x"
                    )
                    others = [o.split_share for o in cell if o.source != r.source]
                    if r.spread <= DEFAULT_BAND_SPREAD and r.split_share and others:
                        # Room in the band, yet missed: what the class features could not see.
                        why += (
                            f"; {family} splits {r.split_share:.1%} of its ideographs into several tokens, "
                            f"{min(others):.1%}-{max(others):.1%} on the type's other sources"
                        )
                    missed.append(f"{kind}, default vs {family}: {r.signed:+.1%} on {r.source} ({why})")
        rows.append("| " + " | ".join(cells) + " |")
    return rows, missed


def loso_section(chinese_catalogs: bool = False) -> list[str]:
    rows, missed = loso_lines(leave_one_source_out(chinese_catalogs=chinese_catalogs))
    return [
        "**Leave one source out** (`bench/token_loso.py`): each independent source held out in turn, "
        "the profiles fitted again on the fit half of all other sources, the error measured on every "
        "sample of the held-out source. Matching: mean over the type's sources of each source's mean "
        "absolute relative error (worst source in brackets); goal <= 8%. Default: the range of the "
        "held-out sources' mean signed error, per family, and the mean over the type's sources; goal "
        "within -10% … +25% (listed below: every source outside it).",
        "",
        *rows,
        "",
        *(
            ["**Outside the leave-one-source-out goals:**", "", *(f"- {item}" for item in missed), ""]
            if missed
            else []
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--chinese-catalogs",
        action="store_true",
        help=f"add the {CHINESE_CATALOG_LANGUAGE} gettext catalogs as a Chinese-prose source (an experiment)",
    )
    print("\n".join(loso_section(chinese_catalogs=parser.parse_args().chinese_catalogs)))
