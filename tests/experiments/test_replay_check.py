"""The study's replay check: every decision must be the stored one; losses and norms may differ
in the last float bits (another CPU's kernels), and the evidence says how many records were
bit-identical and how far the floats moved."""

import dataclasses

from conftest import case_record

from experiments.cifar_robustness.evaluation import replay_check


def test_identical_records_pass_and_are_counted_bit_identical():
    stored = [case_record(i) for i in range(3)]
    check = replay_check(list(stored), stored, "m/pgd eps 8/255")
    assert check.passed and check.name == "replay_reproduces_records[m/pgd eps 8/255]"
    assert "3 of 3 records" in check.evidence and "3 of 3 bit-identical" in check.evidence


def test_a_moved_loss_passes_but_is_reported():
    stored = case_record(0)
    replayed = dataclasses.replace(stored, final_loss=stored.final_loss * 1.01)
    check = replay_check([replayed], [stored], "w")
    assert check.passed and "0 of 1 bit-identical" in check.evidence
    assert "1.0e-02" in check.evidence


def test_a_different_decision_fails():
    stored = case_record(0)
    more = dataclasses.replace(stored, queries=stored.queries + 1)
    check = replay_check([more], [stored], "w")
    assert not check.passed and "0 of 1 records" in check.evidence
