"""`python -m experiments.cifar_robustness`."""

from experiments.cifar_robustness.main import main
from experiments.cli import run_command

run_command(main, "experiments.cifar_robustness")
