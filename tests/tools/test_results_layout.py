"""results/ is laid out by study and profile, every results.json names its folder, and the check
that a move changed no number finds a changed number."""

import json
import subprocess
from pathlib import Path

import pytest

from experiments.cli import results_folder
from tools.results_layout import (
    REMOVED,
    REPOSITORY,
    STUDY_FOLDERS,
    check,
    new_path,
    same_content,
    stamp,
)

RESULTS = REPOSITORY / "results"


def test_results_holds_one_folder_per_study_and_an_index():
    assert sorted(p.name for p in RESULTS.iterdir()) == sorted([*STUDY_FOLDERS, "README.md"])
    assert sorted(p.name for p in (RESULTS / "cifar10").iterdir()) == [
        "default",
        "research",
        "robust_cnn",
    ]


def test_every_committed_results_json_names_the_folder_it_lies_in():
    paths = sorted(RESULTS.rglob("results.json"))
    assert len(paths) >= 10
    for path in paths:
        assert json.loads(path.read_text()).get("folder") == results_folder(path.parent), path


def test_the_index_links_every_run_folder():
    index = (RESULTS / "README.md").read_text()
    for path in RESULTS.rglob("results.json"):
        assert f"({path.parent.relative_to(RESULTS).as_posix()}/" in index, path.parent


def test_no_training_progress_and_no_plain_record_file_is_committed():
    assert not list(RESULTS.rglob("training_progress"))
    assert not list(RESULTS.rglob("records.jsonl"))


def test_earlier_paths_map_to_their_study_and_profile_folders():
    assert new_path("results/results.json") == "results/cifar10/default/results.json"
    assert new_path("results/checkpoints/standard.msgpack") == (
        "results/cifar10/default/checkpoints/standard.msgpack"
    )
    assert new_path("results/research/summary.json") == "results/cifar10/research/summary.json"
    assert new_path("results/research/robust_cnn/wide/tables.md") == (
        "results/cifar10/robust_cnn/wide/tables.md"
    )
    assert new_path("results/seq2seq/grid/run.json") == "results/seq2seq/grid/run.json"
    assert new_path("results/text/results.json") == "results/text/results.json"


def test_content_is_the_same_with_paths_mapped_and_differs_on_any_number():
    before = json.dumps({"command": "x --out results/research/robust_cnn/wide", "robust": 353})
    rewritten = {"command": "x --out results/cifar10/robust_cnn/wide", "robust": 353}
    stamped = json.loads(before) | {"folder": "results/cifar10/robust_cnn/wide"}
    path = "results/research/robust_cnn/wide/results.json"
    assert same_content(path, before.encode(), json.dumps(rewritten).encode())
    assert same_content(path, before.encode(), json.dumps(stamped).encode())
    for changed in (rewritten | {"robust": 352}, rewritten | {"command": "x --out results/y"}):
        assert not same_content(path, before.encode(), json.dumps(changed).encode())
    text = b"see [tables](../results/research/tables.md); these results hold"
    moved = b"see [tables](../results/cifar10/research/tables.md); these results hold"
    assert same_content("docs/x.md", text, moved)
    assert not same_content("docs/x.md", text, moved.replace(b"hold", b"fail"))
    assert not same_content("a/b.png", b"\x89PNG1", b"\x89PNG2")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


@pytest.fixture
def moved_repo(tmp_path):
    """A repository whose results/ holds the earlier layout in its first commit, then moved."""
    repo = tmp_path / "repo"
    (repo / "results" / "research" / "robust_cnn").mkdir(parents=True)
    (repo / "results" / "results.json").write_text(json.dumps({"study": "s", "robust": 0}))
    (repo / "results" / "records.jsonl.gz").write_bytes(b"\x1f\x8b binary")
    (repo / "results" / "research" / "results.json").write_text(json.dumps({"robust": 166}))
    (repo / "results" / "research" / "robust_cnn" / "tables.md").write_text(
        "`--out results/research/robust_cnn`: 353 robust\n"
    )
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "earlier layout")
    before = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "results" / "cifar10" / "default").mkdir(parents=True)
    for name in ("results.json", "records.jsonl.gz"):
        (repo / "results" / name).rename(repo / "results" / "cifar10" / "default" / name)
    (repo / "results" / "research" / "robust_cnn").rename(
        repo / "results" / "cifar10" / "robust_cnn"
    )
    (repo / "results" / "research").rename(repo / "results" / "cifar10" / "research")
    tables = repo / "results" / "cifar10" / "robust_cnn" / "tables.md"
    tables.write_text("`--out results/cifar10/robust_cnn`: 353 robust\n")
    return repo, before


def test_a_move_that_keeps_every_number_passes_the_check(moved_repo):
    repo, before = moved_repo
    assert stamp(repo, log=lambda _: None) == 2
    assert json.loads((repo / "results/cifar10/research/results.json").read_text())["folder"] == (
        "results/cifar10/research"
    )
    assert stamp(repo, log=lambda _: None) == 0
    assert check(before, repo, log=lambda _: None) == 0


def test_the_check_finds_a_changed_number_a_changed_byte_and_a_missing_file(moved_repo):
    repo, before = moved_repo
    lines = []
    research = repo / "results/cifar10/research/results.json"
    research.write_text(json.dumps({"robust": 167}))
    (repo / "results/cifar10/default/records.jsonl.gz").write_bytes(b"\x1f\x8b binarY")
    (repo / "results/cifar10/robust_cnn/tables.md").unlink()
    assert check(before, repo, log=lines.append) == 3
    assert sum(line.startswith(("CHANGED", "MISSING")) for line in lines) == 3


def test_removed_files_say_why():
    assert all(path.startswith("results/") and len(why) > 20 for path, why in REMOVED.items())
