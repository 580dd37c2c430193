"""Train (or reload) the Multi30k translation models of the seq2seq study, with provenance.

A model folder holds params.msgpack, vocab.json (source and target token lists, BPE
merges if any), config.json and history.jsonl, all written atomically; a folder whose
config.json matches the requested config is reused instead of retrained. The stored spec
(`stored_spec`) leaves out the fields the architecture does not use, so LSTM folders
written before the Transformer existed still match.
"""

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import serialization

from advjax.io import environment
from advjax.records import atomic_write_bytes, atomic_write_json, atomic_write_text
from advjax_text.data import Parallel, load_parallel
from advjax_text.tokenize import BPE, Vocab, build_vocab, learn_bpe, merge_pieces, word_counts
from advjax_text.translate import (
    LSTMConfig,
    ModelConfig,
    TrainConfig,
    TransformerConfig,
    chrf,
    create_train_state,
    fit,
    translate,
)

ARCHS = ("lstm", "transformer")
_TRANSFORMER_ONLY = ("arch", "num_heads", "num_layers", "ff_dim")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """One translation model: architecture, language pair, vocabulary kind and sizes.

    `embed_dim` is the Transformer's model dimension; `hidden_dim` is used by the LSTM
    only, `num_heads`, `num_layers` (encoder and decoder each) and `ff_dim` by the
    Transformer only.
    """

    arch: str = "lstm"  # "lstm" or "transformer"
    src_lang: str = "fr"
    tgt_lang: str = "en"
    unit: str = "word"  # "word" or "bpe"
    min_count: int = 2
    bpe_merges: int = 8000
    train_size: int | None = None  # None: all 29,000 pairs
    embed_dim: int = 256
    hidden_dim: int = 256
    dropout_rate: float = 0.2
    num_heads: int = 4
    num_layers: int = 3
    ff_dim: int = 1024
    train: TrainConfig = TrainConfig()

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"arch={self.arch!r} must be one of {ARCHS}")

    @property
    def name(self) -> str:
        return f"{self.arch}_{self.unit}_{self.src_lang}-{self.tgt_lang}"


def stored_spec(spec: ModelSpec) -> dict:
    """The spec as written to (and matched against) config.json: JSON types, without the
    fields its architecture ignores (an LSTM spec keeps exactly its pre-Transformer keys)."""
    out = json.loads(json.dumps(dataclasses.asdict(spec)))
    unused = _TRANSFORMER_ONLY if spec.arch == "lstm" else ("hidden_dim",)
    return {k: v for k, v in out.items() if k not in unused}


def model_config(spec: ModelSpec, src_vocab: int, tgt_vocab: int) -> ModelConfig:
    """The model config of `spec` for the given vocabulary sizes."""
    if spec.arch == "transformer":
        return TransformerConfig(
            src_vocab=src_vocab, tgt_vocab=tgt_vocab, model_dim=spec.embed_dim,
            num_heads=spec.num_heads, num_encoder_layers=spec.num_layers,
            num_decoder_layers=spec.num_layers, ff_dim=spec.ff_dim,
            dropout_rate=spec.dropout_rate, max_len=max(128, spec.train.max_len),
        )  # fmt: skip
    return LSTMConfig(
        src_vocab=src_vocab, tgt_vocab=tgt_vocab, embed_dim=spec.embed_dim,
        hidden_dim=spec.hidden_dim, dropout_rate=spec.dropout_rate,
    )  # fmt: skip


class Loaded(NamedTuple):
    """A trained model and everything needed to use it."""

    spec: ModelSpec
    config: ModelConfig
    params: Any
    src_vocab: Vocab
    tgt_vocab: Vocab
    src_bpe: BPE | None
    tgt_bpe: BPE | None
    history: list


def units(spec: ModelSpec, tokens: list[list[str]], bpe: BPE | None) -> list[list[str]]:
    """Sentences as the model's units: words, or BPE pieces."""
    return tokens if bpe is None else [bpe.segment(s) for s in tokens]


def to_words(spec: ModelSpec, pieces: list[str]) -> list[str]:
    """Model output units back to words."""
    return pieces if spec.unit == "word" else merge_pieces(pieces)


def training_run(spec: ModelSpec, workdir: Path) -> tuple[list, dict] | None:
    """(history, config.json) of the model of `spec` trained into workdir/<name>/, or None
    when there is none of this spec; reads no weights (they are not committed)."""
    folder = Path(workdir) / spec.name
    done = folder / "config.json"
    if not done.exists():
        return None
    meta = json.loads(done.read_text())
    if meta["spec"] != stored_spec(spec):
        return None
    history = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    return history, meta


