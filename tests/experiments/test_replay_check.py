"""The study's replay check: every decision must be the stored one, unless the replayed case sits
on the decision boundary (a tie the last float bits decide); losses and norms may differ in the
last float bits (another CPU's kernels), and the evidence says how many records were
bit-identical, which differed at a tie and how far the floats moved."""

import dataclasses

import numpy as np
from conftest import case_record

from experiments.cifar_robustness.replay_evidence import TIE_TOLERANCE, logit_margins, replay_check


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


def _robust_and_flipped():
    """A stored robust case and a replay that broke it at the last of its 20 steps."""
    stored = case_record(0, status="failed")
    flipped = case_record(0, status="success", first_break_step=20, queries=stored.queries)
    return stored, flipped


def test_a_decision_flipped_at_a_tie_passes_and_is_reported():
    stored, flipped = _robust_and_flipped()
    check = replay_check([flipped], [stored], "w", [-TIE_TOLERANCE / 4])
    assert check.passed and "1 other(s) differ at a tie" in check.evidence


def test_a_decision_flipped_away_from_the_boundary_fails():
    stored, flipped = _robust_and_flipped()
    assert not replay_check([flipped], [stored], "w", [-0.2]).passed
    assert not replay_check([flipped], [stored], "w").passed


def test_logit_margins_are_the_true_class_lead_over_the_logit_range():
    logits = np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 3.0]])
    np.testing.assert_allclose(logit_margins(logits, np.array([0, 2])), [0.5, 0.0])
    np.testing.assert_allclose(logit_margins(logits, np.array([1, 0])), [-0.5, -1.0])
