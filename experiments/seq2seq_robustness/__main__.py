"""`python -m experiments.seq2seq_robustness`."""

from experiments.seq2seq_robustness.main import main

main()
