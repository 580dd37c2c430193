"""The pieces under `run_attack` and `run_autoattack`, for writing another runner.

`advjax.evaluation` is the page most users need; this module holds what a new runner or a
benchmark builds on: the engine (`attack_stages`: stages of runs over the cases still
unbroken, outcomes reported at once), the campaign's and AutoAttack's own loops on it
(`attack_cases`, `attack_members`), the compiled attack programs they run (`make_program`,
`Program`, `make_attack_fn`), per-case keys from key paths (`key_from_path`, `case_keys`;
`key_root`: the run key as the integer that starts every path), the expectation over transformations of a random model (`eot_logits`), an in-memory
record log (`ListLog`), one campaign group's runner (`attack_group`), AutoAttack's member
config hash (`member_hash`) and its member lists (`resolve_members`), and an evaluation
spread over processes with `jax.distributed` (`this_process`, `process_folder`,
`process_record_files`, `wait_for_every_process`).
"""

from advjax.evaluation._autoattack import resolve_members
from advjax.evaluation._autoattack_records import member_hash
from advjax.evaluation._autoattack_stages import attack_members, eot_logits
from advjax.evaluation._batch import make_attack_fn
from advjax.evaluation._campaign import ListLog, attack_group
from advjax.evaluation._early_stop import Program, attack_cases, make_program
from advjax.evaluation._engine import attack_stages
from advjax.evaluation._keys import case_keys, key_from_path, key_root
from advjax.evaluation._processes import (
    process_folder,
    process_record_files,
    this_process,
    wait_for_every_process,
)

__all__ = [
    "attack_cases",
    "attack_group",
    "attack_members",
    "attack_stages",
    "case_keys",
    "eot_logits",
    "key_from_path",
    "key_root",
    "ListLog",
    "make_attack_fn",
    "make_program",
    "member_hash",
    "process_folder",
    "process_record_files",
    "Program",
    "resolve_members",
    "this_process",
    "wait_for_every_process",
]
