"""Pure attacks: FGSM, PGD (with first-break search and chunked runs), APGD, FAB, Square
(L-inf and L2), FMN, MALT, their losses and the threat model's geometry, and the registry of every
attack the runners know (`ATTACKS`).

Every attack takes a pure `logits_fn(x) -> logits` and arrays, an explicit `key`, and works
under `jit`, `vmap` and `grad`. Nothing here does I/O or imports the evaluation layer.
"""

from advjax.attacks._apgd import (
    apgd,
    apgd_targeted,
)
from advjax.attacks._attack import (
    Attack,
    BatchRun,
)
from advjax.attacks._checks import (
    check_budget,
)
from advjax.attacks._fab import (
    FABResult,
    fab,
)
from advjax.attacks._fmn import (
    FMNResult,
    fmn,
)
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
)
from advjax.attacks._malt import (
    malt,
    malt_targets,
)
from advjax.attacks._norms import (
    NORMS,
    perturbation_norm,
    project,
)
from advjax.attacks._pgd import (
    fgsm,
    pgd,
)
from advjax.attacks._registry import (
    ATTACKS,
    get_attack,
)
from advjax.attacks._square import (
    SquareResult,
)
from advjax.attacks._square_l2 import (
    square,
)

__all__ = [
    "apgd",
    "apgd_targeted",
    "Attack",
    "attack_loss",
    "ATTACKS",
    "BatchRun",
    "check_budget",
    "fab",
    "FABResult",
    "fgsm",
    "fmn",
    "FMNResult",
    "get_attack",
    "gradient_attack",
    "IterateState",
    "LOSSES",
    "malt",
    "malt_targets",
    "NORMS",
    "perturbation_norm",
    "pgd",
    "project",
    "restart_keys",
    "SearchResult",
    "square",
    "SquareResult",
    "StepRule",
]
