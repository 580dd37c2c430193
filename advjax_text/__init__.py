"""advjax for text: sentence classifiers and translation models under word- and
character-level attacks, evaluated with the same evidence discipline as the image study.

Subpackages: `tokenize` (vocabularies, BPE), `data` (SST-2, AdvGLUE, MR, Multi30k),
`classify` (word-CNN, TextFooler, character edits), `translate` (LSTM and Transformer
seq2seq, beam search, the attacks of Michel et al. 2019, chrF). Data is found through a flag
or the ``ADVJAX_TEXT_DIR`` environment variable, never a path written into the code.
"""

from advjax_text._records import (
    TextCaseRecord,
    derive_record,
    gate_group,
    make_record,
    status_of,
    summarise,
)
from advjax_text._validity import (
    Validity,
    ValidityRule,
    check_validity,
    chrf_similarity,
)

__all__ = [
    "check_validity",
    "chrf_similarity",
    "derive_record",
    "gate_group",
    "make_record",
    "status_of",
    "summarise",
    "TextCaseRecord",
    "Validity",
    "ValidityRule",
]
