"""The text study's phases: data, two classifiers, clean / AdvGLUE evaluation, attacks.

Keys: root = jax.random.key(seed); standard model fold_in(root, 0), augmented model
fold_in(root, 1), evaluation subset fold_in(root, 2), char attack of case i
fold_in(fold_in(root, 3), i) (its key_path [seed, 3, i]).
"""

import dataclasses
import os
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

from advjax.evaluation.stats import rate
from advjax.io import Progress
from advjax_text import TextCaseRecord, ValidityRule, check_validity, make_record
from advjax_text.classify import (
    STOPWORDS,
    char_attack,
    char_edits,
    make_model,
    make_text_logits_fn,
    neighbor_table,
    params_digest,
    predict_logits,
    textfooler,
    train_classifier,
    word_candidates,
)
from advjax_text.data import (
    load_advglue_sst2,
    load_antonyms,
    load_mr,
    load_neighbors,
    load_sst2,
    resolve_text_dir,
)
from advjax_text.tokenize import CLASSIFIER_SPECIALS, Vocab, build_vocab, tokenize
from experiments.text_robustness.config import TextStudyConfig

MODELS = ("standard", "augmented")


class TextData(NamedTuple):
    train: object
    dev: object
    advglue: object
    mr: object
    neighbors: dict
    antonyms: frozenset


class TrainedText(NamedTuple):
    name: str
    state: object
    version: str
    history: list
    logits_fn: Callable


def load_data(text_dir: str | os.PathLike | None) -> TextData:
    """Every file the study reads (errors name the missing or malformed file)."""
    d = resolve_text_dir(text_dir)
    return TextData(
        load_sst2(d, "train"),
        load_sst2(d, "dev"),
        load_advglue_sst2(d),
        load_mr(d),
        load_neighbors(d),
        load_antonyms(d),
    )


def train_subset(config: TextStudyConfig, n: int) -> np.ndarray:
    """Training indices: all, or the first train_size of a seeded permutation."""
    size = config.classifier.train_size
    if size is None:
        return np.arange(n)
    key = jax.random.fold_in(jax.random.key(config.seed), 4)
    return np.sort(np.asarray(jax.random.permutation(key, n))[:size])


def eval_cases(config: TextStudyConfig, n: int) -> list[int]:
    """Dev case ids attacked: all, or a seeded subset of eval_size (sorted)."""
    if config.eval_size is None or config.eval_size >= n:
        return list(range(n))
    key = jax.random.fold_in(jax.random.key(config.seed), 2)
    return sorted(int(i) for i in np.asarray(jax.random.permutation(key, n))[: config.eval_size])


def train_models(
    config: TextStudyConfig, data: TextData, log: Callable[[str], None]
) -> tuple[Vocab, list[TrainedText]]:
    """The standard and the substitution-augmented classifier on the same training data."""
    idx = train_subset(config, len(data.train.sentences))
    sentences = [data.train.sentences[i] for i in idx]
    labels = np.asarray(data.train.labels)[idx]
    vocab = build_vocab(
        map(tokenize, sentences),
        specials=CLASSIFIER_SPECIALS,
        min_count=config.classifier.min_count,
    )
    tokens = vocab.encode_texts(sentences, max_len=config.classifier.max_len)
    table = neighbor_table(vocab, data.neighbors, data.antonyms, stopwords=STOPWORDS)
    log(f"vocabulary {len(vocab):,} words; {int((table.counts > 0).sum()):,} with valid neighbours")
    root = jax.random.key(config.seed)
    out = []
    for i, name in enumerate(MODELS):
        rate_ = 0.0 if name == "standard" else config.defense_augment_rate
        cfg = dataclasses.replace(config.classifier, augment_rate=rate_)
        log(f"training {name} (augment_rate={rate_}) on {len(tokens):,} sentences")
        state, history = train_classifier(
            cfg,
            tokens,
            labels,
            key=jax.random.fold_in(root, i),
            vocab_size=len(vocab),
            table=table,
            log=log,
        )
        fn = make_text_logits_fn(
            make_model(cfg, len(vocab)), state.params, vocab, max_len=cfg.max_len
        )
        out.append(TrainedText(name, state, params_digest(state.params), history, fn))
    return vocab, out


