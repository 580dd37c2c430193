"""The three one-word attacks on a subword (BPE) translation model, with per-case records.

A word is a space-separated token of the original sentence; every attack changes one word.
Candidates come from `advjax_text.translate` (first-order scores over the word's
pieces), the `top_k` of each setting are re-segmented, padded to a length bucket and
re-scored exactly in one forward pass, and the best exact loss wins. Candidate words of
"unconstrained" and "knn" are the alphabetic words of the training data's word vocabulary
(tokens seen at least `min_count` times: the word-level model's source vocabulary);
CharSwap words are out of that vocabulary (every string is representable in BPE).

Records have the word-level fields (`experiments.seq2seq_robustness.attacks`) plus the pieces of the
old and new word, and are "invalid" unless exactly one word changed, a kNN word is among
the word's 10 nearest candidate words, an unconstrained word is a vocabulary word, a
CharSwap word is a CharSwap variant out of the word vocabulary, and the ids the model saw
equal the BPE segmentation of the perturbed sentence (at most `max_len` pieces).
"""

import time
from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from advjax.types import ArrayLike
from advjax_text.data import load_parallel
from advjax_text.tokenize import BPE, PAD, UNK, Vocab, build_vocab, merge_pieces
from advjax_text.translate import (
    SETTINGS,
    SeqLogitsFn,
    SubwordBatch,
    SubwordTable,
    bucket_length,
    changed_positions,
    charswap_candidates,
    exact_losses,
    first_order_candidates,
    fit_words,
    pad_batch,
    piece_table,
    substitute,
    subword_knn,
    translate,
    word_starts,
)
from experiments.seq2seq_robustness.attacks import case_record, model_logits_fn
from experiments.seq2seq_robustness.models import Loaded, ModelSpec


class AttackSpace(NamedTuple):
    """What a BPE attack may substitute: candidate words, their pieces and neighbours."""

    bpe: BPE
    pieces: Vocab  # the model's source piece vocabulary
    word_vocab: Vocab  # the training data's word vocabulary
    words: tuple[str, ...]  # candidate words (unconstrained, knn)
    table: SubwordTable  # their piece ids
    index: dict  # word -> its index in `words`
    neighbours: dict  # attacked word -> indices of its knn_k nearest candidate words


class Candidate(NamedTuple):
    """One first-order candidate of a batch row, with its re-segmented ids."""

    row: int
    setting: str
    position: int
    new_word: str
    first_order: float
    ids: list[int]


class BpeAttack(NamedTuple):
    """The chosen substitution of one case and setting (position -1: no candidate)."""

    position: int
    new_word: str | None
    adv_words: list[str]
    adv_ids: list[int]
    first_order: float
    loss: float
    clean_loss: float


def training_word_vocab(spec: ModelSpec, text_dir) -> Vocab:
    """The source word vocabulary of the model's training data (min_count as the spec)."""
    train = load_parallel(text_dir, "train", spec.src_lang, spec.tgt_lang)
    return build_vocab(train.src[: spec.train_size or len(train.src)], min_count=spec.min_count)


def attack_space(
    embedding: ArrayLike, bpe: BPE, pieces: Vocab, word_vocab: Vocab, sentences, *, knn_k: int = 10
) -> AttackSpace:
    """Candidate words (alphabetic vocabulary words without <unk> pieces) and the kNN table
    of every alphabetic word of `sentences`."""
    words = [w for w in word_vocab.tokens if w in word_vocab and w.isalpha()]
    words = tuple(w for w in words if UNK not in pieces.ids(bpe.segment_word(w)))
    table = piece_table(bpe, pieces, words)
    index = {w: i for i, w in enumerate(words)}
    queries = sorted({w for s in sentences for w in s if w.isalpha()})
    near = np.zeros((0, knn_k), np.int32)
    if queries:
        exclude = np.array([index.get(q, -1) for q in queries], np.int32)
        qtable = piece_table(bpe, pieces, queries)
        near = np.asarray(subword_knn(embedding, qtable, table, exclude, k=knn_k))
    neighbours = {q: tuple(int(i) for i in row) for q, row in zip(queries, near)}
    return AttackSpace(bpe, pieces, word_vocab, words, table, index, neighbours)


def swap_variants(space: AttackSpace, sentence: Sequence[str]) -> list[list[str]]:
    """The CharSwap variants (out of the word vocabulary) of each alphabetic word."""
    inside = space.word_vocab.__contains__
    return [charswap_candidates(w, inside) if w.isalpha() else [] for w in sentence]


def batch_shape(space: AttackSpace, variants: list[list[list[str]]]) -> tuple[int, int]:
    """(C, P): the most CharSwap variants of a word and the most pieces of a variant."""
    n_var = max([len(v) for vs in variants for v in vs] + [1])
    width = max([len(space.bpe.segment_word(w)) for vs in variants for v in vs for w in v] + [1])
    return n_var, width


