"""The pieces under `run_attack` and `run_autoattack`, for writing another runner.

`advjax.evaluation` is the page most users need; this module holds what a new runner or a
benchmark builds on: the campaign's loop (`attack_cases`) and one campaign group's runner
(`attack_group`), the compiled attack programs they run (`make_program`, `make_attack_fn`),
per-case keys from key paths (`key_from_path`, `case_keys`), an in-memory record log
(`ListLog`), AutoAttack's member lists (`resolve_members`), and an evaluation spread over
processes with `jax.distributed` (`this_process`, `process_folder`).
"""

from advjax.evaluation._autoattack import (
    resolve_members,
)
from advjax.evaluation._batch import (
    make_attack_fn,
)
from advjax.evaluation._campaign import (
    ListLog,
    attack_group,
)
from advjax.evaluation._early_stop import (
    attack_cases,
    make_program,
)
from advjax.evaluation._keys import (
    case_keys,
    key_from_path,
)
from advjax.evaluation._processes import (
    process_folder,
    this_process,
)

__all__ = [
    "attack_cases",
    "attack_group",
    "case_keys",
    "key_from_path",
    "ListLog",
    "make_attack_fn",
    "make_program",
    "process_folder",
    "resolve_members",
    "this_process",
]
