"""The evidence layer: a declared threat model, attacks run case by case into append-only
records, every number from the records (with counts and Wilson intervals), paired
comparisons of two models on the same cases, sanity checks, the run summary and the release
gate.

The pipeline: `ThreatModel` + `AttackSpec` -> `run_attack` / `run_autoattack` (records, with
early stop, on one engine) -> `aggregate_records` -> `run_checks` -> `run_summary` -> `decide`;
`run_evaluation` is that pipeline for AutoAttack into one folder, as one call (what
`python -m advjax.evaluate` runs).
Beside this page: `advjax.evaluation.checks` (the sanity checks), `.stats` (rates, Wilson
intervals, per-class and paired numbers), `.gate` (the release policy and decision),
`.summary` (the run summary on disk) and `.engine` (the pieces under the runners, for
writing another).
"""

from advjax.evaluation import checks as checks
from advjax.evaluation import engine as engine
from advjax.evaluation import gate as gate
from advjax.evaluation import stats as stats
from advjax.evaluation import summary as summary
from advjax.evaluation._aggregate import (
    aggregate_records,
    find_group,
    group_records,
)
from advjax.evaluation._attack_spec import (
    AttackSpec,
)
from advjax.evaluation._autoattack import (
    AutoAttackResult,
    autoattack,
)
from advjax.evaluation._autoattack_records import (
    AUTOATTACK,
    AutoAttackConfig,
    run_autoattack,
)
from advjax.evaluation._campaign import (
    replay_record,
    run_attack,
)
from advjax.evaluation._gate import (
    decide,
)
from advjax.evaluation._model import (
    Model,
)
from advjax.evaluation._run_evaluation import (
    run_evaluation,
)
from advjax.evaluation._sanity import (
    Check,
    run_checks,
)
from advjax.evaluation._summary import (
    run_summary,
)
from advjax.evaluation._threat_model import (
    ThreatModel,
    format_eps,
    parse_eps,
)

__all__ = [
    "aggregate_records",
    "AttackSpec",
    "autoattack",
    "AUTOATTACK",
    "AutoAttackConfig",
    "AutoAttackResult",
    "Check",
    "decide",
    "find_group",
    "format_eps",
    "group_records",
    "parse_eps",
    "replay_record",
    "run_attack",
    "run_autoattack",
    "run_checks",
    "run_evaluation",
    "run_summary",
    "Model",
    "ThreatModel",
]
