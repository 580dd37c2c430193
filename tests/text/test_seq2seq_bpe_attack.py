"""One-word attacks on a subword (BPE) model, on a tiny random attention model over BPE pieces:
first-order word scores equal directional derivatives (exactly when the piece count is kept,
towards the mean-embedding surrogate when it changes); exactly one word changes; kNN words
are the 10 nearest by mean piece embedding; CharSwap words are out of the word vocabulary;
the ids the model sees are the BPE segmentation of the perturbed sentence; with every
candidate re-scored the attack finds the brute-force best substitution."""

import string

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax_text.tokenize import PAD, TRANSLATION_SPECIALS, Vocab, build_vocab, learn_bpe
from advjax_text.translate import (
    adversarial_loss,
    changed_positions,
    charswap_candidates,
    exact_losses,
    first_order_candidates,
    fit_words,
    gradient_terms,
    mean_piece_embeddings,
    pad_batch,
    piece_table,
    subword_first_order,
    word_starts,
)
from experiments.seq2seq_robustness.bpe_attacks import (
    attack_bpe,
    attack_space,
    batch_shape,
    check_bpe_constraint,
    make_batch,
    swap_variants,
)

COUNTS = {"house": 5, "houses": 3, "horse": 4, "green": 6, "greenery": 2, "small": 5,
          "smaller": 2, "river": 4, "rivers": 2, "stone": 3, "stones": 2, "bird": 4,
          "birds": 3, "road": 3, "light": 3, "water": 5, "child": 3, "children": 3,
          "table": 3, "cat": 5, "dog": 5, "tree": 4, "trees": 3, "the": 10, "a": 10,
          ".": 10, ",": 5}  # fmt: skip
BPE = learn_bpe(COUNTS, num_merges=25)
# every word's pieces plus every letter in both piece forms: no re-segmentation hits <unk>
PIECES = build_vocab(
    [BPE.segment_word(w) for w in COUNTS] + [[c, c + "@@"] for c in string.ascii_lowercase],
    min_count=1,
)
WORD_VOCAB = Vocab((*TRANSLATION_SPECIALS, *COUNTS))
SENTENCES = [
    ["the", "small", "cat", "houses", "."],
    ["green", "trees", "rivers", "stone", "birds"],
    ["a", "dog", ","],
    ["children", "water"],
]
MAX_LEN = 24
SETTINGS = ("unconstrained", "knn", "charswap")


def tiny_model(seed: int = 0):
    """A small differentiable attention model over piece embeddings (no recurrence)."""
    k1, k2, k3, k4 = jax.random.split(jax.random.key(seed), 4)
    emb = jax.random.normal(k1, (len(PIECES), 8))
    w_src = jax.random.normal(k2, (8, 8)) / np.sqrt(8)
    w_tgt = jax.random.normal(k3, (12, 8))
    w_out = jax.random.normal(k4, (8, 12)) / np.sqrt(8)

    def logits_fn(e, mask, t_in):
        h = jnp.tanh(e @ w_src)
        q = jnp.take(w_tgt, t_in, axis=0)
        scores = jnp.where(mask[:, None, :], jnp.einsum("bth,bsh->bts", q, h), -1e9)
        ctx = jnp.einsum("bts,bsh->bth", jax.nn.softmax(scores, axis=-1), h)
        return jnp.tanh(ctx + q) @ w_out

    return logits_fn, emb


def _targets():
    rng = np.random.default_rng(0)
    return [[int(t) for t in rng.integers(4, 12, size=n)] for n in (3, 5, 2, 4)]


@pytest.fixture(scope="module")
def setup():
    logits_fn, emb = tiny_model()
    space = attack_space(emb, BPE, PIECES, WORD_VOCAB, SENTENCES, knn_k=10)
    return logits_fn, emb, space


@pytest.fixture(scope="module")
def attacked(setup):
    logits_fn, emb, space = setup
    return attack_bpe(
        logits_fn, emb, space, SENTENCES, _targets(), settings=SETTINGS, top_k=4, batch_size=3,
        max_len=MAX_LEN,
    )  # fmt: skip


def test_the_tiny_vocabulary_has_multi_piece_words():
    lengths = {w: len(BPE.segment_word(w)) for w in COUNTS}
    assert max(lengths.values()) >= 3 and min(lengths.values()) == 1
    assert max(len(BPE.segment_word(w)) for s in SENTENCES for w in s) >= 2


