"""How the studies' commands end: a one-line error and exit code 2 for bad input (the
traceback with ADVJAX_DEBUG=1), and on Ctrl-C a line saying that the same command resumes."""

import os
import sys
from collections.abc import Callable

from advjax.data import DataError
from advjax.io import CheckpointError, LockedError

USER_ERRORS = (ValueError, TypeError, OSError, DataError, CheckpointError, LockedError)


def run_command(main: Callable, prog: str) -> None:
    """Run `main()` as the command `prog` and exit with its status."""
    try:
        main()
    except KeyboardInterrupt:
        print(
            f"\n{prog}: interrupted; everything finished so far is kept, and running the same "
            "command again resumes from there",
            file=sys.stderr,
        )
        sys.exit(130)
    except USER_ERRORS as error:
        if os.environ.get("ADVJAX_DEBUG"):
            raise
        message = " ".join(str(error).split())
        print(f"{prog}: error: {message} (ADVJAX_DEBUG=1 shows the traceback)", file=sys.stderr)
        sys.exit(2)
    sys.exit(0)
