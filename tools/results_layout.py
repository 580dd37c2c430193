"""Where each study's and profile's runs lie under results/, and the check that moving them
changed no number.

    python -m tools.results_layout check --before REV   # every file of REV's results/ at its
                                                         # new place, equal to REV's, paths aside
    python -m tools.results_layout stamp                # each results.json names its folder

`LAYOUT` maps the folders of the layout before (results/ holding the default profile's run,
results/research/ and results/research/robust_cnn/) to where they lie now; `REMOVED` lists what
was dropped on purpose, and why. `check` reads REV's files with git and compares each with the
file at its new place: JSON as data, with every path in REV's strings mapped to the new layout
and the `folder` field left aside; text with the same mapping; everything else byte for byte.
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

REPOSITORY = Path(__file__).resolve().parents[1]
STUDY_FOLDERS = ("cifar10", "text", "seq2seq")
"""results/'s top level: one folder per study."""
LAYOUT = (
    ("results/research/robust_cnn", "results/cifar10/robust_cnn"),
    ("results/research", "results/cifar10/research"),
    ("results/text", "results/text"),
    ("results/seq2seq", "results/seq2seq"),
    ("results", "results/cifar10/default"),
)
"""(before, now) folder prefixes, the first that matches a path wins."""
REMOVED = {
    "results/research/robust_cnn/levers/training_progress/pgd_silu_scratch_flip_ema.msgpack": (
        "the stopped flip-only run's unfinished weights; its training log is in "
        "levers/lever_curves/lever_curves.json"
    ),
}
"""Files of the earlier layout dropped on purpose, each with the reason."""
_TEXT = (".md", ".txt", ".html", ".jsonl", ".sh", ".csv")
_PATH = re.compile(r"(?<![\w/.])(?:\.\./)*results(?:/[\w.-]+)+/?")


def new_path(path: str) -> str:
    """Where the file or folder `path` (relative to the repository) of the earlier layout lies now."""
    for before, now in LAYOUT:
        if path == before or path.startswith(before + "/"):
            return now + path[len(before) :]
    return path


def _map_paths(text: str) -> str:
    def one(match: re.Match) -> str:
        found = match.group(0)
        ups = found[: len(found) - len(found.lstrip("./"))]
        return ups + new_path(found[len(ups) :].rstrip("/")) + ("/" if found.endswith("/") else "")

    return _PATH.sub(one, text)


def _map_json(obj):
    if isinstance(obj, str):
        return _map_paths(obj)
    if isinstance(obj, list):
        return [_map_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _map_json(v) for k, v in obj.items()}
    return obj


def same_content(before_path: str, before: bytes, now: bytes) -> bool:
    """Whether `now` is `before` (the file at `before_path` in the earlier layout), paths aside:
    the same bytes, or the same data once REV's paths are mapped to the new layout (a file
    written again at its new place) or, for JSON, before (a file only stamped)."""
    if before == now:
        return True
    suffix = PurePosixPath(before_path).suffix
    if suffix == ".json":
        then, current = json.loads(before), json.loads(now)
        if isinstance(current, dict):
            current.pop("folder", None)
        return current in (then, _map_json(then))
    if suffix in _TEXT:
        return now.decode() == _map_paths(before.decode())
    return False


def _git(repository: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repository, check=True, capture_output=True).stdout


def check(before: str, repository: Path = REPOSITORY, log=print) -> int:
    """Compare every file under results/ at revision `before` with the file at its new place
    in `repository`'s working tree; the number of files missing or changed (0: the move
    changed nothing)."""
    listing = _git(repository, "ls-tree", "-r", "--name-only", before, "--", "results")
    files = listing.decode().splitlines()
    equal, bad = 0, 0
    for path in files:
        if path in REMOVED:
            log(f"removed  {path}: {REMOVED[path]}")
            continue
        target = repository / new_path(path)
        if not target.is_file():
            log(f"MISSING  {path} -> {new_path(path)}")
            bad += 1
        elif same_content(path, _git(repository, "show", f"{before}:{path}"), target.read_bytes()):
            equal += 1
        else:
            log(f"CHANGED  {path} -> {new_path(path)}")
            bad += 1
    log(f"{equal} of {len(files)} files of {before}'s results/ equal at their new place "
        f"(paths aside), {len(REMOVED)} removed on purpose, {bad} missing or changed")  # fmt: skip
    return bad


def stamp(repository: Path = REPOSITORY, log=print) -> int:
    """Write into each results.json under `repository`'s results/ the folder it lies in
    (relative to the repository), as the studies now write it themselves; the number of
    files changed."""
    changed = 0
    for path in sorted((repository / "results").rglob("results.json")):
        folder = path.parent.relative_to(repository).as_posix()
        data = json.loads(path.read_text())
        if data.get("folder") == folder:
            continue
        data.pop("folder", None)
        keys = list(data)
        at = keys.index("study") + 1 if "study" in keys else len(keys)
        data = dict([*list(data.items())[:at], ("folder", folder), *list(data.items())[at:]])
        path.write_text(json.dumps(data, indent=2) + "\n")
        log(f"stamped {path.relative_to(repository)}")
        changed += 1
    return changed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="moved files equal to a revision's, paths aside")
    c.add_argument("--before", required=True, help="a git revision with the earlier layout")
    sub.add_parser("stamp", help="write each results.json's folder")
    args = p.parse_args(argv)
    if args.command == "check":
        return 1 if check(args.before) else 0
    stamp()
    return 0


if __name__ == "__main__":
    sys.exit(main())
