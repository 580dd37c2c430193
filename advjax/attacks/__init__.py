"""Pure attacks: FGSM, PGD (with first-break search and chunked runs), APGD, FAB, Square
(L-inf and L2), FMN, MALT, their losses and the threat model's geometry, and the registry of every
attack the runners know (`ATTACKS`).

Every attack takes a pure `logits_fn(x) -> logits` and arrays, an explicit `key`, and works
under `jit`, `vmap` and `grad`. Nothing here does I/O or imports the evaluation layer.
"""

from advjax.attacks._apgd import (
    apgd,
    apgd_targeted,
    apgd_with_loss,
)
from advjax.attacks._attack import Attack, BatchRun, stream_of
from advjax.attacks._checks import (
    check_budget,
    check_eps,
)
from advjax.attacks._fab import FABResult, fab
from advjax.attacks._fab_projection import projection_l2, projection_linf
from advjax.attacks._fmn import FMNResult, fmn
from advjax.attacks._iterative import (
    IterateState,
    SearchResult,
    StepRule,
    gradient_attack,
    restart_keys,
)
from advjax.attacks._losses import (
    LOSSES,
    attack_loss,
    attack_success,
    per_example_cross_entropy,
    per_example_dlr,
    per_example_margin,
    per_example_targeted_dlr,
)
from advjax.attacks._malt import malt, malt_targets
from advjax.attacks._norms import (
    NORMS,
    ascent_direction,
    perturbation_norm,
    project,
    random_start,
)
from advjax.attacks._pgd import (
    fgsm,
    pgd,
    pgd_finish,
    pgd_search,
    pgd_start,
    pgd_steps,
)
from advjax.attacks._registry import ATTACKS, get_attack
from advjax.attacks._square import (
    SquareResult,
    p_schedule,
    square_linf,
    square_sides,
)
from advjax.attacks._square_l2 import square, square_l2

__all__ = [
    "apgd",
    "apgd_targeted",
    "apgd_with_loss",
    "SearchResult",
    "ascent_direction",
    "get_attack",
    "gradient_attack",
    "Attack",
    "ATTACKS",
    "attack_loss",
    "attack_success",
    "BatchRun",
    "check_budget",
    "check_eps",
    "fab",
    "FABResult",
    "fgsm",
    "fmn",
    "FMNResult",
    "malt",
    "malt_targets",
    "LOSSES",
    "NORMS",
    "p_schedule",
    "per_example_cross_entropy",
    "per_example_dlr",
    "per_example_margin",
    "per_example_targeted_dlr",
    "perturbation_norm",
    "pgd",
    "pgd_finish",
    "pgd_search",
    "pgd_start",
    "pgd_steps",
    "IterateState",
    "project",
    "projection_l2",
    "projection_linf",
    "random_start",
    "restart_keys",
    "square",
    "square_l2",
    "square_linf",
    "square_sides",
    "StepRule",
    "stream_of",
    "SquareResult",
]
