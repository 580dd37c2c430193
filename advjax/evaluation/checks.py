"""Sanity checks that catch broken or masked attacks: each takes aggregated groups (or
records) and returns `Check`s; `advjax.evaluation.run_checks` runs the standard set.
"""

from advjax.evaluation._attack_spec import check_within_threat_model
from advjax.evaluation._sanity import (
    check_eps_zero,
    check_finite_loss,
    check_large_eps,
    check_monotone_curve,
    check_monotone_eps,
    check_perturbations,
    check_pgd_not_weaker_than_fgsm,
    check_transfer_not_stronger,
    check_zero_gradients,
    zero_gradient_fraction,
)

__all__ = [
    "check_eps_zero",
    "check_finite_loss",
    "check_large_eps",
    "check_monotone_curve",
    "check_monotone_eps",
    "check_perturbations",
    "check_pgd_not_weaker_than_fgsm",
    "check_transfer_not_stronger",
    "check_within_threat_model",
    "check_zero_gradients",
    "zero_gradient_fraction",
]
