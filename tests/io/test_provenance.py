"""git_state reports the commit and sees an edit only where it is asked to look."""

import subprocess

import pytest

from advjax.io import git_state


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    for folder in ("advjax", "results"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.txt").write_text("1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return tmp_path


def test_clean_checkout_is_not_dirty_and_names_its_commit(repo):
    state = git_state(repo / "advjax", ("advjax",))
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert state == {"commit": head, "dirty": False}


def test_an_edit_under_the_paths_is_dirty_even_when_asked_from_a_subfolder(repo):
    (repo / "advjax" / "a.txt").write_text("2\n")
    assert git_state(repo / "results", ("advjax",))["dirty"] is True
    assert git_state(repo)["dirty"] is True


def test_an_edit_outside_the_paths_is_not_dirty(repo):
    (repo / "results" / "a.txt").write_text("2\n")
    assert git_state(repo / "advjax", ("advjax",))["dirty"] is False


def test_outside_a_checkout_both_are_none(tmp_path):
    assert git_state(tmp_path) == {"commit": None, "dirty": None}
