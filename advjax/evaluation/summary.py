"""The run summary on disk: its schema (`advjax.evaluation.run_summary` builds one), reading and
writing it with validation.
"""

from advjax.evaluation._summary import SCHEMA, SummaryError, read_run_summary, write_run_summary

__all__ = [
    "read_run_summary",
    "SCHEMA",
    "SummaryError",
    "write_run_summary",
]
