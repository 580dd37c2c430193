"""The study's replay check: decisions must be equal; losses and norms may differ in the last
float bits (another CPU's kernels), and the evidence says how many records were bit-identical."""

import dataclasses

from conftest import case_record

from experiments.cifar_robustness.evaluation import REPLAY_RTOL, replay_check


def test_identical_records_pass_and_are_counted_bit_identical():
    stored = [case_record(i) for i in range(3)]
    check = replay_check(list(stored), stored, "m/pgd eps 8/255")
    assert check.passed and check.name == "replay_reproduces_records[m/pgd eps 8/255]"
    assert "3 of 3 records" in check.evidence and "3 of 3 bit-identical" in check.evidence


def test_a_loss_off_in_the_last_bits_passes_but_is_not_bit_identical():
    stored = case_record(0)
    replayed = dataclasses.replace(stored, final_loss=stored.final_loss * (1 + REPLAY_RTOL / 10))
    check = replay_check([replayed], [stored], "w")
    assert check.passed and "0 of 1 bit-identical" in check.evidence


def test_a_different_decision_or_a_loss_beyond_tolerance_fails():
    stored = case_record(0)
    moved = dataclasses.replace(stored, final_loss=stored.final_loss * (1 + 100 * REPLAY_RTOL))
    assert not replay_check([moved], [stored], "w").passed
    more = dataclasses.replace(stored, queries=stored.queries + 1)
    check = replay_check([more], [stored], "w")
    assert not check.passed and "0 of 1 records" in check.evidence
