"""Attack constraints and the maths of the gradient attacks, on a tiny random LSTM seq2seq:
the adversarial loss equals its hand computation, first-order scores equal directional
derivatives, kNN stays in the 10-NN set, CharSwap yields an OOV word, one word changes."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax_text.tokenize import PAD, UNK, Vocab
from advjax_text.translate import (
    adversarial_loss,
    changed_positions,
    first_order_scores,
    knn_table,
    loss_and_embedding_grad,
    one_word_attack,
    one_word_attacks,
    pad_batch,
    perturbed_words,
    word_mask,
)

WORDS = ["house", "cat", "dog", "green", "small", "tree", "river", "stone", "bird", "road",
         "light", "water", "child", "table", "horse", "ball", ".", ","]  # fmt: skip
VOCAB = Vocab(("<pad>", "<unk>", "<bos>", "<eos>", *WORDS))
SENTENCES = [
    ["small", "cat", "house", "."],
    ["green", "tree", "river", "stone", "bird"],
    ["dog", ","],
]


def tiny_logits_fn(seed: int = 0):
    """A small differentiable attention model (no recurrence, so it compiles in a blink):
    source states tanh(e W), target queries from the previous token, softmax attention."""
    k1, k2, k3, k4 = jax.random.split(jax.random.key(seed), 4)
    emb = jax.random.normal(k1, (len(VOCAB), 8))
    w_src = jax.random.normal(k2, (8, 8)) / np.sqrt(8)
    w_tgt = jax.random.normal(k3, (12, 8))
    w_out = jax.random.normal(k4, (8, 12)) / np.sqrt(8)

    def logits_fn(e, mask, t_in):
        h = jnp.tanh(e @ w_src)  # (B, S, H)
        q = jnp.take(w_tgt, t_in, axis=0)  # (B, T, H)
        scores = jnp.where(mask[:, None, :], jnp.einsum("bth,bsh->bts", q, h), -1e9)
        ctx = jnp.einsum("bts,bsh->bth", jax.nn.softmax(scores, axis=-1), h)
        return jnp.tanh(ctx + q) @ w_out

    return logits_fn, emb


def _batch():
    src = jnp.asarray(pad_batch([VOCAB.ids(s) for s in SENTENCES], 6))
    rng = np.random.default_rng(0)
    tgt = [list(rng.integers(4, 12, size=n)) for n in (3, 5, 2)]
    return src, jnp.asarray(pad_batch(tgt, 6, bos=True)), jnp.asarray(pad_batch(tgt, 6, eos=True))


@pytest.fixture(scope="module")
def tiny():
    logits_fn, emb = tiny_logits_fn()
    return (logits_fn, emb, *_batch())


def test_adversarial_loss_matches_hand_computation():
    logits = jnp.log(jnp.array([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.3, 0.5]]]))
    tgt_out = jnp.array([[1, 1, PAD]])  # the third step is padding and does not count
    expected = np.log(1 - 0.25) + np.log(1 - 0.8)
    np.testing.assert_allclose(adversarial_loss(logits, tgt_out), [expected], rtol=1e-5)


def test_first_order_scores_equal_directional_derivatives(tiny):
    logits_fn, emb, src, tgt_in, tgt_out = tiny
    loss, grad = jax.jit(loss_and_embedding_grad, static_argnums=0)(
        logits_fn, emb, src, tgt_in, tgt_out
    )
    scores = np.asarray(jax.jit(first_order_scores)(grad, emb, src))
    chex.assert_shape(scores, (3, 6, len(VOCAB)))
    base = jnp.take(emb, src, axis=0)

    @jax.jit
    def loss_at(e):
        return adversarial_loss(logits_fn(e, src != PAD, tgt_in), tgt_out)

    jvp = jax.jit(lambda d: jax.jvp(loss_at, (base,), (d,))[1])
    for b, i, w in [(0, 1, 5), (1, 3, 10), (2, 0, 7)]:
        direction = np.zeros(base.shape, np.float32)
        direction[b, i] = np.asarray(emb[w] - emb[src[b, i]])
        derivative = jvp(direction)
        np.testing.assert_allclose(scores[b, i, w], derivative[b], rtol=1e-4, atol=1e-6)
        t = 1e-2  # finite difference, looser (float32)
        fd = (loss_at(base + t * direction)[b] - loss_at(base - t * direction)[b]) / (2 * t)
        np.testing.assert_allclose(scores[b, i, w], fd, rtol=2e-2, atol=1e-4)
    assert np.allclose(
        np.take_along_axis(scores, np.asarray(src)[..., None], axis=-1), 0.0, atol=1e-6
    )


@pytest.fixture(scope="module")
def attacked(tiny):
    """All three settings on the tiny model, in one jitted pass (top-4 exact re-scoring)."""
    logits_fn, emb, src, tgt_in, tgt_out = tiny
    mask = jnp.asarray(word_mask(VOCAB))
    knn = knn_table(emb, mask, k=10)
    run = jax.jit(lambda s: one_word_attacks(
        logits_fn, emb, s, tgt_in, tgt_out, word_mask=mask, knn=knn, top_k=4))  # fmt: skip
    return run(src), np.asarray(knn)


@pytest.mark.parametrize("setting", ["unconstrained", "knn", "charswap"])
def test_exactly_one_word_changes_and_loss_is_exact(tiny, attacked, setting):
    logits_fn, emb, src, tgt_in, tgt_out = tiny
    mask = word_mask(VOCAB)
    out = attacked[0][setting]
    for b in range(3):
        diff = np.flatnonzero(np.asarray(out.adv_src[b] != src[b]))
        assert list(diff) == [int(out.position[b])]  # exactly one id changes
        assert bool(mask[src[b, diff[0]]])  # a word, never punctuation
    recomputed = jax.jit(
        lambda s: adversarial_loss(logits_fn(jnp.take(emb, s, axis=0), s != PAD, tgt_in), tgt_out)
    )
    np.testing.assert_allclose(out.loss, recomputed(out.adv_src), rtol=1e-5)


def test_knn_replacement_is_among_the_ten_nearest_neighbours(tiny, attacked):
    _, emb, src, _, _ = tiny
    mask = word_mask(VOCAB)
    out, knn = attacked[0]["knn"], attacked[1]
    unit = np.asarray(emb) / np.linalg.norm(np.asarray(emb), axis=1, keepdims=True)
    for b in range(3):
        old, new = int(src[b, out.position[b]]), int(out.replacement[b])
        assert new in knn[old] and new != old and bool(mask[new])
        words = [w for w in range(len(VOCAB)) if mask[w] and w != old]  # brute-force 10-NN
        brute = sorted(words, key=lambda w: -unit[old] @ unit[w])[:10]
        assert set(knn[old]) == set(brute)


def test_charswap_word_is_out_of_vocabulary_and_seen_as_unk(attacked):
    out = attacked[0]["charswap"]
    for b, tokens in enumerate(SENTENCES):
        assert int(out.replacement[b]) == UNK
        adv = perturbed_words(tokens, int(out.position[b]), UNK, VOCAB, setting="charswap")
        (pos,) = changed_positions(tokens, adv)
        assert adv[pos] not in VOCAB and VOCAB.id(adv[pos]) == UNK
        assert sorted(adv[pos][: len(tokens[pos])]) == sorted(tokens[pos]) or adv[pos].startswith(
            tokens[pos]
        )


def test_exact_rescoring_with_all_candidates_finds_the_brute_force_best(tiny):
    """With top_k covering every candidate, the attack returns the exact best substitution."""
    logits_fn, emb, src, tgt_in, tgt_out = tiny
    mask = np.asarray(word_mask(VOCAB))
    out = jax.jit(lambda s: one_word_attack(logits_fn, emb, s, tgt_in, tgt_out, setting="unconstrained",
                                            word_mask=mask, top_k=6 * len(VOCAB)))(src)  # fmt: skip
    b, row = 1, np.asarray(src[1])
    candidates = []
    for i in np.flatnonzero((row != PAD) & mask[row]):
        for w in np.flatnonzero(mask):
            if w != row[i]:
                candidates.append(row.copy())
                candidates[-1][i] = w
    s = jnp.asarray(np.stack(candidates))  # every one-word substitution of sentence b, one pass
    n = s.shape[0]
    losses = adversarial_loss(
        logits_fn(jnp.take(emb, s, axis=0), s != PAD, jnp.repeat(tgt_in[b : b + 1], n, axis=0)),
        jnp.repeat(tgt_out[b : b + 1], n, axis=0),
    )
    np.testing.assert_allclose(out.loss[b], float(losses.max()), rtol=1e-5)


def test_bad_arguments_raise(tiny):
    logits_fn, emb, src, tgt_in, tgt_out = tiny
    mask = word_mask(VOCAB)
    with pytest.raises(ValueError, match="setting"):
        one_word_attack(logits_fn, emb, src, tgt_in, tgt_out, setting="typo", word_mask=mask)
    with pytest.raises(ValueError, match="knn"):
        one_word_attack(logits_fn, emb, src, tgt_in, tgt_out, setting="knn", word_mask=mask)
    with pytest.raises(ValueError, match="top_k"):
        one_word_attack(
            logits_fn, emb, src, tgt_in, tgt_out, setting="charswap", word_mask=mask, top_k=0
        )


@pytest.mark.parametrize("setting", ["unconstrained", "knn"])
def test_settings_sharing_one_gradient_pass_equal_separate_attacks(tiny, attacked, setting):
    logits_fn, emb, src, tgt_in, tgt_out = tiny
    knn = attacked[1]
    alone = jax.jit(lambda s: one_word_attack(logits_fn, emb, s, tgt_in, tgt_out, setting=setting,
                                              word_mask=word_mask(VOCAB), knn=knn, top_k=4))(src)  # fmt: skip
    chex.assert_trees_all_close(attacked[0][setting], alone, rtol=1e-5)
