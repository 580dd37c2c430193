"""How record files are stored: plain JSON lines, or gzip (`.gz`) with one member per append.

A gzip record file is a concatenation of complete gzip members, each holding whole lines;
`RecordLog` appends one member per batch. A kill during an append leaves a cut-short last
member, which `complete_prefix` stops before, exactly as it stops before a plain file's
line without its newline. Members are written with mtime 0, so the same records give the
same bytes.
"""

import gzip
import os
import zlib
from pathlib import Path


def is_gzip(path: str | os.PathLike) -> bool:
    """Whether `path` names a gzip record file (its name ends in `.gz`)."""
    return Path(path).suffix == ".gz"


def encode(path: str | os.PathLike, lines: bytes) -> bytes:
    """The bytes to append to `path` for `lines` (complete, newline-terminated lines)."""
    return gzip.compress(lines, compresslevel=6, mtime=0) if is_gzip(path) and lines else lines


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a text file written whole (`atomic_write_lines`), without their newlines;
    gunzipped when its name ends in `.gz`.

    Raises:
      FileNotFoundError: no such file.
      EOFError, gzip.BadGzipFile: a `.gz` file cut short or damaged.

    Example:
      >>> rows = [json.loads(line) for line in read_lines("out/records.jsonl.gz")]
    """
    data = Path(path).read_bytes()
    lines = (gzip.decompress(data) if is_gzip(path) else data).decode("utf-8").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def complete_prefix(path: str | os.PathLike, data: bytes) -> tuple[bytes, int]:
    """(complete lines, file offset where they end) of a record file's bytes `data`.

    Everything after the offset is a write cut short by a kill: a plain file's last line
    without its newline, or a gzip file's incomplete last member (and any partial line
    inside a complete member, which `RecordLog` never writes).

    Raises:
      ValueError: a gzip file holding bytes that are no prefix of a gzip member (damage,
        not an interrupted write).
    """
    if not is_gzip(path):
        end = data.rfind(b"\n") + 1
        return data[:end], end
    text, offset = [], 0
    while offset < len(data):
        member = zlib.decompressobj(wbits=31)
        try:
            lines = member.decompress(data[offset:])
        except zlib.error as error:  # a cut-short member is a prefix, never an error
            raise ValueError(f"{path}: byte {offset}: not a gzip member: {error}") from None
        if not member.eof:
            break
        text.append(lines)
        offset = len(data) - len(member.unused_data)
    joined = b"".join(text)
    end = joined.rfind(b"\n") + 1
    return joined[:end], offset
