"""Fit the estimator's per-profile weights (``PROFILE_WEIGHTS`` in ``src/ctxpress/tokens.py``).

    .venv/bin/python bench/fit_token_profiles.py          # print the fitted table
    .venv/bin/python bench/fit_token_profiles.py --write  # and write it into tokens.py

Only the *fit* half of the samples is used (``token_samples.fit_half``); ``token_estimate.py`` reports
errors on the other half. Objective for a matching profile: the squared *relative* error per sample,
every text type weighted equally, weights non-negative (except the ``\\uXXXX`` weight, which corrects
for the escape's hex digits also being counted as letters and digits).

Stage 1 fits every weight on the goal text types, with the rare-class weights held at a prior and
the CJK punctuation weight held at its directly measured cost (``marginal_cjk_punct_cost``).
Stage 2 fits the kana/hangul and two-byte weights on gettext catalogs (Japanese, Korean, Russian;
see ``token_samples.gettext_catalog_samples``) with the stage-1 weights held; skipped when the catalogs
are not installed. The astral (emoji) weight stays at its prior: there is no real text to fit it on.

``default`` is fitted to the middle of what o200k / Qwen / DeepSeek / Llama 3 allow on each text type
(see ``fit_default``), subject to the mean relative error of every (family, text type) staying
inside [-10% + margin, +25% - margin] on the fit half.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import lsq_linear, minimize

from ctxpress.app.testing.real_tokenizers import PROFILE_FAMILIES, load_real_tokenizers
from ctxpress.app.testing.token_samples import (
    CALIBRATION_LANGUAGES,
    TEXT_TYPES,
    TextSample,
    build_samples,
    fit_half,
    gettext_catalog_samples,
)
from ctxpress.tokens import FEATURE_NAMES, text_features
from shared_data import require_data_dir

TOKENS_PY = Path(__file__).resolve().parents[1] / "src" / "ctxpress" / "tokens.py"
DEFAULT_FAMILIES = ("o200k", "qwen", "deepseek", "llama3")
DEFAULT_BAND = (0.90, 1.25)  # allowed mean estimate / real ratio of `default`, per family and type
DEFAULT_MARGIN = 0.015  # kept inside the band on the fit half, for the unseen half (JSON with \\uXXXX
# escapes leaves only ~6% of room: Qwen needs 1.31x the tokens of the others there)
RARE = ("kana_hangul", "two_byte", "astral")
RARE_PRIOR = {"kana_hangul": 1.0, "two_byte": 1.0, "astral": 2.0}
SIGNED = ("json_escapes",)
# CJK punctuation occurs in step with ideographs (about one per ten), so least squares cannot tell
# their weights apart and may give one of them all the cost (cl100k: 0 for "，"). Its weight is
# measured directly instead: the tokens saved by deleting the punctuation from the real text.
CJK_PUNCT = re.compile(r"[\u3000-\u303f\uff00-\uff7f]")

Matrix = NDArray[np.float64]


def _design(samples: Sequence[TextSample]) -> Matrix:
    return np.array([text_features(sample.text) for sample in samples], dtype=np.float64)


def _row_weights(types: Sequence[str]) -> Matrix:
    """Every text type weighs the same in total, whatever its number of samples."""
    counts = {kind: types.count(kind) for kind in set(types)}
    return np.array([1.0 / counts[kind] for kind in types])


def pre_token_floors(family: str) -> dict[str, float]:
    """Weights no profile may go below, from how the tokenizers pre-split text: every ASCII letter
    run starts a pre-token, and so does every digit group (1-3 digits; Qwen: every digit), and a
    pre-token is at least one token. Without these floors, least squares happily prices words via
    the spaces between them (collinear in prose) and then undercounts text without spaces, such as
    hex digests and identifiers."""
    floors = {"letter_runs": 1.0}
    floors["digits" if family == "qwen" else "digit_runs"] = 1.0
    return floors


def _lower_bounds(free: Sequence[int], floors: dict[str, float]) -> list[float]:
    return [-np.inf if FEATURE_NAMES[i] in SIGNED else floors.get(FEATURE_NAMES[i], 0.0) for i in free]


def _fit_relative(
    features: Matrix,
    tokens: Matrix,
    weights: Matrix,
    free: list[int],
    fixed: Matrix,
    floors: dict[str, float],
) -> Matrix:
    """Least squares on relative error for the `free` columns, the others held at `fixed`."""
    scale = np.sqrt(weights) / tokens
    residual_target = tokens - features @ fixed
    lower = _lower_bounds(free, floors)
    result = lsq_linear(
        features[:, free] * scale[:, None], residual_target * scale, bounds=(lower, np.inf), method="bvls"
    )
    fitted = fixed.copy()
    fitted[free] = result.x
    return fitted


def marginal_cjk_punct_cost(samples: Sequence[TextSample], count: Callable[[str], int]) -> float:
    """Tokens per CJK punctuation character: what deleting them all saves, over the given texts."""
    saved = deleted = 0
    for sample in samples:
        stripped, removed = CJK_PUNCT.subn("", sample.text)
        if removed:
            saved += count(sample.text) - count(stripped)
            deleted += removed
    return saved / deleted


def fit_profile(
    goal: Matrix,
    goal_tokens: Matrix,
    goal_types: list[str],
    calib: Matrix,
    calib_tokens: Matrix,
    calib_types: list[str],
    cjk_punct_cost: float,
    floors: dict[str, float],
) -> Matrix:
    not_fitted_here = [*RARE, "cjk_punct"]
    common = [i for i, name in enumerate(FEATURE_NAMES) if name not in not_fitted_here]
    start = np.zeros(len(FEATURE_NAMES))
    for name, value in {**RARE_PRIOR, "cjk_punct": cjk_punct_cost}.items():
        start[FEATURE_NAMES.index(name)] = value
    weights = _fit_relative(goal, goal_tokens, _row_weights(goal_types), common, start, floors)
    if len(calib):
        calibrated = [FEATURE_NAMES.index(name) for name in ("kana_hangul", "two_byte")]
        held = weights.copy()
        held[calibrated] = 0.0
        weights = _fit_relative(calib, calib_tokens, _row_weights(calib_types), calibrated, held, floors)
    return weights


def fit_default(features: Matrix, per_family: dict[str, Matrix], types: list[str], start: Matrix) -> Matrix:
    """Weights for an unknown model among DEFAULT_FAMILIES.

    Per text type, the estimate may range over a window: at least 90% of the hungriest family and at
    most 125% of the leanest (as mean per-sample ratios). The target is the geometric middle of that
    window times the hungriest family's count, so that every family keeps the most room on both sides
    of the band; the band itself (less DEFAULT_MARGIN) is a hard constraint.
    """
    stacked = np.stack([per_family[family] for family in DEFAULT_FAMILIES])
    hungriest = stacked.max(axis=0)
    low_band, high_band = DEFAULT_BAND
    target = np.empty_like(hungriest)
    for kind in sorted(set(types)):
        rows = np.array([t == kind for t in types])
        # estimate = k * hungriest  =>  ratio vs family f = k * mean(hungriest / f) = k * q_f
        q = [(hungriest[rows] / per_family[family][rows]).mean() for family in DEFAULT_FAMILIES]
        k_low, k_high = low_band / min(q), high_band / max(q)
        target[rows] = np.sqrt(k_low * k_high) * hungriest[rows]

    row_weights = _row_weights(types)
    low, high = low_band + DEFAULT_MARGIN, high_band - DEFAULT_MARGIN
    constraints = []
    for family in DEFAULT_FAMILIES:
        for kind in sorted(set(types)):
            rows = np.array([t == kind for t in types])
            mean_ratio = (features[rows] / per_family[family][rows][:, None]).mean(axis=0)  # ratio = c . v
            constraints.append({"type": "ineq", "fun": lambda c, v=mean_ratio: c @ v - low})
            constraints.append({"type": "ineq", "fun": lambda c, v=mean_ratio: high - c @ v})

    def objective(c: Matrix) -> float:
        relative = (features @ c - target) / target
        return float(np.sum(row_weights * relative**2))

    floors = pre_token_floors("default")
    bounds = [(None, None) if name in SIGNED else (floors.get(name, 0.0), None) for name in FEATURE_NAMES]
    astral = FEATURE_NAMES.index("astral")
    bounds[astral] = (start[astral], start[astral])
    result = minimize(
        objective, start, method="SLSQP", bounds=bounds, constraints=constraints, options={"maxiter": 500}
    )
    if not result.success:
        raise SystemExit(f"default profile: constrained fit failed: {result.message}")
    fitted: Matrix = result.x
    return fitted


def _format(profiles: dict[str, Matrix]) -> str:
    lines = ["PROFILE_WEIGHTS: Final[Mapping[str, tuple[float, ...]]] = {"]
    for name, weights in profiles.items():
        values = ", ".join(f"{round(float(w), 4)}" for w in weights)
        lines.append(f'    "{name}": ({values}),')
    lines.append("}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help="write the fitted table into tokens.py")
    args = parser.parse_args(argv)

    all_samples = build_samples(require_data_dir())
    goal_samples = [sample for kind in TEXT_TYPES for sample in fit_half(all_samples[kind])]
    calib_samples = [s for lang in CALIBRATION_LANGUAGES for s in fit_half(gettext_catalog_samples(lang))]
    tokenizers = load_real_tokenizers()
    families = [*PROFILE_FAMILIES, "llama3"]

    goal = _design(goal_samples)
    calib = _design(calib_samples) if calib_samples else np.zeros((0, len(FEATURE_NAMES)))
    goal_types = [sample.text_type for sample in goal_samples]
    calib_types = [sample.text_type for sample in calib_samples]
    goal_tokens = {f: np.array([tokenizers[f].count(s.text) for s in goal_samples], float) for f in families}
    calib_tokens = {
        f: np.array([tokenizers[f].count(s.text) for s in calib_samples], float) for f in families
    }
    print(
        f"fit half: {len(goal_samples)} goal samples, {len(calib_samples)} calibration samples",
        file=sys.stderr,
    )

    chinese = [s for s in goal_samples if s.text_type in ("chinese_prose", "json_chinese")]
    punct_costs = {f: marginal_cjk_punct_cost(chinese, tokenizers[f].count) for f in families}
    print("measured tokens per CJK punctuation mark:", punct_costs, file=sys.stderr)
    fitted = {
        family: fit_profile(
            goal,
            goal_tokens[family],
            goal_types,
            calib,
            calib_tokens[family],
            calib_types,
            punct_costs[family],
            pre_token_floors(family),
        )
        for family in families
    }
    # `default` must hold its band on the calibration languages too (where present).
    all_features = np.vstack([goal, calib])
    all_types = goal_types + calib_types
    start = np.max(np.stack([fitted[f] for f in DEFAULT_FAMILIES]), axis=0)  # feasible for the floors
    default = fit_default(
        all_features,
        {f: np.concatenate([goal_tokens[f], calib_tokens[f]]) for f in DEFAULT_FAMILIES},
        all_types,
        start,
    )
    profiles = {"default": default, **{family: fitted[family] for family in PROFILE_FAMILIES}}
    table = _format(profiles)
    print("# " + ", ".join(FEATURE_NAMES))
    print(table)
    if args.write:
        source = TOKENS_PY.read_text(encoding="utf-8")
        block = re.compile(r"(# fmt: off\n)PROFILE_WEIGHTS: .*?\n}\n(# fmt: on)", re.DOTALL)
        updated, replaced = block.subn(lambda m: f"{m.group(1)}{table}\n{m.group(2)}", source)
        if replaced != 1:
            raise SystemExit(f"could not find the PROFILE_WEIGHTS block in {TOKENS_PY}")
        TOKENS_PY.write_text(updated, encoding="utf-8")
        print(f"wrote {TOKENS_PY}", file=sys.stderr)


if __name__ == "__main__":
    main()
