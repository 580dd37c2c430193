"""The evidence layer: a declared threat model, attacks run case by case into append-only
records, every number from the records (with counts and Wilson intervals), paired
comparisons of two models on the same cases, sanity checks, the run summary and the release
gate.

The pipeline: `ThreatModel` + `AttackSpec` -> `run_attack` / `run_autoattack` (records, with
early stop, on one engine) -> `aggregate_records` -> `run_checks` -> `run_summary` -> `decide`.
The engine's pieces, for writing another runner, are in `advjax.evaluation.engine`.
"""

from advjax.evaluation._aggregate import (
    aggregate_records,
    budget_curves,
    find_group,
    group_records,
    per_class,
    summarise_group,
    worst_class,
)
from advjax.evaluation._attack_spec import (
    AttackSpec,
    check_within_threat_model,
)
from advjax.evaluation._autoattack import (
    VERSIONS,
    AutoAttackResult,
    Member,
    autoattack,
    cumulative_accuracy,
    resolve_members,
)
from advjax.evaluation._autoattack_records import (
    AUTOATTACK,
    autoattack_records,
    autoattack_threat_model,
    member_hash,
    run_autoattack,
)
from advjax.evaluation._campaign import (
    attack_group,
    replay_record,
    run_attack,
)
from advjax.evaluation._gate import (
    EXIT_CODES,
    Decision,
    PolicyError,
    Reason,
    decide,
    format_decision,
    load_policy,
    parse_eps,
    parse_policy,
)
from advjax.evaluation._metrics import (
    attack_summary,
    format_rate,
    rate,
    wilson_interval,
)
from advjax.evaluation._paired import (
    mcnemar_exact,
    paired_robustness,
)
from advjax.evaluation._sanity import (
    Check,
    check_eps_zero,
    check_finite_loss,
    check_large_eps,
    check_monotone_curve,
    check_monotone_eps,
    check_perturbations,
    check_pgd_not_weaker_than_fgsm,
    check_transfer_not_stronger,
    check_zero_gradients,
    run_checks,
    zero_gradient_fraction,
)
from advjax.evaluation._scoring import (
    records_from_arrays,
)
from advjax.evaluation._summary import (
    SCHEMA,
    SummaryError,
    read_run_summary,
    run_summary,
    write_run_summary,
)
from advjax.evaluation._threat_model import (
    UNTARGETED,
    ThreatModel,
    format_eps,
    require_threat_model,
)

__all__ = [
    "aggregate_records",
    "attack_group",
    "attack_summary",
    "AttackSpec",
    "AUTOATTACK",
    "autoattack",
    "autoattack_records",
    "autoattack_threat_model",
    "AutoAttackResult",
    "budget_curves",
    "Check",
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
    "cumulative_accuracy",
    "decide",
    "Decision",
    "EXIT_CODES",
    "find_group",
    "format_decision",
    "format_eps",
    "format_rate",
    "group_records",
    "load_policy",
    "mcnemar_exact",
    "Member",
    "member_hash",
    "parse_eps",
    "paired_robustness",
    "parse_policy",
    "per_class",
    "PolicyError",
    "rate",
    "read_run_summary",
    "Reason",
    "records_from_arrays",
    "replay_record",
    "require_threat_model",
    "resolve_members",
    "run_attack",
    "run_autoattack",
    "run_checks",
    "run_summary",
    "SCHEMA",
    "summarise_group",
    "SummaryError",
    "ThreatModel",
    "UNTARGETED",
    "VERSIONS",
    "wilson_interval",
    "worst_class",
    "write_run_summary",
    "zero_gradient_fraction",
]
