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


# ------------------------------------------------------------------------------------------------
# the host, beyond its model name (ADR 0254)

# Two processors of a virtualized host as the GPU machines show them: a generic model name, the microarchitecture in
# family/model/stepping (6/143 is Sapphire Rapids, 6/207 Emerald Rapids).
CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 8
microcode\t: 0x2b000603
cpu MHz\t\t: 2000.000
cache size\t: 107520 KB

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 2
microcode\t: 0x1
cache size\t: 266240 KB
"""


def test_cpu_signature_names_the_microarchitecture_behind_a_generic_name():
    sig = env.cpu_signature(CPUINFO)
    assert sig == "GenuineIntel, family/model/stepping 6/143/8, microcode 0x2b000603, cache size 107520 KB"
    # the first processor's block only: "model name" is not taken for "model", nor the second CPU's values
    assert "207" not in sig and "Xeon" not in sig


def test_cpu_signature_says_what_it_lacks_and_is_null_without_any_field():
    assert env.cpu_signature("vendor_id : AuthenticAMD\ncpu family : 25\n") == (
        "AuthenticAMD, family/model/stepping 25/?/?"
    )
    assert env.cpu_signature("processor : 0\nBogoMIPS : 50.00\n") is None
    assert env.cpu_signature("") is None


def test_cpu_signature_of_this_host_is_recorded_by_capture():
    here = env.capture()
    assert here["host_cpu_signature"] == env.cpu_signature()
    with open("/proc/cpuinfo") as fh:
        vendor = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("vendor_id"))
    assert here["host_cpu_signature"].startswith(vendor + ", family/model/stepping ")


def test_host_speed_scales_with_the_work_it_is_given():
    """Millions of iterations per second: twice the iterations take about twice as long, so the rate holds (within
    the noise of a shared 2-core host: a factor 3 either way), and it is a positive finite number."""
    small = env.host_speed(repeats=3, iterations=20_000)
    large = env.host_speed(repeats=3, iterations=80_000)
    assert 0 < small < 1e4 and 0 < large < 1e4
    assert 1 / 3 < large / small < 3


def test_host_speed_refuses_no_work():
    import pytest

    with pytest.raises(ValueError, match=r"repeats 0"):
        env.host_speed(repeats=0)
    with pytest.raises(ValueError, match=r"iterations 0"):
        env.host_speed(iterations=0)


def test_cpu_model_and_signature_read_the_same_first_block():
    assert env.cpu_model(CPUINFO) == "Intel(R) Xeon(R) Processor"
    assert env.cpu_model() == env.capture()["host_cpu_model"]
