"""Loading the text data: SST-2, AdvGLUE's SST-2 dev part, MR, synonym lists and Multi30k."""

from advjax_text.data._env import (
    TEXT_DIR_ENV,
)
from advjax_text.data._multi30k import (
    Parallel,
    load_lines,
    load_parallel,
    resolve_multi30k_dir,
    tokenize,
)
from advjax_text.data._sst2 import (
    TextDataError,
    load_advglue_sst2,
    load_antonyms,
    load_mr,
    load_neighbors,
    load_sst2,
    resolve_text_dir,
)

__all__ = [
    "load_advglue_sst2",
    "load_antonyms",
    "load_lines",
    "load_mr",
    "load_neighbors",
    "load_parallel",
    "load_sst2",
    "Parallel",
    "resolve_multi30k_dir",
    "resolve_text_dir",
    "TEXT_DIR_ENV",
    "TextDataError",
    "tokenize",
]
