"""Loading the sentiment data of the text study: SST-2, AdvGLUE's SST-2 dev part, MR, and
the counter-fitted neighbour and antonym lists.

The data folder comes from a flag or the ``ADVJAX_TEXT_DIR`` environment variable
(`resolve_text_dir`), laid out as in ``shared/data/text`` (see its README.md)::

    glue_sst2/{train,dev}.tsv            header, then ``sentence<TAB>label``
    advglue/dev.json                     {"sst2": [{"idx", "sentence", "label"}, ...], ...}
    mr_polarity/rt-polarity.{pos,neg}    one sentence a line
    synonyms/counterfitted_neighbors.json
    synonyms/counter_fitting_linguistic_constraints/{ppdb,wordnet}_antonyms.txt

Every loader raises `TextDataError` naming the file (and line) on a missing or malformed
file. This module is the I/O side of `advjax_text`; the attack and model modules are pure.
"""

import json
import os
from pathlib import Path
from typing import NamedTuple

from advjax_text.data._env import TEXT_DIR_ENV

SST2_SIZES = {"train": 67349, "dev": 872}
ANTONYM_FILES = ("ppdb_antonyms.txt", "wordnet_antonyms.txt")


class TextDataError(ValueError):
    """A text data file that is missing, unreadable or not in the documented format."""


class LabelledText(NamedTuple):
    """Sentences with integer labels (0 negative, 1 positive), in file order."""

    sentences: list[str]
    labels: list[int]


def resolve_text_dir(text_dir: str | os.PathLike | None = None) -> Path:
    """The text data folder: `text_dir` if given, else ``$ADVJAX_TEXT_DIR``.

    Raises:
      TextDataError: neither is set, or the folder does not exist.
    """
    if text_dir is None:
        text_dir = os.environ.get(TEXT_DIR_ENV)
        if not text_dir:
            raise TextDataError(
                f"no text data folder: pass --text-dir or set ${TEXT_DIR_ENV} "
                "(a folder laid out like shared/data/text)"
            )
    path = Path(text_dir)
    if not path.is_dir():
        raise TextDataError(f"text data folder {str(path)!r} does not exist")
    return path


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TextDataError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise TextDataError(f"{path}: cannot read as UTF-8 text: {error}") from error


def _label(value: str, where: str) -> int:
    if value not in ("0", "1"):
        raise TextDataError(f"{where}: label {value!r} must be 0 or 1")
    return int(value)


def load_sst2(text_dir: str | os.PathLike | None = None, split: str = "dev") -> LabelledText:
    """GLUE SST-2 `split` ("train" or "dev"), sentences stripped of GLUE's trailing space.

    Raises:
      ValueError: unknown split.
      TextDataError: missing file, bad header, a line without one tab, a label not 0/1.

    Example:
      >>> dev = load_sst2(split="dev"); len(dev.sentences)
      872
    """
    if split not in SST2_SIZES:
        raise ValueError(f"split={split!r} must be one of {sorted(SST2_SIZES)}")
    path = resolve_text_dir(text_dir) / "glue_sst2" / f"{split}.tsv"
    lines = _read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    if not lines or lines[0].strip() != "sentence\tlabel":
        raise TextDataError(f"{path}:1: header must be 'sentence<TAB>label'")
    sentences, labels = [], []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.rstrip("\r").split("\t")
        if len(fields) != 2 or not fields[0].strip():
            raise TextDataError(f"{path}:{number}: expected 'sentence<TAB>label', got {line!r}")
        sentences.append(fields[0].strip())
        labels.append(_label(fields[1].strip(), f"{path}:{number}"))
    return LabelledText(sentences, labels)


def load_advglue_sst2(text_dir: str | os.PathLike | None = None) -> LabelledText:
    """The 148 adversarial SST-2 sentences of the AdvGLUE dev set, in file order.

    Raises:
      TextDataError: missing file, not JSON, no "sst2" list, or a malformed item.
    """
    path = resolve_text_dir(text_dir) / "advglue" / "dev.json"
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise TextDataError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from error
    items = data.get("sst2") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise TextDataError(f"{path}: needs a non-empty 'sst2' list")
    sentences, labels = [], []
    for i, item in enumerate(items):
        if not (isinstance(item, dict) and isinstance(item.get("sentence"), str)):
            raise TextDataError(f"{path}: sst2[{i}] must be an object with a 'sentence' string")
        sentences.append(item["sentence"].strip())
        labels.append(_label(str(item.get("label")), f"{path}: sst2[{i}]"))
    return LabelledText(sentences, labels)


def load_mr(text_dir: str | os.PathLike | None = None) -> LabelledText:
    """Pang & Lee MR sentence polarity: the negative lines (label 0), then the positive."""
    folder = resolve_text_dir(text_dir) / "mr_polarity"
    sentences, labels = [], []
    for label, name in ((0, "rt-polarity.neg"), (1, "rt-polarity.pos")):
        lines = [s.strip() for s in _read_text(folder / name).split("\n") if s.strip()]
        if not lines:
            raise TextDataError(f"{folder / name}: no sentences")
        sentences += lines
        labels += [label] * len(lines)
    return LabelledText(sentences, labels)


def load_neighbors(text_dir: str | os.PathLike | None = None) -> dict[str, tuple[str, ...]]:
    """Counter-fitted nearest neighbours: word -> neighbours (lowercase, nearest first).

    Raises:
      TextDataError: missing file, not JSON, or not a mapping of word -> list of words.
    """
    path = resolve_text_dir(text_dir) / "synonyms" / "counterfitted_neighbors.json"
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise TextDataError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from error
    if not isinstance(data, dict):
        raise TextDataError(f"{path}: must be a JSON object word -> [neighbours]")
    out = {}
    for word, neighbors in data.items():
        if not isinstance(neighbors, list) or not all(isinstance(n, str) for n in neighbors):
            raise TextDataError(f"{path}: neighbours of {word!r} must be a list of strings")
        out[word.lower()] = tuple(n.lower() for n in neighbors if n.lower() != word.lower())
    return out


def load_antonyms(text_dir: str | os.PathLike | None = None) -> frozenset[tuple[str, str]]:
    """Symmetric antonym pairs from the PPDB and WordNet lists of counter-fitting.

    Raises:
      TextDataError: a missing file or a line that is not two words.
    """
    folder = resolve_text_dir(text_dir) / "synonyms" / "counter_fitting_linguistic_constraints"
    pairs: set[tuple[str, str]] = set()
    for name in ANTONYM_FILES:
        path = folder / name
        for number, line in enumerate(_read_text(path).split("\n"), start=1):
            words = line.split()
            if not words:
                continue
            if len(words) != 2:
                raise TextDataError(f"{path}:{number}: expected two words, got {line!r}")
            a, b = words[0].lower(), words[1].lower()
            pairs |= {(a, b), (b, a)}
    return frozenset(pairs)
