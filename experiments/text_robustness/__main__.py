"""`python -m experiments.text_robustness`."""

from experiments.text_robustness.main import main

main()
