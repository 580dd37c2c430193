"""The release gate's pieces: a policy declared before the results were seen
(`load_policy`, `parse_policy`), the decision with its reasons (`advjax.evaluation.decide`
returns a `Decision`) and its exit codes; `python -m advjax.gate` is its command.
"""

from advjax.evaluation._gate import (
    Decision,
    PolicyError,
    format_decision,
    load_policy,
    parse_policy,
)

__all__ = [
    "Decision",
    "format_decision",
    "load_policy",
    "parse_policy",
    "PolicyError",
]