def test_helpers_segment_fit_and_locate_words():
    words = SENTENCES[1]
    starts, lengths = word_starts(BPE, words)
    pieces = BPE.segment(words)
    for a, k, w in zip(starts, lengths, words):
        assert pieces[a : a + k] == BPE.segment_word(w)
    assert fit_words(BPE, words, len(pieces)) == words
    assert len(BPE.segment(fit_words(BPE, words, len(pieces) - 1))) <= len(pieces) - 1
    table = piece_table(BPE, PIECES, ["children", "a"])
    assert table.lengths.tolist() == [len(BPE.segment_word("children")), 1]
    assert (table.pieces[1, 1:] == PAD).all()
    with pytest.raises(ValueError, match="width"):
        piece_table(BPE, PIECES, ["children"], width=1)


def test_first_order_scores_are_directional_derivatives(setup):
    """Same piece count: the exact directional derivative of the swap of pieces; a different
    count: the derivative towards every slot of the word taking the mean new-piece embedding."""
    logits_fn, emb, space = setup
    tgt = _targets()
    variants = [swap_variants(space, s) for s in SENTENCES]
    shape = batch_shape(space, variants)
    batch = make_batch(space, SENTENCES, tgt, variants, rows=4, max_len=MAX_LEN, shape=shape)
    src = jnp.asarray(batch.src)

    @jax.jit
    def adv(e):
        return adversarial_loss(logits_fn(e, src != PAD, batch.tgt_in), batch.tgt_out)

    base = jnp.take(emb, src, axis=0)
    grad = jax.grad(lambda e: adv(e).sum())(base)
    terms = gradient_terms(grad, emb, src, batch.starts, batch.lengths)
    scores = np.asarray(
        subword_first_order(
            terms, batch.starts, batch.lengths, space.table.pieces, space.table.lengths
        )
    )
    checked = {"same": 0, "different": 0}
    for b, i, word in [
        (0, 3, "horse"),
        (0, 3, "cat"),
        (1, 1, "stones"),
        (1, 0, "a"),
        (3, 0, "dog"),
    ]:
        c = space.index[word]
        a, k = int(batch.starts[b, i]), int(batch.lengths[b, i])
        q = space.table.pieces[c, : space.table.lengths[c]]
        direction = np.zeros(base.shape, np.float32)
        if len(q) == k:
            direction[b, a : a + k] = np.asarray(emb[q] - emb[src[b, a : a + k]])
            checked["same"] += 1
        else:
            mean = np.asarray(emb[q]).mean(0)
            direction[b, a : a + k] = mean[None] - np.asarray(emb[src[b, a : a + k]])
            checked["different"] += 1
        derivative = jax.jvp(adv, (base,), (jnp.asarray(direction),))[1][b]
        np.testing.assert_allclose(scores[b, i, c], derivative, rtol=1e-4, atol=1e-5)
    assert checked["same"] >= 1 and checked["different"] >= 1


