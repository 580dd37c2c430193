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

from advjax_text.translate import (
    SETTINGS,
    PairScore,
    build_model,
    changed_positions,
    knn_table,
    one_word_attacks,
    pad_batch,
    perturbed_words,
    score_pair,
    summarize,
    translate,
    word_mask,
)
from advjax_text.translate import model_logits_fn as attack_logits_fn
from experiments.seq2seq_robustness.models import Loaded

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
            pos, reason = int(res.position), None
            if pos >= 0:
                reason = check_constraint(setting, src_tokens[i], adv_words[i], model, knn)
                ids_ok = np.array_equal(
                    pad_batch([adv_ids[i]], max_len)[0], np.asarray(res.adv_src)
                )
                if reason is None and not ids_ok:
                    reason = "the model's perturbed ids differ from the perturbed sentence's"
            records.append(case_record(
                model=model.spec.name, attack=setting, case_id=i, src=srcs[i],
                adv_src=" ".join(adv_words[i]), ref=refs[i], out=clean_text[i],
                adv_out=" ".join(tvocab.decode(adv_out[i])), position=pos, reason=reason,
                original_word=src_tokens[i][pos] if pos >= 0 else None,
                new_word=adv_words[i][pos] if pos >= 0 else None,
                extra={"new_word_id": int(res.replacement)},
                first_order=float(res.first_order), adv_loss=float(res.loss),
                clean_loss=float(res.clean_loss),
            ))  # fmt: skip
        log(
            f"{model.spec.name} {setting}: {len(results)} cases, decoded in {seconds[f'decode_{setting}']:.1f} s"
        )
    return records, seconds


NO_CANDIDATE_REASON = "no word this setting may change"


def case_record(
    *,
    model: str,
    attack: str,
    case_id: int,
    src: str,
    adv_src: str,
    ref: str,
    out: str,
    adv_out: str,
    position: int,
    reason: str | None,
    original_word: str | None,
    new_word: str | None,
    first_order: float,
    adv_loss: float,
    clean_loss: float,
    extra: dict | None = None,
) -> dict:
    """One attacked case's record: its status, the shared fields and both scores.

    The word-level and BPE attack loops build their records here, so both kinds share
    one status rule and one key order (records are written as JSON and compared).

    Args:
      model, attack, case_id: the model's name, the attack setting and the case's index.
      src, adv_src, ref, out, adv_out: the original and perturbed source, the reference
        and the model outputs on `src` and on `adv_src`.
      position: the substituted word's position, negative when the setting had none.
      reason: why the perturbation breaks the setting's constraint, or None when it keeps
        it; ignored when `position` is negative.
      original_word, new_word: the substituted word and its replacement.
      first_order, adv_loss, clean_loss: the attack's first-order score and its exact
        losses on the perturbed and original source.
      extra: the record kind's own fields, placed right after `new_word`; they may not
        reuse a shared field's name.

    Returns:
      A dict whose status is "no_candidate" when `position` < 0, else "invalid" when a
      `reason` is given, else "success" or "failed" from the chrF score's success.
    """
    chrf = score_pair(src, adv_src, ref, out, adv_out, metric="chrf")
    bleu = score_pair(src, adv_src, ref, out, adv_out, metric="bleu")
    if position < 0:
        status, reason = "no_candidate", NO_CANDIDATE_REASON
    else:
        status = "invalid" if reason else ("success" if chrf.success else "failed")
    head = {
        "model": model, "attack": attack, "case_id": case_id, "status": status,
        "reason": reason, "src": src, "adv_src": adv_src, "ref": ref, "out": out,
        "adv_out": adv_out, "position": position, "original_word": original_word,
        "new_word": new_word,
    }  # fmt: skip
    tail = {
        "first_order": first_order, "adv_loss": adv_loss, "clean_loss": clean_loss,
        "chrf": scores_dict(chrf), "bleu": scores_dict(bleu),
    }  # fmt: skip
    extra = extra or {}
    if clash := set(extra) & (set(head) | set(tail)):
        raise ValueError(f"extra fields {sorted(clash)} would overwrite shared fields")
    return head | extra | tail


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
    """`advjax_text.translate.summarize` over records (every case, as the paper averages),
    plus the status counts."""
    scores = [PairScore(r[metric]["s_src"], r[metric]["s_tgt"], r[metric]["s_tgt_adv"], r[metric]["d_tgt"])
              for r in records]  # fmt: skip
    out = summarize(scores)
    out["statuses"] = {s: sum(r["status"] == s for r in records) for s in RECORD_STATUSES}
    return out
