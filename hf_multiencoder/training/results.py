"""Results over seeds: the one place scores of several runs are summarised (median, mean, standard deviation).

`run_glue_multi.py --seeds`, the GLUE sweeps, the demo and the benchmark-style scripts all report runs through
[`summarize`], so "median of 5 seeds" means the same everywhere. Training-side code: not shipped with the weights.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def summarize(values: Iterable[float], scale: float = 1.0) -> dict:
    """`{"scores", "median", "mean", "std", "n"}` of the values times `scale` (100 for scores in percent); std is the
    sample standard deviation (0.0 for one value). Empty input gives `{}`."""
    scores = [float(v) * scale for v in values if v is not None]
    if not scores:
        return {}
    return {
        "scores": scores,
        "median": statistics.median(scores),
        "mean": statistics.fmean(scores),
        "std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
        "n": len(scores),
    }


def mean_by_key(dicts: Iterable[dict[str, float] | None]) -> dict[str, float] | None:
    """The key-wise mean of dicts with the same keys (e.g. the members' fusion weights over seeds); None if none."""
    dicts = [d for d in dicts if d]
    if not dicts:
        return None
    return {key: statistics.fmean(d[key] for d in dicts) for key in dicts[0]}


def format_summary(summary: dict, digits: int = 2) -> str:
    """`"median 52.3 (mean 51.0 ± 2.1, 5 seeds)"`."""
    if not summary:
        return "n/a"
    return (f"median {summary['median']:.{digits}f} (mean {summary['mean']:.{digits}f} ± {summary['std']:.{digits}f}, "
            f"{summary['n']} seed{'s' if summary['n'] != 1 else ''})")


__all__ = ["format_summary", "mean_by_key", "summarize"]
