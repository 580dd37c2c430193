"""`python -m experiments.text_robustness`."""

from experiments.cli import run_command
from experiments.text_robustness.main import main

run_command(main, "experiments.text_robustness")
