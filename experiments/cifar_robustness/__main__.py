"""`python -m experiments.cifar_robustness`."""

from experiments.cifar_robustness.main import main

main()
