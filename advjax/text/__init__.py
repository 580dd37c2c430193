"""advjax for text: sentence classifiers and translation models under word- and
character-level attacks, evaluated with the same evidence discipline as the image study.

Data is found through a flag or the ``ADVJAX_TEXT_DIR`` environment variable (a folder
laid out like ``../shared/data/text``), never a path written into the code.
"""

TEXT_DIR_ENV = "ADVJAX_TEXT_DIR"

# `advjax.text.score` (the scorer CLI, `python -m advjax.text.score`) is not imported here,
# so that running it as a module does not import it twice.
from advjax.text import (  # noqa: E402
    beam,
    bpe,
    char_attacks,
    charswap,
    classifier,
    mt_metrics,
    multi30k,
    seq2seq,
    seq2seq_attack,
    seq2seq_bpe_attack,
    sst2,
    textfooler,
    transformer,
    validity,
)

__all__ = [
    "TEXT_DIR_ENV",
    "beam",
    "bpe",
    "char_attacks",
    "charswap",
    "classifier",
    "mt_metrics",
    "multi30k",
    "seq2seq",
    "seq2seq_attack",
    "seq2seq_bpe_attack",
    "sst2",
    "textfooler",
    "transformer",
    "validity",
]
