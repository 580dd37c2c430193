"""advjax's commands, thin over the library, each run as `python -m` of its public name:

- `python -m advjax.evaluate` (`advjax.cli.evaluate`): AutoAttack any JAX model on CIFAR-10,
  a .npz file or a TFDS dataset, into records, a summary, a report and the gate's decision;
- `python -m advjax.gate` (`advjax.cli.gate`): the release gate on a run summary.

Each parses its arguments, calls the library and prints; bad input is one line naming the
argument, exit code 2 (`ADVJAX_DEBUG=1` shows the traceback).
"""

from advjax.cli._command import (
    fail,
    run_command,
)

__all__ = [
    "fail",
    "run_command",
]