def clean_eval(model: TrainedText, vocab: Vocab, data: TextData, max_len: int) -> dict:
    """Accuracy with Wilson intervals on SST-2 dev, AdvGLUE SST-2 dev and MR (all of them)."""
    out = {}
    for name, split in (
        ("sst2_dev", data.dev),
        ("advglue_sst2_dev", data.advglue),
        ("mr", data.mr),
    ):
        pred = predict_logits(
            model.state, vocab.encode_texts(split.sentences, max_len=max_len)
        ).argmax(-1)
        out[name] = rate(int((pred == np.asarray(split.labels)).sum()), len(split.labels))
    return out


def make_judges(config: TextStudyConfig, data: TextData) -> dict:
    """Per attack, (original, perturbed, edits, max_share) -> Validity under the declared rule."""
    families = config.char_families

    def tf_allowed(old, new):
        return new in word_candidates(old, data.neighbors, data.antonyms)

    def char_allowed(old, new):
        return any(new in char_edits(old, f, data.neighbors.__contains__) for f in families)

    allowed = {"textfooler": tf_allowed, "char": char_allowed}

    def judge_for(attack):
        def judge(original, perturbed, edits, max_share):
            rule = ValidityRule(max_share=max_share, chrf_floor=config.chrf_floor)
            return check_validity(
                original, perturbed, edits, rule, antonyms=data.antonyms, allowed=allowed[attack]
            )

        return judge

    return {a: judge_for(a) for a in config.attacks}


def attack_config(
    config: TextStudyConfig, attack: str, *, max_queries: int, max_share: float
) -> dict:
    """The declared attack config written into every record."""
    base = {
        "attack": attack,
        "max_queries": max_queries,
        "max_share": max_share,
        "chrf_floor": config.chrf_floor,
        "stopwords": "textfooler",
        "seed": config.seed,
    }
    if attack == "textfooler":
        return {**base, "neighbours": "counterfitted_neighbors.json", "antonyms": "ppdb+wordnet"}
    return {**base, "families": list(config.char_families), "candidates": config.char_candidates}


def attack_case(
    config: TextStudyConfig,
    data: TextData,
    model: TrainedText,
    attack: str,
    case_id: int,
    *,
    max_queries: int,
    max_share: float,
    judge: Callable,
) -> TextCaseRecord:
    """Attack dev case `case_id` of `model` at the given caps and judge the result."""
    sentence, label = data.dev.sentences[case_id], data.dev.labels[case_id]
    if attack == "textfooler":
        key_path = (config.seed, "textfooler", case_id)
        result = textfooler(
            model.logits_fn,
            sentence,
            label,
            neighbors=data.neighbors,
            antonyms=data.antonyms,
            max_queries=max_queries,
            max_share=max_share,
        )
    else:
        key_path = (config.seed, 3, case_id)
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), 3), case_id)
        result = char_attack(
            model.logits_fn,
            sentence,
            label,
            key=key,
            max_queries=max_queries,
            max_share=max_share,
            families=config.char_families,
            in_vocab=data.neighbors.__contains__,
            max_candidates=config.char_candidates,
        )
    validity = judge(" ".join(result.words), result.perturbed, result.edits, max_share)
    return make_record(
        result,
        validity,
        case_id=case_id,
        label=label,
        seed=config.seed,
        key_path=key_path,
        model=model.name,
        model_version=model.version,
        attack=attack,
        attack_config=attack_config(config, attack, max_queries=max_queries, max_share=max_share),
        max_share=max_share,
    )


def run_attacks(
    config: TextStudyConfig,
    data: TextData,
    models: list[TrainedText],
    cases: list[int],
    judges: dict,
    *,
    show_progress: bool = True,
) -> list[TextCaseRecord]:
    """Every (model, attack, case) at the largest declared caps."""
    records = []
    for model in models:
        for attack in config.attacks:
            bar = Progress(len(cases), f"{model.name}/{attack}", show_progress)
            for case_id in cases:
                records.append(
                    attack_case(
                        config,
                        data,
                        model,
                        attack,
                        case_id,
                        max_queries=config.max_queries,
                        max_share=config.max_share,
                        judge=judges[attack],
                    )
                )
                bar.update()
            bar.close()
    return records