@pytest.mark.parametrize("setting", SETTINGS)
def test_exactly_one_word_changes_and_ids_are_the_resegmentation(setup, attacked, setting):
    logits_fn, emb, space = setup
    tgt = _targets()
    for i, res in enumerate(attacked[setting]):
        assert res.position >= 0, (setting, i)
        assert changed_positions(SENTENCES[i], res.adv_words) == [res.position]
        assert SENTENCES[i][res.position].isalpha()
        assert res.adv_ids == PIECES.ids(BPE.segment(res.adv_words))
        assert len(res.adv_ids) <= MAX_LEN
        assert (
            check_bpe_constraint(
                setting, SENTENCES[i], res.adv_words, res.adv_ids, space, max_len=MAX_LEN
            )
            is None
        )
        src = pad_batch([res.adv_ids], 8 * -(-len(res.adv_ids) // 8))
        exact = exact_losses(
            logits_fn, emb, src, pad_batch([tgt[i]], MAX_LEN, bos=True),
            pad_batch([tgt[i]], MAX_LEN, eos=True),
        )  # fmt: skip
        np.testing.assert_allclose(res.loss, float(exact[0]), rtol=1e-5, atol=1e-6)


def test_knn_word_is_among_the_ten_nearest_by_mean_piece_embedding(setup, attacked):
    _, emb, space = setup
    words = list(space.words)
    means = np.asarray(mean_piece_embeddings(emb, space.table.pieces, space.table.lengths))
    unit = means / np.linalg.norm(means, axis=1, keepdims=True)
    for i, res in enumerate(attacked["knn"]):
        old = SENTENCES[i][res.position]
        q = np.asarray(emb[np.array(PIECES.ids(BPE.segment_word(old)))]).mean(0)
        sim = unit @ (q / np.linalg.norm(q))
        brute = [w for w in sorted(words, key=lambda w: -sim[words.index(w)]) if w != old][:10]
        assert res.new_word in brute and res.new_word != old
        assert {words[j] for j in space.neighbours[old]} == set(brute)


def test_charswap_word_is_out_of_the_word_vocabulary_and_resegmented(attacked):
    for i, res in enumerate(attacked["charswap"]):
        old = SENTENCES[i][res.position]
        assert res.new_word not in WORD_VOCAB
        assert res.new_word in charswap_candidates(old, WORD_VOCAB.__contains__)
        assert BPE.segment_word(res.new_word) != BPE.segment_word(old)
        assert res.adv_ids == PIECES.ids(BPE.segment(res.adv_words))
        assert PIECES.ids(BPE.segment(SENTENCES[i])) != res.adv_ids


def test_constraint_check_rejects_bad_perturbations(setup, attacked):
    _, _, space = setup
    res = attacked["charswap"][0]
    src = SENTENCES[0]
    assert "words changed" in check_bpe_constraint(
        "charswap", src, src, PIECES.ids(BPE.segment(src)), space, max_len=MAX_LEN
    )
    in_vocab = src[:1] + ["cat"] + src[2:]
    assert "CharSwap" in check_bpe_constraint(
        "charswap", src, in_vocab, PIECES.ids(BPE.segment(in_vocab)), space, max_len=MAX_LEN
    )
    wrong_ids = res.adv_ids[:-1]
    assert "segmentation" in check_bpe_constraint(
        "charswap", src, res.adv_words, wrong_ids, space, max_len=MAX_LEN
    )


def test_exact_rescoring_of_every_candidate_finds_the_brute_force_best(setup):
    """top_k covering every candidate: the chosen substitution has the largest exact loss
    over all one-word substitutions by vocabulary words (re-segmented, any length)."""
    logits_fn, emb, space = setup
    b, tgt = 1, _targets()[1]
    sentence = SENTENCES[b]
    out = attack_bpe(
        logits_fn, emb, space, [sentence], [tgt], settings=("unconstrained",),
        top_k=len(space.words) * len(sentence), batch_size=1, max_len=MAX_LEN,
    )["unconstrained"][0]  # fmt: skip
    rows = [PIECES.ids(BPE.segment(sentence[:i] + [w] + sentence[i + 1 :]))
            for i in range(len(sentence)) for w in space.words if w != sentence[i]]  # fmt: skip
    src = pad_batch(rows, max(len(r) for r in rows))
    n = len(rows)
    losses = exact_losses(
        logits_fn, emb, src, np.repeat(pad_batch([tgt], MAX_LEN, bos=True), n, 0),
        np.repeat(pad_batch([tgt], MAX_LEN, eos=True), n, 0),
    )  # fmt: skip
    np.testing.assert_allclose(out.loss, float(losses.max()), rtol=1e-5)


def test_perturbed_sentences_never_exceed_max_len(setup):
    logits_fn, emb, space = setup
    cap = len(BPE.segment(SENTENCES[0]))
    out = attack_bpe(
        logits_fn, emb, space, SENTENCES[:1], _targets()[:1], settings=SETTINGS, top_k=50,
        batch_size=1, max_len=cap,
    )  # fmt: skip
    for setting in SETTINGS:
        res = out[setting][0]
        assert len(res.adv_ids) <= cap and len(changed_positions(SENTENCES[0], res.adv_words)) <= 1


def test_bad_arguments_raise(setup):
    logits_fn, emb, space = setup
    variants = [swap_variants(space, s) for s in SENTENCES]
    shape = batch_shape(space, variants)
    batch = make_batch(space, SENTENCES, _targets(), variants, rows=4, max_len=MAX_LEN, shape=shape)
    with pytest.raises(ValueError, match="settings"):
        first_order_candidates(logits_fn, emb, batch, space.table, settings=("typo",))
    with pytest.raises(ValueError, match="top_k"):
        first_order_candidates(logits_fn, emb, batch, space.table, top_k=0)
