"""A minimal progress bar on stderr (no dependency), quiet when disabled."""

import sys
import time
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


class Progress:
    """Counts items of a named phase and redraws one status line on stderr."""

    def __init__(self, total: int, desc: str, enabled: bool = True, min_interval: float = 0.5):
        self.total, self.desc, self.enabled = total, desc, enabled
        self.min_interval = min_interval
        self.count = 0
        self.postfix = ""
        self._start = time.perf_counter()
        self._last = 0.0
        self._tty = sys.stderr.isatty()

    def update(self, n: int = 1, postfix: str | None = None) -> None:
        self.count += n
        if postfix is not None:
            self.postfix = postfix
        now = time.perf_counter()
        if self.enabled and (now - self._last >= self.min_interval or self.count >= self.total):
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = now - self._start
        rate = self.count / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.count) / rate if rate > 0 else float("nan")
        line = (
            f"{self.desc}: {self.count}/{self.total} "
            f"[{elapsed:6.1f}s elapsed, eta {eta:6.1f}s] {self.postfix}"
        )
        if self._tty:
            sys.stderr.write("\r" + line[:160].ljust(160))
            if self.count >= self.total:
                sys.stderr.write("\n")
        elif self.count >= self.total or now - getattr(self, "_last_line", 0.0) >= 15:
            self._last_line = now
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.count < self.total:
            self._draw(time.perf_counter())
            if self._tty:
                sys.stderr.write("\n")


def progress(items: Iterable[T], total: int, desc: str, enabled: bool = True) -> Iterator[T]:
    """Iterate over `items`, showing a progress line for the named phase."""
    bar = Progress(total, desc, enabled)
    try:
        for item in items:
            yield item
            bar.update()
    finally:
        bar.close()
