"""What every command does the same way: one-line errors with exit code 2, and an interrupt
that says how to resume."""

import os
import sys
from collections.abc import Callable

DEBUG_ENV = "ADVJAX_DEBUG"
ERROR_CODE = 2
INTERRUPTED_CODE = 130


def fail(prog: str, error: BaseException | str) -> int:
    """Print `prog: error: MESSAGE` on one line to stderr; return the error exit code."""
    message = " ".join(str(error).split())
    print(f"{prog}: error: {message} ({DEBUG_ENV}=1 shows the traceback)", file=sys.stderr)
    return ERROR_CODE


def run_command(
    prog: str,
    body: Callable[[], int],
    *,
    errors: tuple[type[BaseException], ...] = (ValueError, TypeError, OSError),
    debug: bool = False,
    resume_hint: str | None = None,
) -> int:
    """`body()`'s exit code; an error of a type in `errors` is one line (`fail`), unless
    `debug` or $ADVJAX_DEBUG asks for the traceback; Ctrl-C prints `resume_hint` and exits
    130."""
    try:
        return body()
    except KeyboardInterrupt:
        if resume_hint:
            print(f"\n{prog}: interrupted; {resume_hint}", file=sys.stderr)
        return INTERRUPTED_CODE
    except errors as error:
        if debug or os.environ.get(DEBUG_ENV):
            raise
        return fail(prog, error)