def make_batch(
    space: AttackSpace, sentences, tgt_ids, variants, *, rows: int, max_len: int, shape
) -> SubwordBatch:
    """A `SubwordBatch` of `rows` rows (empty rows after the sentences); shape = (C, P)."""
    n_var, width = shape
    knn_k = len(next(iter(space.neighbours.values()), (0,)))
    w = max_len
    src = pad_batch([space.pieces.ids(space.bpe.segment(s)) for s in sentences], max_len)
    starts, lengths = np.zeros((rows, w), np.int32), np.zeros((rows, w), np.int32)
    ok, self_index = np.zeros((rows, w), bool), np.full((rows, w), -1, np.int32)
    knn = np.zeros((rows, w, knn_k), np.int32)
    swap_pieces = np.full((rows, w, n_var, width), PAD, np.int32)
    swap_lengths = np.zeros((rows, w, n_var), np.int32)
    for r, words in enumerate(sentences):
        a, k = word_starts(space.bpe, words)
        starts[r, : len(a)], lengths[r, : len(k)] = a, k
        for i, word in enumerate(words):
            ok[r, i] = word.isalpha()
            self_index[r, i] = space.index.get(word, -1)
            if ok[r, i]:
                knn[r, i] = space.neighbours[word]
                table = piece_table(space.bpe, space.pieces, variants[r][i], width=width)
                swap_pieces[r, i, : len(variants[r][i])] = table.pieces
                swap_lengths[r, i, : len(variants[r][i])] = table.lengths

    def full(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a, np.zeros((rows - len(a), a.shape[1]), a.dtype)])

    return SubwordBatch(
        full(src), full(pad_batch(tgt_ids, max_len, bos=True)),
        full(pad_batch(tgt_ids, max_len, eos=True)), starts, lengths, ok, self_index, knn,
        swap_pieces, swap_lengths,
    )  # fmt: skip


def attack_bpe(
    logits_fn: SeqLogitsFn,
    embedding: ArrayLike,
    space: AttackSpace,
    sentences: list[list[str]],
    tgt_ids: list[list[int]],
    *,
    settings: Sequence[str] = SETTINGS,
    top_k: int = 5,
    batch_size: int = 50,
    max_len: int = 32,
) -> dict[str, list[BpeAttack]]:
    """Attack every sentence (words, at most `max_len` pieces) with each setting.

    Returns {setting: one `BpeAttack` per sentence}.

    Raises:
      ValueError: a sentence segments into more than `max_len` pieces (see `fit_words`).
    """
    settings = tuple(settings)
    too_long = [i for i, s in enumerate(sentences) if len(space.bpe.segment(s)) > max_len]
    if too_long:
        raise ValueError(f"sentences {too_long[:5]} have more than {max_len=} pieces")
    variants = [swap_variants(space, s) for s in sentences]
    shape = batch_shape(space, variants)
    score = jax.jit(
        lambda emb, batch, table: first_order_candidates(
            logits_fn, emb, batch, table, settings=settings, top_k=top_k, max_pieces=max_len
        )
    )
    exact = jax.jit(lambda emb, s, ti, to: exact_losses(logits_fn, emb, s, ti, to))
    out: dict[str, list[BpeAttack]] = {s: [] for s in settings}
    for lo in range(0, len(sentences), batch_size):
        idx = list(range(lo, min(lo + batch_size, len(sentences))))
        batch = make_batch(
            space, [sentences[i] for i in idx], [tgt_ids[i] for i in idx],
            [variants[i] for i in idx], rows=batch_size, max_len=max_len, shape=shape,
        )  # fmt: skip
        clean, tops = jax.device_get(score(embedding, batch, space.table))
        cands: list[Candidate] = []
        for r, i in enumerate(idx):
            for setting in settings:
                t = tops[setting]
                for j in np.flatnonzero(np.isfinite(t.score[r])):
                    pos, choice = int(t.position[r, j]), int(t.choice[r, j])
                    new = (variants[i][pos][choice] if setting == "charswap"
                           else space.words[choice])  # fmt: skip
                    words = substitute(sentences[i], pos, new)
                    ids = space.pieces.ids(space.bpe.segment(words))
                    cands.append(Candidate(r, setting, pos, new, float(t.score[r, j]), ids))
        rows = batch_size * top_k * len(settings)
        losses = _rescore(exact, embedding, cands, batch, rows=rows, max_len=max_len)
        best: dict = {}  # (row, setting) -> (exact loss, candidate), first maximum kept
        for loss, cand in zip(losses, cands):
            key = (cand.row, cand.setting)
            if key not in best or loss > best[key][0]:
                best[key] = (loss, cand)
        for r, i in enumerate(idx):
            for setting in settings:
                if (r, setting) not in best:
                    ids = space.pieces.ids(space.bpe.segment(sentences[i]))
                    c = float(clean[r])
                    out[setting].append(BpeAttack(-1, None, list(sentences[i]), ids, 0.0, c, c))
                    continue
                loss, c = best[r, setting]
                words = substitute(sentences[i], c.position, c.new_word)
                out[setting].append(BpeAttack(
                    c.position, c.new_word, words, c.ids, c.first_order, loss, float(clean[r])
                ))  # fmt: skip
    return out


