"""The vllm bundle against what vLLM 0.26.0 declares and what the shipped model families import (ADR 0193).

On 2026-12-02 gemma-4 and the Gated-DeltaNet family failed to start on the H200 because the lock had pruned
compressed-tensors and nvidia-cutlass-dsl as "not on its offline import path". These tests read only files in the
repository (the lock, the node image's package list, the profiles, and the wheel's Requires-Dist and the start
modules stored under tools/tests/data/), so they run without the network and without the 290 MiB wheel.
"""

from __future__ import annotations

import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tools import bundle as B

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
LOCK = REPO / "bundle" / "lock-vllm+pipeline.txt"
REQUIRES_DIST = DATA / "vllm-0.26.0-requires-dist.txt"
START_MODULES = DATA / "vllm-0.26.0-start-modules.toml"
# the GPU node: Linux x86_64, CPython 3.12 (bundle/gpu-image-packages.txt's first line)
NODE = B.Target("3.12", B.manylinux_platforms("2.39", "x86_64"))


def declared_requirements() -> list[Requirement]:
    """vLLM's Requires-Dist that apply on the node without extras."""
    reqs = [Requirement(line) for line in REQUIRES_DIST.read_text().splitlines() if line and not line.startswith("#")]
    return [r for r in reqs if B.requirement_applies(r, NODE.marker_env())]


def shipped(lock: Path) -> dict[str, str]:
    return {name: version for name, version, _, _ in B.read_lock(lock)}


def omitted(lock: Path) -> dict[str, str]:
    return {o["name"]: o["reason"] for o in B.read_lock_omitted(lock)}


def on_node() -> dict[str, str | None]:
    """The image's recorded packages, and what a profile records the node provides in substance."""
    node = B.parse_installed((REPO / "bundle" / "gpu-image-packages.txt").read_text())
    vllm = B.load_profiles(REPO / "bundle" / "profiles.toml")["vllm"]
    return {**{n: v for n, (v, _) in vllm.node_provides.items()}, **node}


def start_modules() -> dict:
    return tomllib.loads(START_MODULES.read_text())


def unaccounted_requirements(lock: Path) -> list[str]:
    """Each declared requirement must be met by the lock or the node at a version it allows, be a recorded
    version deviation, or be one the lock omits on purpose; anything else is named."""
    ship, omit, node = shipped(lock), omitted(lock), on_node()
    deviations = {B.canonical(k) for k in start_modules()["version_deviations"]}
    out = []
    for req in declared_requirements():
        name = B.canonical(req.name)
        version = ship.get(name) or node.get(name)
        if version is not None:
            if not req.specifier.contains(Version(version), prereleases=True) and name not in deviations:
                out.append(f"{req}: {'shipped' if name in ship else 'node has'} {version}")
        elif name in node:
            continue  # on the node, version not recorded: the plan trusts it as well
        elif name not in omit:
            out.append(f"{req}: neither shipped, on the node, nor omitted by the lock")
    return out


def missing_start_modules(lock: Path) -> list[str]:
    """Start modules whose distributions are neither shipped nor on the node, or that the lock omits."""
    present = set(shipped(lock)) | set(on_node())
    omit = omitted(lock)
    out = []
    for module, entry in start_modules()["modules"].items():
        lacking = [d for d in entry["provided_by"] if B.canonical(d) not in present]
        one_of = entry.get("one_of", [])
        if one_of and not any(B.canonical(d) in present for d in one_of):
            lacking.append(" or ".join(one_of))
        pruned = [d for d in entry["provided_by"] if B.canonical(d) in omit]  # one flavour of one_of may be
        if lacking or pruned:
            out.append(
                f"{module} ({', '.join(entry['families'])}): lacks {lacking}"
                + (f"; the lock omits {pruned}: {[omit[B.canonical(d)] for d in pruned]}" if pruned else "")
            )
    return out


# ----------------------------------------------------------------------------------------------- the tests


def test_every_declared_requirement_is_shipped_on_the_node_or_omitted_on_purpose():
    assert declared_requirements(), f"no requirement read from {REQUIRES_DIST}"
    assert unaccounted_requirements(LOCK) == []


def test_start_modules_of_the_shipped_families_are_provided():
    modules = start_modules()["modules"]
    assert {"compressed_tensors", "cutlass"} <= set(modules)
    assert missing_start_modules(LOCK) == []


def test_a_lock_that_omits_a_start_module_is_caught(tmp_path):
    """The 2026-12-02 lock again: compressed-tensors and nvidia-cutlass-dsl back under `# omitted:`."""
    lines = LOCK.read_text().splitlines()
    pruned = {"compressed-tensors", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base"}
    kept = [ln for ln in lines if ln.split("==")[0] not in pruned]
    assert len(kept) == len(lines) - len(pruned), "the lock no longer ships what this test prunes"
    kept += [f"# omitted: {n}  # group=vllm; declared by vllm; not on its offline import path" for n in pruned]
    old = tmp_path / "lock.txt"
    old.write_text("\n".join(kept) + "\n")
    missing = missing_start_modules(old)
    assert any(m.startswith("compressed_tensors ") for m in missing)
    assert any(m.startswith("cutlass ") and "nvidia-cutlass-dsl" in m for m in missing)
    assert not any(m.startswith(("quack ", "einops ")) for m in missing)


def test_a_declared_requirement_nobody_accounts_for_is_named(tmp_path):
    lines = [ln for ln in LOCK.read_text().splitlines() if not ln.startswith("# omitted: tilelang ")]
    lock = tmp_path / "lock.txt"
    lock.write_text("\n".join(lines) + "\n")
    assert unaccounted_requirements(lock) == ["tilelang==0.1.9: neither shipped, on the node, nor omitted by the lock"]


def test_a_version_outside_the_declared_range_is_named_unless_recorded(tmp_path):
    """compressed-tensors at another version than vLLM's ==0.17.0 (no recorded deviation) is named."""
    text = LOCK.read_text()
    assert "\ncompressed-tensors==0.17.0 " in text
    lock = tmp_path / "lock.txt"
    lock.write_text(text.replace("\ncompressed-tensors==0.17.0 ", "\ncompressed-tensors==0.16.0 "))
    assert unaccounted_requirements(lock) == ["compressed-tensors==0.17.0: shipped 0.16.0"]


def test_stored_requirements_are_those_of_the_locked_wheel():
    """The extract names the wheel the lock ships; where that wheel is at hand (a bundle cache), they agree."""
    lock_sha = {name: sha for name, _, sha, _ in B.read_lock(LOCK)}["vllm"]
    assert f"sha256 {lock_sha}" in REQUIRES_DIST.read_text()
    wheels = sorted((REPO / ".bundle" / "cache").glob("vllm-0.26.0-*.whl"))
    if not wheels:
        pytest.skip("no vllm 0.26.0 wheel in .bundle/cache (make_bundle.py puts it there)")
    assert B.sha256_file(wheels[0]) == lock_sha
    with zipfile.ZipFile(wheels[0]) as z:
        meta = z.read("vllm-0.26.0.dist-info/METADATA").decode()
    from_wheel = [ln.removeprefix("Requires-Dist: ") for ln in meta.splitlines() if ln.startswith("Requires-Dist: ")]
    stored = [ln for ln in REQUIRES_DIST.read_text().splitlines() if ln and not ln.startswith("#")]
    assert stored == from_wheel
