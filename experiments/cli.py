"""How the studies' commands start and end.

Start: `hold_output_folder` takes the output folder's lock before any work, so that a
second run into the same folder stops at once and writes nothing, and runs the work or,
with `--repair-records`, repairs the folder's record files instead.

End: `run_command` turns bad input (a malformed value, a missing file, a locked folder, a
bad or duplicated record line, ...) into a one-line error and exit code 2 (the traceback
with ADVJAX_DEBUG=1), and Ctrl-C into exit code 130 with a line giving the command that
resumes.
"""

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from advjax.data import DataError
from advjax.io import CheckpointError, LockedError, OutputLock
from advjax.records import REPAIR_FLAG, RecordError, RecordRepair, repair_records

USER_ERRORS = (
    ValueError,
    TypeError,
    OSError,
    DataError,
    CheckpointError,
    LockedError,
    RecordError,
)
DEBUG_ENV = "ADVJAX_DEBUG"

T = TypeVar("T")


def exit_status(main: Callable[[], object], prog: str) -> int:
    """Run `main()` as the command `prog`; return its exit status, printing the reason of a
    failure as one line on stderr.

    Returns:
      `main()`'s result when it is an int (a command's own status), else 0; 2 for bad
      input (USER_ERRORS; re-raised when $ADVJAX_DEBUG is set); 130 for Ctrl-C.
    """
    try:
        result = main()
    except KeyboardInterrupt:
        again = shlex.join(["python", "-m", prog, *sys.argv[1:]])
        print(
            f"\n{prog}: interrupted; everything finished so far is kept, and the same command "
            f"resumes from there: {again}",
            file=sys.stderr,
        )
        return 130
    except USER_ERRORS as error:
        if os.environ.get(DEBUG_ENV):
            raise
        message = " ".join(str(error).split())
        print(f"{prog}: error: {message} ({DEBUG_ENV}=1 shows the traceback)", file=sys.stderr)
        return 2
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def run_command(main: Callable[[], object], prog: str) -> None:
    """Run `main()` as the command `prog` and exit with its status (see `exit_status`)."""
    sys.exit(exit_status(main, prog))


def add_repair_flag(parser: argparse.ArgumentParser) -> None:
    """The `--repair-records` flag (`args.repair_records`), with the same help everywhere."""
    parser.add_argument(
        REPAIR_FLAG,
        dest="repair_records",
        action="store_true",
        help="repair the output folder's record files and exit: keep the first copy of each "
        "record, append the other copies to records.duplicates.jsonl beside the file",
    )


def repair_record_files(paths: Iterable[str | os.PathLike]) -> list[RecordRepair]:
    """`advjax.records.repair_records` on each existing file of `paths`; one line per file."""
    paths = [Path(p) for p in paths]
    found = [p for p in paths if p.is_file()]
    if not found:
        print(f"no record file to repair: {', '.join(map(str, paths))} absent")
    repairs = [repair_records(p) for p in found]
    for repair in repairs:
        print(repair.describe())
    return repairs


def hold_output_folder(
    out: str | os.PathLike,
    work: Callable[[], T],
    *,
    records: Iterable[str | os.PathLike] = (),
    repair: bool = False,
) -> T | list[RecordRepair]:
    """Run `work()` as the only writer of `out`, or with `repair` repair its record files.

    The lock comes first: a second run into `out` raises before it reads data or writes
    a file, and a new holder clears the temporaries of killed atomic writes.

    Args:
      out: the output folder.
      work: the command's work, run while the lock is held.
      records: the folder's record files (those that `--repair-records` repairs).
      repair: repair `records` instead of running `work`.

    Returns:
      `work()`'s result, or the `RecordRepair`s.

    Raises:
      LockedError: another live process holds `out`.
    """
    with OutputLock(out):
        return repair_record_files(records) if repair else work()


REPOSITORY = Path(__file__).resolve().parents[1]


def results_folder(out: str | os.PathLike) -> str:
    """The folder a run writes into, as its results.json names it: relative to the repository
    root when inside it (e.g. `results/cifar10/default`), absolute otherwise."""
    path = Path(out).resolve()
    return path.relative_to(REPOSITORY).as_posix() if path.is_relative_to(REPOSITORY) else str(path)