def train_or_load(spec: ModelSpec, text_dir, workdir: Path, *, log=print) -> Loaded:
    """Train the model described by `spec` into workdir/<name>/, or reload it if present."""
    folder = Path(workdir) / spec.name
    spec_json = stored_spec(spec)
    train = load_parallel(text_dir, "train", spec.src_lang, spec.tgt_lang)
    n = spec.train_size or len(train.src)
    src_tok, tgt_tok = train.src[:n], train.tgt[:n]
    src_bpe = tgt_bpe = None
    if spec.unit == "bpe":
        src_bpe = learn_bpe(word_counts(src_tok), num_merges=spec.bpe_merges)
        tgt_bpe = learn_bpe(word_counts(tgt_tok), num_merges=spec.bpe_merges)
    elif spec.unit != "word":
        raise ValueError(f"unit={spec.unit!r} must be 'word' or 'bpe'")
    src_units, tgt_units = units(spec, src_tok, src_bpe), units(spec, tgt_tok, tgt_bpe)
    src_vocab = build_vocab(src_units, min_count=spec.min_count)
    tgt_vocab = build_vocab(tgt_units, min_count=spec.min_count)
    config = model_config(spec, len(src_vocab), len(tgt_vocab))
    done = folder / "config.json"
    if done.exists() and json.loads(done.read_text())["spec"] == spec_json:
        template = create_train_state(jax.random.key(0), config, spec.train).params
        params = serialization.from_bytes(template, (folder / "params.msgpack").read_bytes())
        history = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
        log(f"{spec.name}: reusing the trained model in {folder}")
        return Loaded(spec, config, params, src_vocab, tgt_vocab, src_bpe, tgt_bpe, history)
    val = load_parallel(text_dir, "val", spec.src_lang, spec.tgt_lang)
    enc = lambda vocab, sents: [vocab.ids(s) for s in sents]  # noqa: E731
    start = time.perf_counter()
    state, history = fit(
        config, spec.train,
        (enc(src_vocab, src_units), enc(tgt_vocab, tgt_units)),
        (enc(src_vocab, units(spec, val.src, src_bpe)), enc(tgt_vocab, units(spec, val.tgt, tgt_bpe))),
        log=lambda e: log(f"{spec.name}: epoch {e['epoch']} train NLL {e['train_nll']:.3f} "
                          f"val NLL {e['val_nll']:.3f} ({e['seconds']:.0f} s)"),
    )  # fmt: skip
    atomic_write_bytes(folder / "params.msgpack", serialization.to_bytes(state.params))
    atomic_write_json(folder / "vocab.json", {
        "src": list(src_vocab.tokens), "tgt": list(tgt_vocab.tokens),
        "src_bpe": [list(m) for m in src_bpe.merges] if src_bpe else None,
        "tgt_bpe": [list(m) for m in tgt_bpe.merges] if tgt_bpe else None,
    })  # fmt: skip
    atomic_write_text(folder / "history.jsonl", "".join(json.dumps(h) + "\n" for h in history))
    atomic_write_json(done, {
        "spec": spec_json, "model_config": dataclasses.asdict(config),
        "train_seconds": time.perf_counter() - start, "command": " ".join(sys.argv),
        "environment": environment(extra_packages=("sacrebleu",)),
    })  # fmt: skip
    return Loaded(spec, config, state.params, src_vocab, tgt_vocab, src_bpe, tgt_bpe, history)


def evaluate_translation(
    model: Loaded,
    data: Parallel,
    *,
    limit: int | None = None,
    beam_size: int | None = None,
    alpha: float = 0.6,
) -> dict:
    """Translations of a split and their corpus BLEU and chrF (tokenised, lowercased):
    greedy by default, beam search of width `beam_size` (length exponent `alpha`, see
    `advjax_text.translate`) when given.

    Returns {"bleu", "chrf", "n", "hypotheses", "references", "mean_sentence_chrf",
    "decoding"} with space-joined sentences.
    """
    import sacrebleu

    src = data.src[:limit] if limit else data.src
    refs = [" ".join(t) for t in (data.tgt[:limit] if limit else data.tgt)]
    ids = [model.src_vocab.ids(s) for s in units(model.spec, src, model.src_bpe)]
    outs = translate(
        model.config, model.params, ids, max_len=model.spec.train.max_len,
        beam_size=beam_size, alpha=alpha,
    )  # fmt: skip
    hyps = [" ".join(to_words(model.spec, model.tgt_vocab.decode(o))) for o in outs]
    bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", force=True).score
    corpus_chrf = sacrebleu.corpus_chrf(hyps, [refs]).score
    return {"bleu": bleu, "chrf": corpus_chrf, "n": len(hyps), "hypotheses": hyps,
            "references": refs, "mean_sentence_chrf": float(np.mean([chrf(h, r) for h, r in zip(hyps, refs)])),
            "decoding": "greedy" if beam_size is None else {"beam_size": beam_size, "alpha": alpha}}  # fmt: skip
