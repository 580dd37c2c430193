"""`python -m experiments.seq2seq_robustness`."""

from experiments.cli import run_command
from experiments.seq2seq_robustness.main import main

run_command(main, "experiments.seq2seq_robustness")
