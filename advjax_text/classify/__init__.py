"""Sentence classification under attack: the word-CNN, its training, the greedy black-box
search, TextFooler-style word substitution and character edits."""

from advjax_text.classify._char_attacks import (
    FAMILIES,
    char_attack,
    char_candidates,
    char_edits,
)
from advjax_text.classify._greedy import (
    Edit,
    GreedyResult,
    apply_edits,
    greedy_attack,
    max_changes,
    truncate_result,
)
from advjax_text.classify._model import (
    ClassifierConfig,
    create_train_state,
    eval_step,
    make_model,
    make_text_logits_fn,
    params_digest,
    substitute_tokens,
    train_step,
)
from advjax_text.classify._textfooler import (
    STOPWORDS,
    textfooler,
    word_candidates,
)
from advjax_text.classify._train import (
    neighbor_table,
    predict_logits,
    train_classifier,
)

__all__ = [
    "apply_edits",
    "char_attack",
    "char_candidates",
    "char_edits",
    "ClassifierConfig",
    "create_train_state",
    "Edit",
    "eval_step",
    "FAMILIES",
    "greedy_attack",
    "GreedyResult",
    "make_model",
    "make_text_logits_fn",
    "max_changes",
    "neighbor_table",
    "params_digest",
    "predict_logits",
    "STOPWORDS",
    "substitute_tokens",
    "textfooler",
    "train_classifier",
    "train_step",
    "truncate_result",
    "word_candidates",
]
