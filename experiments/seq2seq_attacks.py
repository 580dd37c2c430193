"""Run the three one-word attacks on a trained word-level model and build per-case records.

A record holds the case id, the original and perturbed source, the reference, both model
outputs, the substituted position and words, the losses, the chrF and BLEU scores and a
status: "success" (s_src + d_tgt > 1 under chrF), "failed", "no_candidate" (no word the
setting may change) or "invalid" (the perturbation breaks the setting's constraint: not
exactly one word changed, a kNN replacement outside the 10-NN set, or a CharSwap word
still in the vocabulary). Every number of the tables is derived from these records.
"""

import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from advjax.text.mt_batches import pad_batch
from advjax.text.mt_metrics import PairScore, score_pair, summarize
from advjax.text.seq2seq_attack import SETTINGS, knn_table, one_word_attacks
from advjax.text.seq2seq_attack import model_logits_fn as attack_logits_fn
from advjax.text.seq2seq_perturb import changed_positions, perturbed_words, word_mask
from advjax.text.seq2seq_train import build_model, translate
from experiments.seq2seq_models import Loaded

RECORD_STATUSES = ("success", "failed", "no_candidate", "invalid")


def model_logits_fn(model: Loaded):
    """The model's (src_emb, src_mask, tgt_in) -> teacher-forced logits, for the attacks."""
    return attack_logits_fn(build_model(model.config), model.params)


def make_attack_fn(model: Loaded, *, settings: tuple[str, ...], top_k: int, knn: np.ndarray | None):
    """A jitted (src, tgt_in, tgt_out) -> {setting: OneWordAttack} sharing one gradient pass."""
    params = model.params
    mask = jnp.asarray(word_mask(model.src_vocab))
    logits_fn = model_logits_fn(model)

    @jax.jit
    def run(src, tgt_in, tgt_out):
        return one_word_attacks(
            logits_fn, params["src_embedding"], src, tgt_in, tgt_out,
            settings=settings, word_mask=mask, knn=knn, top_k=top_k,
        )  # fmt: skip

    return run


def check_constraint(
    setting: str, src: Sequence[str], adv: Sequence[str], model: Loaded, knn: np.ndarray | None
) -> str | None:
    """Why `adv` breaks the setting's constraint, or None when it keeps it."""
    diff = changed_positions(src, adv)
    if len(diff) != 1:
        return f"{len(diff)} words changed"
    old, new = src[diff[0]], adv[diff[0]]
    if setting == "knn" and model.src_vocab.id(new) not in set(
        knn[model.src_vocab.id(old)].tolist()
    ):
        return f"{new!r} is not among the 10 nearest neighbours of {old!r}"
    if setting == "charswap" and new in model.src_vocab:
        return f"CharSwap word {new!r} is in the vocabulary"
    return None


def attack_model(
    model: Loaded,
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
    """Attack every case with each setting; return (records, seconds per setting)."""
    vocab, tvocab = model.src_vocab, model.tgt_vocab
    src_tokens = [s[:max_len] for s in src_tokens]
    src_ids = [vocab.ids(s) for s in src_tokens]
    tgt_ids = [tvocab.ids(t) for t in ref_tokens]
    knn = np.asarray(knn_table(model.params["src_embedding"], word_mask(vocab), k=knn_k))
    clean_out = translate(model.config, model.params, src_ids, max_len=max_len)
    clean_text = [" ".join(tvocab.decode(o)) for o in clean_out]
    refs = [" ".join(t) for t in ref_tokens]
    srcs = [" ".join(s) for s in src_tokens]
    records, seconds = [], {}
    start = time.perf_counter()
    run = make_attack_fn(model, settings=tuple(settings), top_k=top_k, knn=knn)
    per_setting: dict[str, list] = {setting: [] for setting in settings}
    for lo in range(0, len(src_ids), batch_size):
        chunk = list(range(lo, min(lo + batch_size, len(src_ids))))
        fill = batch_size - len(chunk)
        s = pad_batch([src_ids[i] for i in chunk] + [[]] * fill, max_len)
        ti = pad_batch([tgt_ids[i] for i in chunk] + [[]] * fill, max_len, bos=True)
        to = pad_batch([tgt_ids[i] for i in chunk] + [[]] * fill, max_len, eos=True)
        out = jax.device_get(run(s, ti, to))
        for setting in settings:
            per_setting[setting] += [
                jax.tree.map(lambda a, r=r: a[r], out[setting]) for r in range(len(chunk))
            ]
    seconds["attack_all_settings"] = time.perf_counter() - start
    for setting in settings:
        start = time.perf_counter()
        results = per_setting[setting]
        adv_words, adv_ids = [], []
        for i, res in enumerate(results):
            words = perturbed_words(
                src_tokens[i], int(res.position), int(res.replacement), vocab, setting=setting
            )
            adv_words.append(words)
            adv_ids.append(vocab.ids(words))
        adv_out = translate(model.config, model.params, adv_ids, max_len=max_len)
        seconds[f"decode_{setting}"] = time.perf_counter() - start
        for i, res in enumerate(results):
            adv_src, adv_text = " ".join(adv_words[i]), " ".join(tvocab.decode(adv_out[i]))
            chrf_s = score_pair(srcs[i], adv_src, refs[i], clean_text[i], adv_text, metric="chrf")
            bleu_s = score_pair(srcs[i], adv_src, refs[i], clean_text[i], adv_text, metric="bleu")
            pos = int(res.position)
            if pos < 0:
                status, reason = "no_candidate", "no word this setting may change"
            else:
                reason = check_constraint(setting, src_tokens[i], adv_words[i], model, knn)
                ids_ok = np.array_equal(
                    pad_batch([adv_ids[i]], max_len)[0], np.asarray(res.adv_src)
                )
                if reason is None and not ids_ok:
                    reason = "the model's perturbed ids differ from the perturbed sentence's"
                status = "invalid" if reason else ("success" if chrf_s.success else "failed")
            records.append({
                "model": model.spec.name, "attack": setting, "case_id": i, "status": status,
                "reason": reason, "src": srcs[i], "adv_src": adv_src, "ref": refs[i],
                "out": clean_text[i], "adv_out": adv_text, "position": pos,
                "original_word": src_tokens[i][pos] if pos >= 0 else None,
                "new_word": adv_words[i][pos] if pos >= 0 else None,
                "new_word_id": int(res.replacement), "first_order": float(res.first_order),
                "adv_loss": float(res.loss), "clean_loss": float(res.clean_loss),
                "chrf": scores_dict(chrf_s), "bleu": scores_dict(bleu_s),
            })  # fmt: skip
        log(
            f"{model.spec.name} {setting}: {len(results)} cases, decoded in {seconds[f'decode_{setting}']:.1f} s"
        )
    return records, seconds


def scores_dict(s: PairScore) -> dict:
    """A record's score fields."""
    return {
        "s_src": s.s_src,
        "s_tgt": s.s_tgt,
        "s_tgt_adv": s.s_tgt_adv,
        "d_tgt": s.d_tgt,
        "success": s.success,
    }


def summarize_records(records: Sequence[dict], metric: str = "chrf") -> dict:
    """`advjax.text.mt_metrics.summarize` over records (every case, as the paper averages),
    plus the status counts."""
    scores = [PairScore(r[metric]["s_src"], r[metric]["s_tgt"], r[metric]["s_tgt_adv"], r[metric]["d_tgt"])
              for r in records]  # fmt: skip
    out = summarize(scores)
    out["statuses"] = {s: sum(r["status"] == s for r in records) for s in RECORD_STATUSES}
    return out
