"""Two evaluations compared item by item: per benchmark (and per category) each run's accuracy, the
difference on the items both scored (matched by item id), its interval and a paired test.

The test: McNemar's exact test (a two-sided binomial test on the discordant pairs) when every paired
score is 0 or 1; a paired bootstrap of the mean difference otherwise (partial credit: ANLS, VQA
accuracy). Items only one run scored are counted and reported, never silently dropped. The
statistics are pure functions; :func:`load_scores` and :func:`write_comparison` read and write files.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval import metrics
from eval.report import OUTPUT_FILES, nan_to_null

COMPARE_FILES = {"json": "compare.json", "markdown": "compare.md"}
COMPARE_RESAMPLES = 4000
_CHUNK = 500  # bootstrap resamples drawn at once (memory: chunk x items indices)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs: ``only_a`` items only run A got right,
    ``only_b`` only run B. Under no difference each discordant pair is a fair coin: p = min(1, 2 P(X <= min)),
    X ~ Binomial(only_a + only_b, 1/2); 1.0 when there is no discordant pair."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"McNemar counts must be >= 0, got {only_a} and {only_b}")
    n = only_a + only_b
    tail, term = 0, 1  # term: C(n, k), exact integers
    for k in range(min(only_a, only_b) + 1):
        tail += term
        term = term * (n - k) // (k + 1)
    return min(1.0, 2 * tail / 2**n)


@dataclass(frozen=True)
class PairedBootstrap:
    """The mean paired difference (B - A), its percentile interval and a two-sided bootstrap p-value."""

    difference: float
    ci_low: float
    ci_high: float
    p_value: float


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, confidence: float = metrics.DEFAULT_CONFIDENCE,
    resamples: int = COMPARE_RESAMPLES, seed: int = 0,
) -> PairedBootstrap:
    """Resample the items (pairs kept together) ``resamples`` times. Interval: percentiles of the resampled
    mean differences; p: the share of resampled differences, re-centred on 0 (the null), at least as far
    from 0 as the observed one, as (count + 1) / (resamples + 1). Seeded: same scores, same numbers."""
    if len(a) != len(b):
        raise ValueError(f"paired scores need equal lengths, got {len(a)} and {len(b)}")
    if not a:
        return PairedBootstrap(math.nan, math.nan, math.nan, math.nan)
    metrics.z_score(confidence)  # validates the level
    diffs = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)  # [n]
    observed = float(diffs.mean())
    rng = np.random.default_rng(seed)
    means = np.concatenate([
        diffs[rng.integers(0, len(diffs), size=(min(_CHUNK, resamples - start), len(diffs)))].mean(axis=1)
        for start in range(0, resamples, _CHUNK)
    ])  # [R]
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    extreme = int(np.sum(np.abs(means - observed) >= abs(observed) - 1e-12))
    return PairedBootstrap(observed, float(low), float(high), (extreme + 1) / (resamples + 1))


Scores = dict[str, dict[str, tuple[float, dict[str, Any]]]]
"""Benchmark or task -> item id -> (score of the first completion, category labels)."""


@dataclass(frozen=True)
class Comparison:
    """One benchmark (``category`` empty) or one of its category labels (``key=label``), compared."""

    benchmark: str
    category: str
    n_a: int
    n_b: int
    accuracy_a: float
    """Mean score over every item run A scored here (as its own report has it)."""
    accuracy_b: float
    paired: int
    """Items both runs scored."""
    only_in_a: int
    only_in_b: int
    paired_a: float
    """Mean score of run A over the paired items."""
    paired_b: float
    difference: float
    """paired_b - paired_a."""
    ci_low: float
    ci_high: float
    test: str
    """``mcnemar`` (0/1 scores), ``bootstrap`` (partial credit) or ``none`` (no paired item)."""
    p_value: float
    a_right_b_wrong: int | None = None
    a_wrong_b_right: int | None = None


def compare(a: Scores, b: Scores, *, confidence: float = metrics.DEFAULT_CONFIDENCE,
            resamples: int = COMPARE_RESAMPLES, seed: int = 0) -> list[Comparison]:
    """Every benchmark either run scored, then each of its category labels, compared (A first)."""
    rows = []
    for benchmark in dict.fromkeys([*a, *b]):
        items_a, items_b = a.get(benchmark, {}), b.get(benchmark, {})
        rows.append(_compare_items(benchmark, "", items_a, items_b, confidence, resamples, seed))
        for label in _labels(items_a, items_b):
            rows.append(_compare_items(benchmark, label, _with_label(items_a, label), _with_label(items_b, label),
                                       confidence, resamples, seed))
    return rows


def _compare_items(
    benchmark: str, category: str, items_a: Mapping[str, tuple[float, Any]], items_b: Mapping[str, tuple[float, Any]],
    confidence: float, resamples: int, seed: int,
) -> Comparison:
    both = [item for item in items_a if item in items_b]
    pa = [items_a[item][0] for item in both]
    pb = [items_b[item][0] for item in both]
    boot = paired_bootstrap(pa, pb, confidence=confidence, resamples=resamples, seed=seed)
    binary = all(score in (0.0, 1.0) for score in [*pa, *pb])
    counts: dict[str, Any] = {}
    if not both:
        test, p_value = "none", math.nan
    elif binary:
        a_right = sum(x == 1.0 and y == 0.0 for x, y in zip(pa, pb))
        b_right = sum(x == 0.0 and y == 1.0 for x, y in zip(pa, pb))
        test, p_value = "mcnemar", mcnemar_exact(a_right, b_right)
        counts = {"a_right_b_wrong": a_right, "a_wrong_b_right": b_right}
    else:
        test, p_value = "bootstrap", boot.p_value
    return Comparison(
        benchmark, category, len(items_a), len(items_b),
        metrics.mean([score for score, _ in items_a.values()]), metrics.mean([score for score, _ in items_b.values()]),
        len(both), len(items_a) - len(both), len(items_b) - len(both), metrics.mean(pa), metrics.mean(pb),
        boot.difference, boot.ci_low, boot.ci_high, test, p_value, **counts,
    )


def _labels(*runs: Mapping[str, tuple[float, dict[str, Any]]]) -> list[str]:
    """Every ``key=label`` the items carry, sorted."""
    return sorted({f"{key}={label}" for items in runs for _, categories in items.values()
                   for key, value in categories.items() for label in _as_list(value)})


def _with_label(items: Mapping[str, tuple[float, dict[str, Any]]], label: str) -> dict[str, tuple[float, dict[str, Any]]]:
    key, _, value = label.partition("=")
    return {item: entry for item, entry in items.items() if value in map(str, _as_list(entry[1].get(key)))}


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def load_scores(folder: str | Path) -> Scores:
    """The first-completion scores in an evaluation folder's samples.jsonl (an item whose answer is hidden
    has none). A folder of several models is an error naming its per-model folders."""
    path = Path(folder) / OUTPUT_FILES["samples"]
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not an evaluation output folder: no {OUTPUT_FILES['samples']}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    models = list(dict.fromkeys(row["model"] for row in rows))
    if len(models) > 1:
        per_model = ", ".join(str(p) for p in sorted((Path(folder) / "models").glob("*"))) or "models/<i>-<name>"
        raise ValueError(f"{folder} holds {len(models)} models ({', '.join(models)}); compare one of: {per_model}")
    scores: Scores = {}
    for row in rows:
        if row.get("sample_index", 0) == 0 and row.get("metric") is not None:
            scores.setdefault(row["task"], {})[str(row["prompt_id"])] = (float(row["metric"]), row.get("categories") or {})
    return scores


def comparison_markdown(rows: Sequence[Comparison], name_a: str, name_b: str) -> str:
    """The comparison as a Markdown table (what ``mmgrpo eval --compare`` prints and writes to compare.md)."""
    lines = [
        f"A: `{name_a}`  \nB: `{name_b}`",
        "",
        "| benchmark | category | A | B | paired | A (paired) | B (paired) | B - A [95% CI] | test | p | only in A | only in B |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.benchmark} | {row.category or '(all)'} | {_num(row.accuracy_a)} ({row.n_a}) | "
            f"{_num(row.accuracy_b)} ({row.n_b}) | {row.paired} | {_num(row.paired_a)} | {_num(row.paired_b)} | "
            f"{_signed(row.difference)} [{_signed(row.ci_low)}, {_signed(row.ci_high)}] | {row.test} | "
            f"{_num(row.p_value, 4)} | {row.only_in_a} | {row.only_in_b} |"
        )
    lines += ["", "p: McNemar's exact test on the items one run got right and the other wrong (0/1 scores), a paired "
              "bootstrap of the mean difference otherwise. Only paired items enter the difference and the test."]
    return "\n".join(lines) + "\n"


def write_comparison(rows: Sequence[Comparison], out_dir: str | Path, name_a: str, name_b: str) -> dict[str, Path]:
    """compare.json and compare.md in ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / file for kind, file in COMPARE_FILES.items()}
    data = {"a": name_a, "b": name_b, "rows": [dataclasses.asdict(row) for row in rows]}
    paths["json"].write_text(json.dumps(nan_to_null(data), indent=2, allow_nan=False))
    paths["markdown"].write_text(comparison_markdown(rows, name_a, name_b))
    return paths


def _num(value: float, digits: int = 3) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _signed(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.3f}"
