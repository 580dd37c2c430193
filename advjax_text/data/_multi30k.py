"""Multi30k task 1 (Elliott et al. 2016, 2017; Barrault et al. 2018): loading and tokenising.

The raw files live in ``<text dir>/multi30k_task1_raw/{split}.{lang}.gz`` (one sentence a
line, aligned across languages). The text dir comes from a flag or ``ADVJAX_TEXT_DIR``.
Tokens are lowercase words and single punctuation marks (``\\w+|[^\\w\\s]``); on the
training data this gives the README's figures (about 13 tokens per English sentence,
5,894 English types seen at least twice). Scores are computed on the space-joined tokens.
"""

import gzip
import os
import re
from pathlib import Path
from typing import NamedTuple

from advjax_text.data._env import TEXT_DIR_ENV

LANGS = ("en", "de", "fr", "cs")
SPLITS = (
    "train",
    "val",
    "test_2016_flickr",
    "test_2017_flickr",
    "test_2017_mscoco",
    "test_2018_flickr",
)
_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Lowercase word and punctuation tokens.

    Example:
      >>> tokenize("Two young, White males.")
      ['two', 'young', ',', 'white', 'males', '.']
    """
    return _TOKEN.findall(text.lower())


def detokenize(tokens: list[str]) -> str:
    """Tokens joined by single spaces (the form every score here is computed on)."""
    return " ".join(tokens)


def resolve_multi30k_dir(text_dir: str | os.PathLike | None = None) -> Path:
    """`text_dir`, else ``$ADVJAX_TEXT_DIR``; it must hold ``multi30k_task1_raw/``.

    Raises:
      ValueError: neither is given, or the folder has no ``multi30k_task1_raw``.
    """
    root = text_dir if text_dir is not None else os.environ.get(TEXT_DIR_ENV)
    if not root:
        raise ValueError(f"no text data folder: pass --text-dir or set {TEXT_DIR_ENV}")
    root = Path(root)
    if not (root / "multi30k_task1_raw").is_dir():
        raise ValueError(f"{root} has no multi30k_task1_raw/ folder")
    return root


def load_lines(text_dir: str | os.PathLike | None, split: str, lang: str) -> list[str]:
    """Raw sentences of one Multi30k split and language.

    Raises:
      ValueError: unknown split or language, or the file is missing.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} must be one of {SPLITS}")
    if lang not in LANGS:
        raise ValueError(f"lang={lang!r} must be one of {LANGS}")
    path = resolve_multi30k_dir(text_dir) / "multi30k_task1_raw" / f"{split}.{lang}.gz"
    if not path.exists():
        raise ValueError(f"{path} does not exist (cs has no 2017 test sets)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class Parallel(NamedTuple):
    """Aligned raw and tokenised sentences of one split and language pair."""

    src_raw: list[str]
    tgt_raw: list[str]
    src: list[list[str]]
    tgt: list[list[str]]


def load_parallel(
    text_dir: str | os.PathLike | None, split: str, src_lang: str, tgt_lang: str = "en"
) -> Parallel:
    """Aligned source/target sentences, raw and tokenised.

    Raises:
      ValueError: bad names, or the two sides differ in length.
    """
    src_raw = load_lines(text_dir, split, src_lang)
    tgt_raw = load_lines(text_dir, split, tgt_lang)
    if len(src_raw) != len(tgt_raw):
        raise ValueError(f"{split}: {len(src_raw)} {src_lang} lines vs {len(tgt_raw)} {tgt_lang}")
    return Parallel(
        src_raw, tgt_raw, [tokenize(s) for s in src_raw], [tokenize(t) for t in tgt_raw]
    )
