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


def test_imported_version_is_the_copy_this_interpreter_imports(tmp_path, monkeypatch):
    """A copy first on the path shadows the installed one (the offline bundle's transformers over the node's,
    ADR 0183): the version recorded is the shadowing copy's, which installed metadata would not say."""
    from importlib import metadata

    assert env.imported_version("yaml") == metadata.version("pyyaml")
    shadow = tmp_path / "specjoule_shadow_probe"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("__version__ = '5.14.1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert env.imported_version("specjoule_shadow_probe") == "5.14.1"
    assert env.imported_version("specjoule_no_such_module") is None
    assert env.imported_version("os") is None  # a module without __version__: no version, no error
