"""specjoule.env.git_commit: every record names the pipeline commit that measured it."""

from __future__ import annotations

import re

from specjoule import env


def test_commit_from_the_checkout(monkeypatch):
    monkeypatch.delenv("SPECJOULE_GIT_COMMIT", raising=False)
    assert re.fullmatch(r"[0-9a-f]{40}", env.git_commit())


def test_a_commit_named_on_purpose_wins_over_a_checkout(monkeypatch):
    # the GPU machine's copy can carry a stale .git: the variable set by the campaign is the truth
    monkeypatch.setenv("SPECJOULE_GIT_COMMIT", "2595cee")
    assert env.git_commit() == "2595cee"


def test_commit_of_a_copied_tree_comes_from_the_variable(tmp_path, monkeypatch):
    # a working tree copied without .git, as the device tool and tools/device/background.sh make
    monkeypatch.delenv("SPECJOULE_GIT_COMMIT", raising=False)
    assert env.git_commit(tmp_path) == "unknown"
    monkeypatch.setenv("SPECJOULE_GIT_COMMIT", "0700e9c")
    assert env.git_commit(tmp_path) == "0700e9c"
