"""The run summary on disk: its schema (`advjax.evaluation.run_summary` builds one; write it
with `advjax.records.atomic_write_json`), reading it with validation; what
`advjax.evaluation.run_evaluation` returns (`Evaluation`).
"""

from advjax.evaluation._run_evaluation import Evaluation
from advjax.evaluation._summary import SCHEMA, SummaryError, read_run_summary

__all__ = [
    "Evaluation",
    "read_run_summary",
    "SCHEMA",
    "SummaryError",
]
