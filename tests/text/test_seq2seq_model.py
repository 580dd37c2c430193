"""The LSTM-with-attention seq2seq: a few jitted train steps memorise a tiny corpus and
greedy decoding then reproduces the targets; the adversarial-training perturbations change
one word among the top-3 first-order candidates and the adversarial step trains. (The
attack on a trained LSTM is covered end to end by test_text_seq2seq_experiment.py.)"""

import jax
import numpy as np
import pytest

from advjax_text.tokenize import PAD
from advjax_text.translate import (
    LSTMConfig,
    TrainConfig,
    create_train_state,
    pad_batch,
    train_step,
    translate,
)

CONFIG = LSTMConfig(src_vocab=20, tgt_vocab=16, embed_dim=16, hidden_dim=16, dropout_rate=0.0)
SRC = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14, 15, 16]]
TGT = [[4, 5], [6, 7, 8], [9, 10], [11, 12, 13, 14]]


@pytest.mark.slow
def test_training_memorises_and_greedy_decoding_reproduces_targets():
    state = create_train_state(jax.random.key(0), CONFIG, TrainConfig(learning_rate=2e-2))
    src = pad_batch(SRC, 8)
    tgt_in, tgt_out = pad_batch(TGT, 8, bos=True), pad_batch(TGT, 8, eos=True)
    losses = []
    for step in range(40):
        state, loss = train_step(state, src, tgt_in, tgt_out, jax.random.key(step))
        losses.append(float(loss))
    assert losses[-1] < 0.1 * losses[0], losses[::10]
    assert translate(CONFIG, state.params, SRC, batch_size=4, max_len=8) == TGT


def test_adversarial_perturbations_change_one_word_within_the_setting():
    """The on-the-fly perturbations of adversarial training: one word per sentence, drawn
    from the top-3 first-order candidates; CharSwap words become <unk>."""
    from advjax_text.tokenize import UNK
    from advjax_text.translate import draw_perturbation, first_order_scores

    rng = np.random.default_rng(0)
    emb = jax.numpy.asarray(rng.normal(size=(20, 8)).astype(np.float32))
    grad = jax.numpy.asarray(rng.normal(size=(4, 8, 8)).astype(np.float32))
    src = pad_batch(SRC, 8)
    mask = np.arange(20) >= 4
    scores = np.asarray(jax.jit(first_order_scores)(grad, emb, src))
    for setting in ("unconstrained", "charswap"):
        draw = jax.jit(
            lambda key, setting=setting: draw_perturbation(
                grad, emb, src, key, setting=setting, word_mask=mask, knn=None, top_k=3
            )
        )
        for seed in range(3):
            adv = np.asarray(draw(jax.random.key(seed)))
            for b in range(4):
                (i,) = np.flatnonzero(adv[b] != src[b])
                if setting == "charswap":
                    assert adv[b, i] == UNK
                else:  # among the 3 best first-order candidates of the sentence
                    allowed = np.where(
                        (src[b] != PAD)[:, None]
                        & mask[None, :]
                        & (np.arange(20)[None, :] != src[b][:, None]),
                        scores[b],
                        -np.inf,
                    )
                    third = np.sort(allowed.ravel())[-3]
                    assert scores[b, i, adv[b, i]] >= third - 1e-6


@pytest.mark.slow
def test_adversarial_train_step_runs_and_lowers_the_loss():
    from advjax_text.translate import make_adv_train_step

    state = create_train_state(jax.random.key(0), CONFIG, TrainConfig(learning_rate=2e-2))
    step = make_adv_train_step(
        setting="unconstrained", alpha=0.5, word_mask=np.arange(20) >= 4, top_k=3
    )
    src = pad_batch(SRC, 8)
    tgt_in, tgt_out = pad_batch(TGT, 8, bos=True), pad_batch(TGT, 8, eos=True)
    losses = []
    for i in range(15):
        state, loss = step(state, src, tgt_in, tgt_out, jax.random.key(i))
        losses.append(float(loss))
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