def _rescore(
    exact, embedding, cands: list[Candidate], batch: SubwordBatch, *, rows: int, max_len: int
) -> list[float]:
    """Exact adversarial losses of the candidates' re-segmented ids, `rows` at a time,
    padded to a length bucket (multiples of 8)."""
    losses: list[float] = []
    for lo in range(0, len(cands), rows):
        part = cands[lo : lo + rows]
        length = bucket_length(max(len(c.ids) for c in part), step=8, max_len=max_len)
        fill = rows - len(part)
        src = pad_batch([c.ids for c in part] + [[]] * fill, length)
        which = np.array([c.row for c in part] + [0] * fill)
        out = exact(embedding, src, batch.tgt_in[which], batch.tgt_out[which])
        losses += [float(x) for x in np.asarray(out)[: len(part)]]
    return losses


def check_bpe_constraint(
    setting: str, src: Sequence[str], adv: Sequence[str], adv_ids, space: AttackSpace,
    *, max_len: int,
) -> str | None:  # fmt: skip
    """Why `adv` (and the ids the model saw) break the setting's constraint, or None."""
    diff = changed_positions(src, adv)
    if len(diff) != 1:
        return f"{len(diff)} words changed"
    old, new = src[diff[0]], adv[diff[0]]
    if setting == "knn" and space.index.get(new, -1) not in space.neighbours.get(old, ()):
        return f"{new!r} is not among the nearest neighbours of {old!r}"
    if setting == "unconstrained" and new not in space.index:
        return f"{new!r} is not a candidate vocabulary word"
    if setting == "charswap" and (
        new in space.word_vocab
        or new not in charswap_candidates(old, space.word_vocab.__contains__)
    ):
        return f"{new!r} is not an out-of-vocabulary CharSwap variant of {old!r}"
    expected = space.pieces.ids(space.bpe.segment(adv))
    if list(adv_ids) != expected or len(expected) > max_len:
        return "the model's ids differ from the BPE segmentation of the perturbed sentence"
    return None


def attack_bpe_model(
    model: Loaded,
    word_vocab: Vocab,
    src_tokens: list[list[str]],
    ref_tokens: list[list[str]],
    *,
    settings: Sequence[str] = SETTINGS,
    top_k: int = 5,
    knn_k: int = 10,
    batch_size: int = 50,
    max_len: int = 32,
    log=print,
) -> tuple[list[dict], dict]:
    """Attack every case of a BPE model with each setting; return (records, seconds)."""
    bpe, pieces, tvocab = model.src_bpe, model.src_vocab, model.tgt_vocab
    if bpe is None or model.tgt_bpe is None:
        raise ValueError(f"{model.spec.name} is not a BPE model")
    sentences = [fit_words(bpe, s, max_len) for s in src_tokens]
    tgt_ids = [tvocab.ids(model.tgt_bpe.segment(t)) for t in ref_tokens]
    embedding = model.params["src_embedding"]
    space = attack_space(embedding, bpe, pieces, word_vocab, sentences, knn_k=knn_k)
    decode = lambda ids: [" ".join(merge_pieces(tvocab.decode(o))) for o in  # noqa: E731
                          translate(model.config, model.params, ids, max_len=max_len)]  # fmt: skip
    clean_text = decode([pieces.ids(bpe.segment(s)) for s in sentences])
    srcs, refs = [" ".join(s) for s in sentences], [" ".join(t) for t in ref_tokens]
    start = time.perf_counter()
    results = attack_bpe(
        model_logits_fn(model), embedding, space, sentences, tgt_ids, settings=settings,
        top_k=top_k, batch_size=batch_size, max_len=max_len,
    )  # fmt: skip
    seconds = {"attack_all_settings": time.perf_counter() - start}
    records = []
    for setting in settings:
        start = time.perf_counter()
        adv_text = decode([res.adv_ids for res in results[setting]])
        seconds[f"decode_{setting}"] = time.perf_counter() - start
        for i, res in enumerate(results[setting]):
            adv_src, pos, reason = " ".join(res.adv_words), res.position, None
            if pos >= 0:
                reason = check_bpe_constraint(
                    setting, sentences[i], adv_src.split(), res.adv_ids, space, max_len=max_len
                )
            old = sentences[i][pos] if pos >= 0 else None
            records.append(case_record(
                model=model.spec.name, attack=setting, case_id=i, src=srcs[i],
                adv_src=adv_src, ref=refs[i], out=clean_text[i], adv_out=adv_text[i],
                position=pos, reason=reason, original_word=old, new_word=res.new_word,
                extra={
                    "original_pieces": bpe.segment_word(old) if old else None,
                    "new_pieces": bpe.segment_word(res.new_word) if res.new_word else None,
                },
                first_order=res.first_order, adv_loss=res.loss, clean_loss=res.clean_loss,
            ))  # fmt: skip
        log(f"{model.spec.name} {setting}: {len(results[setting])} cases, "
            f"decoded in {seconds[f'decode_{setting}']:.1f} s")  # fmt: skip
    return records, seconds
