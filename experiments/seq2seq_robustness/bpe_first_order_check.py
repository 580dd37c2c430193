"""How well do the BPE first-order word scores choose candidates? A brute-force check.

    python -m experiments.seq2seq_robustness.bpe_first_order_check [--n 100] [--out DIR]

For the first `n` test sentences of the fr-en BPE model, every allowed kNN and CharSwap
substitution is re-scored exactly; for each ranking rule the best exact gain among its
`top_k` candidates is compared with the brute-force best. Rules: "surrogate" (the attack's
rule, `advjax_text.translate`), "mean_difference" ((mean new-piece embedding -
mean old-piece embedding) . summed word gradient) and "random". Writes
first_order_check.json into `out` (default results/seq2seq/bpe).
"""

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from advjax import backend
from advjax.records import atomic_write_json
from advjax_text.data import load_parallel, resolve_multi30k_dir
from advjax_text.translate import (
    bucket_length,
    exact_losses,
    fit_words,
    gradient_terms,
    loss_and_embedding_grad,
    pad_batch,
    substitute,
    subword_first_order,
)
from experiments.seq2seq_robustness.attacks import model_logits_fn
from experiments.seq2seq_robustness.bpe_attacks import (
    attack_space,
    batch_shape,
    make_batch,
    swap_variants,
    training_word_vocab,
)
from experiments.seq2seq_robustness.main import profile
from experiments.seq2seq_robustness.models import train_or_load

RULES = ("surrogate", "mean_difference", "random")


def rule_scores(fn, emb, batch, space):
    """Clean losses (B,) and {setting: (surrogate, mean-difference) scores (B, W, C)}."""
    clean, grad = loss_and_embedding_grad(fn, emb, batch.src, batch.tgt_in, batch.tgt_out)
    terms = gradient_terms(grad, emb, batch.src, batch.starts, batch.lengths)
    # mean-difference rule: only the span term, old pieces read from the sentence itself
    spread = terms._replace(baseline=jnp.zeros_like(terms.baseline))
    never = -jnp.ones_like(batch.lengths)  # no candidate "keeps the piece count"
    rows = jnp.clip(batch.starts[..., None] + jnp.arange(16), 0, batch.src.shape[1] - 1)
    old = jnp.take_along_axis(batch.src[:, None, :], rows, axis=2)[..., None, :]  # (B, W, 1, 16)
    old_mean = subword_first_order(spread, batch.starts, never, old, batch.lengths[..., None])
    out = {}
    words, word_lengths = jnp.asarray(space.table.pieces), jnp.asarray(space.table.lengths)
    for setting, pieces, lengths in [
        ("knn", words[batch.knn], word_lengths[batch.knn]),
        ("charswap", batch.swap_pieces, batch.swap_lengths),
    ]:  # fmt: skip
        surrogate = subword_first_order(terms, batch.starts, batch.lengths, pieces, lengths)
        new_mean = subword_first_order(spread, batch.starts, never, pieces, lengths)
        out[setting] = (surrogate, new_mean - old_mean)
    return clean, out


def check(model, word_vocab, src, tgt, *, top_k: int = 5, batch_size: int = 50, seed: int = 0):
    """Per setting: brute-force mean gain and, per rule, the mean gain of its top_k and the
    fraction of sentences where it finds the brute-force best."""
    bpe, pieces = model.src_bpe, model.src_vocab
    sents = [fit_words(bpe, s, 32) for s in src]
    tgt_ids = [model.tgt_vocab.ids(model.tgt_bpe.segment(t)) for t in tgt]
    emb, fn = model.params["src_embedding"], model_logits_fn(model)
    space = attack_space(emb, bpe, pieces, word_vocab, sents)
    variants = [swap_variants(space, s) for s in sents]
    shape = batch_shape(space, variants)
    scores = jax.jit(lambda batch: rule_scores(fn, emb, batch, space))
    exact = jax.jit(lambda s, ti, to: exact_losses(fn, emb, s, ti, to))
    rng = np.random.default_rng(seed)
    gains = {s: {r: [] for r in (*RULES, "best")} for s in ("knn", "charswap")}
    differ = []
    for lo in range(0, len(sents), batch_size):
        idx = list(range(lo, min(len(sents), lo + batch_size)))
        batch = make_batch(
            space, [sents[i] for i in idx], [tgt_ids[i] for i in idx],
            [variants[i] for i in idx], rows=batch_size, max_len=32, shape=shape,
        )  # fmt: skip
        clean, out = jax.device_get(scores(batch))
        for setting, (surrogate, mean_diff) in out.items():
            for r, i in enumerate(idx):
                cands = []
                for pos, word in enumerate(sents[i]):
                    if not word.isalpha():
                        continue
                    news = ([space.words[j] for j in space.neighbours[word]]
                            if setting == "knn" else variants[i][pos])  # fmt: skip
                    for c, new in enumerate(news):
                        ids = pieces.ids(bpe.segment(substitute(sents[i], pos, new)))
                        if len(ids) <= 32:
                            cands.append((surrogate[r, pos, c], mean_diff[r, pos, c], ids))
                if not cands:
                    continue
                ranked = np.array([c[:2] for c in cands])
                differ.append(float(np.mean(np.abs(ranked[:, 0] - ranked[:, 1]) > 1e-3)))
                loss = _exact(exact, [c[2] for c in cands], batch, r) - clean[r]
                gains[setting]["best"].append(float(loss.max()))
                for k, rule in enumerate(RULES[:2]):
                    top = np.argsort(-ranked[:, k], kind="stable")[:top_k]
                    gains[setting][rule].append(float(loss[top].max()))
                gains[setting]["random"].append(
                    float(loss[rng.permutation(len(cands))[:top_k]].max())
                )
    summary = {
        "sentences": len(sents),
        "top_k": top_k,
        "candidates_where_rules_differ": float(np.mean(differ)),
    }
    for setting, g in gains.items():
        best = np.array(g["best"])
        summary[setting] = {"cases": len(best), "brute_force_mean_gain": float(best.mean())} | {
            rule: {"mean_gain": float(np.mean(g[rule])),
                   "finds_best": float(np.mean(np.isclose(g[rule], best, atol=1e-4)))}
            for rule in RULES
        }  # fmt: skip
    return summary


def _exact(exact, rows, batch, r, chunk: int = 256) -> np.ndarray:
    """Exact adversarial losses of id rows for batch row r (chunks padded to a bucket)."""
    out = []
    for lo in range(0, len(rows), chunk):
        part = rows[lo : lo + chunk]
        src = pad_batch(part + [[]] * (chunk - len(part)), bucket_length(max(map(len, part))))
        ti, to = (np.repeat(a[r : r + 1], chunk, 0) for a in (batch.tgt_in, batch.tgt_out))
        out += list(np.asarray(exact(src, ti, to))[: len(part)])
    return np.array(out)


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--text-dir", default=None)
    p.add_argument("--out", default="results/seq2seq/bpe")
    p.add_argument("--models-dir", default="results/seq2seq/models")
    args = p.parse_args(argv)
    text_dir = resolve_multi30k_dir(args.text_dir)
    spec = dataclasses.replace(profile("default").model, unit="bpe")
    model = train_or_load(spec, text_dir, Path(args.models_dir))
    test = load_parallel(text_dir, "test_2016_flickr", spec.src_lang, spec.tgt_lang)
    start = time.perf_counter()
    summary = check(
        model, training_word_vocab(spec, text_dir), test.src[: args.n], test.tgt[: args.n]
    )
    summary["seconds"] = time.perf_counter() - start
    atomic_write_json(Path(args.out) / "first_order_check.json", summary)
    print(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main()
