"""Numbers from records: rates with counts and Wilson 95 % intervals (Wilson 1927), per-class
and worst-class accuracy, budget curves, and paired comparisons of two models on the same
cases (the exact McNemar test; McNemar 1947).
"""

from advjax.evaluation._aggregate import budget_curves, per_class, summarise_group, worst_class
from advjax.evaluation._autoattack import cumulative_accuracy
from advjax.evaluation._metrics import attack_summary, format_rate, rate, wilson_interval
from advjax.evaluation._paired import mcnemar_exact, paired_robustness

__all__ = [
    "attack_summary",
    "budget_curves",
    "cumulative_accuracy",
    "format_rate",
    "mcnemar_exact",
    "paired_robustness",
    "per_class",
    "rate",
    "summarise_group",
    "wilson_interval",
    "worst_class",
]
