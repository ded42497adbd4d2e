"""The offline bundle (ADR 0060, 0061): package subtraction, manifest, archive, parts, install — no network.

Wheels here are small real wheel files written by the test (fixtures for the logic, not mocks of an engine);
pip, bash, tar and lzma are the real ones.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tools import bundle as B

REPO = Path(__file__).resolve().parents[2]
HERE_PY = "{}.{}".format(*sys.version_info[:2])


# ----------------------------------------------------------------------------------------------- fixtures


def make_wheel(
    directory: Path,
    name: str,
    version: str,
    requires: tuple[str, ...] = (),
    tag: str = "py3-none-any",
    modules: dict[str, str] | None = None,
    meta_name: str | None = None,
    compress: int = zipfile.ZIP_DEFLATED,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """A real wheel (METADATA, WHEEL, RECORD), written independently of tools/bundle.py's own writer."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {f"{m.replace('.', '/')}/__init__.py": src for m, src in (modules or {}).items()}
    files.update(extra_files or {})
    meta = f"Metadata-Version: 2.1\nName: {meta_name or name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files[f"{info}/METADATA"] = meta
    files[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"
    record = ""
    for rel, content in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(content.encode()).digest()).rstrip(b"=").decode()
        record += f"{rel},sha256={digest},{len(content.encode())}\n"
    record += f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record
    path = Path(directory) / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compress) as z:
        for rel, content in files.items():
            z.writestr(zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0)), content, compress_type=compress)
    return path


def resolved(name: str, version: str, *requires: str, filename: str | None = None) -> B.Resolved:
    fn = filename or f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    return B.Resolved(B.canonical(name), version, f"https://example.invalid/{fn}", "0" * 64, tuple(requires))


TARGET = B.Target("3.12", B.manylinux_platforms("2.39"))


def root(name: str, group: str = "g", **kw) -> B.Root:
    return B.Root(B.canonical(name), group, **kw)


# ----------------------------------------------------------------------------------------------- node list


def test_parse_installed_formats():
    text = """# a comment
torch==2.11.0+cu130
Typing_Extensions==4.12.2   # trailing comment
nvidia-cublas
mypkg @ file:///tmp/mypkg-1.0-py3-none-any.whl
-e git+https://example.invalid/x.git#egg=x
pip===24.0

"""
    got = B.parse_installed(text)
    assert got == {
        "torch": "2.11.0+cu130",
        "typing-extensions": "4.12.2",
        "nvidia-cublas": None,
        "mypkg": None,
        "pip": "24.0",
    }


@pytest.mark.parametrize("line", ["torch==not a version", "bad name==1.0", "torch==1.0\ntorch==2.0"])
def test_parse_installed_refuses_bad_lines(line):
    with pytest.raises(B.BundleError) as e:
        B.parse_installed(line)
    assert "installed line" in e.value.key


def test_shipped_image_list_has_the_node_stack():
    installed = B.parse_installed((REPO / "bundle" / "gpu-image-packages.txt").read_text())
    # Read off the node by `pip list --format=freeze` (2026-11-30): pip's metadata says 2.11.0, the
    # module says 2.11.0+cu130; either way it is the 2.11.0 that vLLM 0.26.0 pins.
    assert installed["torch"].split("+")[0] == "2.11.0"
    assert installed["numpy"] == "2.5.2"
    assert installed["transformers"] == "5.17.0"
    assert "nvidia-ml-py" in installed and "nvidia-nccl-cu13" in installed
    assert "vllm" not in installed and "pydantic" not in installed  # what the bundle must bring


# ----------------------------------------------------------------------------------------------- small pieces


@pytest.mark.parametrize("text,expected", [("60M", 60 * 1024**2), ("1.5K", 1536), ("2G", 2 * 1024**3), (" 7 ", 7)])
def test_parse_size(text, expected):
    assert B.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "60X", "-1M", "0"])
def test_parse_size_refuses(text):
    with pytest.raises(B.BundleError):
        B.parse_size(text)


def test_part_size_follows_the_repository():
    # small repository: the 60 MiB ceiling; this session's 10.2 MB repository: what is left of 64 MiB less 2 MiB
    assert B.part_size_for_repo(1_000_000) == 60 * B.MIB
    size = B.part_size_for_repo(10_221_970)
    assert size == B.DEVICE_CALL_LIMIT - 10_221_970 - 2 * B.MIB
    assert size + 10_221_970 + 2 * B.MIB <= B.DEVICE_CALL_LIMIT
    with pytest.raises(B.BundleError, match="auto"):
        B.part_size_for_repo(60 * B.MIB)


def test_parts_needed_turns_at_the_largest_repository():
    # 2026-12-02d: 7 parts of 43,190,622 B; the same archive beside 22.95 MB of repository would take 8
    largest = B.largest_repo_for(302_335_320, 7)
    assert largest == 64 * B.MIB - 2 * B.MIB - 43_190_760
    assert B.parts_needed(302_335_320, largest) == 7
    assert B.parts_needed(302_335_320, largest + 1) == 8
    assert B.parts_needed(302_335_320, 22_950_856) == 8


def test_repository_leaves_room_for_bundle_parts():
    # Committed evidence travels with every device call, and each bundle part takes a call of its own (~5 s):
    # the repository must leave the vLLM bundle in as few parts as today (ADR 0213; slim new evidence, ADR 0212).
    repo_bytes = B.travel_size(REPO)
    largest = B.largest_repo_for(B.VLLM_BUNDLE_BYTES, B.VLLM_BUNDLE_PARTS)
    assert B.parts_needed(B.VLLM_BUNDLE_BYTES, repo_bytes) <= B.VLLM_BUNDLE_PARTS, (
        f"the repository travels at {repo_bytes:,} bytes, {repo_bytes - largest:,} over the {largest:,} that leave "
        f"the vLLM bundle in {B.VLLM_BUNDLE_PARTS} parts: run `python tools/slim_evidence.py <new evidence>`"
    )
    assert B.parts_needed(B.SGLANG_BUNDLE_BYTES, repo_bytes) <= B.SGLANG_BUNDLE_PARTS, (
        f"the repository travels at {repo_bytes:,} bytes: the SGLang bundle needs more than its "
        f"{B.SGLANG_BUNDLE_PARTS} parts (cut it again: make_bundle.py --out .bundle/sglang --split-only --split …)"
    )


def test_manylinux_platforms():
    tags = B.manylinux_platforms("2.17")
    assert tags[0] == "manylinux_2_17_x86_64"
    assert "manylinux2014_x86_64" in tags and "manylinux1_x86_64" in tags
    assert not any(t.startswith("manylinux_2_18") for t in tags)
    assert len(B.manylinux_platforms("2.39")) == 35 + 3
    with pytest.raises(B.BundleError):
        B.manylinux_platforms("3.1")


def test_wheel_min_glibc():
    assert B.wheel_min_glibc("x-1-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl") == (2, 27)
    assert B.wheel_min_glibc("x-1-cp38-abi3-manylinux2014_x86_64.whl") == (2, 17)
    assert B.wheel_min_glibc("x-1-py3-none-any.whl") is None


def test_protected_patterns():
    for name in ["torch", "nvidia-cublas", "nvidia_nccl_cu13", "cuda-bindings", "numpy", "triton"]:
        assert B.is_protected(name)
    for name in ["vllm", "pydantic", "nvidia-ml-py", "nvidia_ml_py", "torchmetrics", "numpyro"]:
        assert not B.is_protected(name)
    # cutlass-dsl is shipped like anything else (ADR 0193); its sibling the SASS disassembler stays protected
    for name in ["nvidia-cutlass-dsl", "nvidia_cutlass_dsl_libs_base", "nvidia-cutlass-dsl-libs-cu13"]:
        assert not B.is_protected(name)
    assert B.is_protected("nvidia-cuda-nvdisasm")


# ----------------------------------------------------------------------------------------------- profiles


def test_real_profiles_file():
    profiles = B.load_profiles(REPO / "bundle" / "profiles.toml")
    vllm = profiles["vllm"]
    assert vllm.top == ("vllm==0.26.0",)
    assert vllm.deps == "keep"
    assert {"xgrammar", "llguidance", "lm-format-enforcer", "outlines-core"} <= vllm.keep
    # what vLLM 0.26.0 evaluates at import under Python 3.12 (backend_xgrammar / backend_guidance / lmfe)
    assert set(vllm.standins["xgrammar"]) >= {"GrammarMatcher", "CompiledGrammar"}
    assert set(vllm.standins["llguidance"]) >= {"LLMatcher", "LLTokenizer"}
    assert vllm.exports["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    # ADR 0193: what gemma-4 (FlashAttention 4) and the Gated-DeltaNet family import at start
    assert {"compressed-tensors", "nvidia-cutlass-dsl", "quack-kernels"} <= vllm.keep
    assert vllm.node_provides["cuda-python"][0] == "13.3.1"
    assert profiles["pipeline"].local_top
    with pytest.raises(B.BundleError, match="cannot share"):
        B.select_profiles(profiles, ["vllm", "sglang"])
    with pytest.raises(B.BundleError, match="unknown"):
        B.select_profiles(profiles, ["nope"])


@pytest.mark.parametrize(
    "d,key",
    [
        ({"top": ["a"], "colour": 1}, "profiles.p"),
        ({"top": ["a"], "deps": "keep"}, "profiles.p.keep"),
        ({"top": ["a"], "deps": "some"}, "profiles.p.deps"),
        ({"top": ["a"], "override": {"b": "c>=1"}}, "profiles.p.override.b"),
        ({"top": ["a"], "exports": {"BAD-NAME": "1"}}, "profiles.p.exports.BAD-NAME"),
        ({"top": []}, "profiles.p.top"),
        ({"top": ["a"], "node_provides": {"cuda-python": "13.3.1"}}, "profiles.p.node_provides.cuda-python"),
        ({"top": ["a"], "node_provides": {"cuda-python": ["13.x", "why"]}}, "profiles.p.node_provides.cuda-python"),
    ],
)
def test_profile_validation_names_the_key(d, key):
    with pytest.raises(B.BundleError) as e:
        B.profile_from_dict("p", d)
    assert e.value.key == key


def test_resolution_inputs_keep_override_strip_add_force():
    p = B.profile_from_dict(
        "p",
        {
            "top": ["eng==1.0"],
            "deps": "keep",
            "keep": ["fastapi", "llg", "typing-extensions"],
            "strip_extras": ["fastapi"],
            "override": {"llg": "llg>=1.6"},
            "add": ["uvicorn"],
            "force": {"typing-extensions": "typing-extensions>=4.16"},
        },
    )
    top_requires = [
        "fastapi[standard]<0.137,>=0.133",
        "llg<1.8,>=1.7",
        "typing_extensions>=4.10",
        "huge-kernels==1.0",  # not kept
        "winonly; sys_platform == 'win32'",
        "extra-only; extra == 'audio'",
    ]
    got = B.resolution_inputs(p, top_requires, TARGET)
    assert got == sorted(["fastapi<0.137,>=0.133", "llg>=1.6", "typing-extensions>=4.16", "uvicorn"])
    bad = B.profile_from_dict("q", {"top": ["eng==1.0"], "deps": "keep", "keep": ["not-declared"]})
    with pytest.raises(B.BundleError, match="not declared"):
        B.resolution_inputs(bad, top_requires, TARGET)


def test_resolution_inputs_all_deps_profile_takes_add_and_force():
    p = B.profile_from_dict(
        "p", {"top": ["specjoule"], "deps": "all", "add": ["aiohttp>=3.9"], "force": {"six": "six>=1.17"}}
    )
    assert B.resolution_inputs(p, (), TARGET) == ["aiohttp>=3.9", "six>=1.17"]  # the local top enters as a wheel
    q = B.profile_from_dict("q", {"top": ["polars>=1"], "deps": "all", "add": ["altair"]})
    assert B.resolution_inputs(q, (), TARGET) == ["altair", "polars>=1"]


# ----------------------------------------------------------------------------------------------- planning


def test_plan_add_kept_on_the_node_when_it_satisfies_and_shipped_when_not():
    res = {r.name: r for r in [resolved("app", "1"), resolved("aiohttp", "3.15", "yarl>=1"), resolved("yarl", "1.2")]}
    p = B.profile_from_dict("pipeline", {"top": ["app==1"], "add": ["aiohttp>=3.9"]})
    roots = B.roots_for(p, {"app==1": "app"})
    kept = B.plan(roots, res, {"aiohttp": "3.14.3"}, TARGET)
    assert kept.problems == []
    assert kept.decisions["aiohttp"].action == "node" and kept.decisions["aiohttp"].version == "3.14.3"
    assert "yarl" not in kept.decisions  # a node package is not expanded
    old = B.plan(roots, res, {"aiohttp": "3.8.0"}, TARGET)
    assert old.decisions["aiohttp"].action == "ship" and old.decisions["yarl"].action == "ship"
    # the node's copy stood in for it in the resolution (pin "all"): kept, not "absent from the resolution"
    stub_only = {k: v for k, v in res.items() if k != "aiohttp"}
    assert B.plan(roots, stub_only, {"aiohttp": "3.14.3"}, TARGET).problems == []
    assert any("absent" in x for x in B.plan(roots, stub_only, {"aiohttp": "3.8.0"}, TARGET).problems)


def test_plan_forced_package_absent_from_the_resolution_is_a_problem_not_a_crash():
    res = {r.name: r for r in [resolved("app", "1", "typing-extensions>=4")]}
    p = B.plan([root("app"), root("typing-extensions", forced=True)], res, {"typing-extensions": "4.16.0"}, TARGET)
    assert any(x.startswith("typing-extensions: forced, but the resolution kept the node's copy") for x in p.problems)


def test_plan_subtracts_node_packages_and_never_ships_torch():
    res = {
        r.name: r
        for r in [
            resolved("eng", "1.0", "torch==2.11.0", "pydantic>=2", "transformers>=5", "nvidia-cublas", "huge==1"),
            resolved("pydantic", "2.14", "pydantic-core==2.50", "typing-extensions>=4.14"),
            resolved("pydantic-core", "2.50", "typing-extensions>=4.14"),
            resolved("typing-extensions", "4.16.0"),
            # resolved newer than the node's, with a dependency the node's version does not need
            resolved("transformers", "5.20", "huggingface-hub>=2"),
            resolved("huggingface-hub", "2.0"),
        ]
    }
    installed = {
        "torch": "2.11.0+cu130",
        "transformers": "5.17.0",
        "typing-extensions": "4.12.0",
        "nvidia-cublas": None,
        "huggingface-hub": "1.33.0",
    }
    keep = frozenset({"pydantic", "torch", "transformers", "nvidia-cublas"})
    p = B.plan([root("eng", keep=keep)], res, installed, TARGET)
    assert p.problems == []
    d = p.decisions
    assert d["eng"].action == "ship" and "--no-deps" in d["eng"].reason
    assert d["torch"].action == "node" and d["torch"].version == "2.11.0+cu130"
    assert d["nvidia-cublas"].action == "node"  # CUDA wheels on the node are never downloaded again
    assert d["transformers"].action == "node"  # 5.17.0 satisfies >=5 ...
    assert "huggingface-hub" not in d  # ... and is not expanded: its needs are the node's business
    assert d["pydantic"].action == "ship" and d["pydantic-core"].action == "ship"
    assert d["typing-extensions"].action == "ship"  # node 4.12 < 4.14: shadowed
    assert "shadows the node's 4.12.0" in d["typing-extensions"].reason
    assert d["huge"].action == "omit" and d["huge"].version is None
    assert {x.name for x in p.of("ship")} == {"eng", "pydantic", "pydantic-core", "typing-extensions"}


def test_plan_refuses_protected_conflicts():
    res = {r.name: r for r in [resolved("eng", "1.0", "torch==2.12.0", "nvidia-nccl-cu13==2.28.9")]}
    p = B.plan([root("eng")], res, {"torch": "2.11.0+cu130"}, TARGET)
    text = "\n".join(p.problems)
    assert "torch: protected; node has 2.11.0+cu130 but eng needs ==2.12.0" in text
    assert "nvidia-nccl-cu13: protected (torch/CUDA stack) but not on the node" in text
    assert not any(d.name in ("torch", "nvidia-nccl-cu13") for d in p.of("ship"))
    # asking for torch itself is refused too
    p2 = B.plan([root("torch")], {"torch": resolved("torch", "2.11.0")}, {}, TARGET)
    assert any("never shipped" in x for x in p2.problems)


def test_plan_keep_top_declared_only_requirements():
    res = {r.name: r for r in [resolved("eng", "1.0", "numba==0.65.0", "flashinfer==0.6", "msgspec")]}
    res["msgspec"] = resolved("msgspec", "0.23")
    p = B.plan([root("eng", keep=frozenset({"msgspec"}))], res, {"numba": "0.61.0"}, TARGET)
    assert p.decisions["numba"].action == "node"  # declared, not kept, on the node: left alone ...
    assert any("numba: node has 0.61.0 but eng needs ==0.65.0" in w for w in p.warnings)  # ... and said
    assert p.decisions["flashinfer"].action == "omit"
    assert p.decisions["msgspec"].action == "ship"
    assert p.problems == []


def test_plan_forced_and_unknown_versions():
    res = {
        r.name: r
        for r in [
            resolved("app", "1", "typing-extensions>=4.16", "anyio>=4.10", "psutil>=5", "click"),
            resolved("typing-extensions", "4.16.0"),
            resolved("anyio", "4.11"),
            resolved("psutil", "7.0", filename="psutil-7.0-cp312-cp312-manylinux_2_17_x86_64.whl"),
            resolved("click", "8.2"),
        ]
    }
    installed = {"typing-extensions": None, "anyio": None, "psutil": None, "click": None}
    roots = [root("app"), root("typing-extensions", forced=True)]
    trust = B.plan(roots, res, installed, TARGET, unknown="trust")
    assert trust.decisions["typing-extensions"].action == "ship"  # forced although the node has it
    assert trust.decisions["anyio"].action == "node"
    assert any(w.startswith("anyio: node version unknown") for w in trust.warnings)
    assert not any(w.startswith("click") for w in trust.warnings)  # no specifier: nothing to warn about
    pure = B.plan(roots, res, installed, TARGET, unknown="ship-pure")
    assert pure.decisions["anyio"].action == "ship"  # pure Python with a specifier on it
    assert pure.decisions["psutil"].action == "node"  # compiled: the node's build is kept
    assert pure.decisions["click"].action == "node"  # unconstrained
    with pytest.raises(B.BundleError):
        B.plan(roots, res, installed, TARGET, unknown="maybe")


def test_plan_follows_extras_and_markers():
    res = {
        r.name: r
        for r in [
            resolved("app", "1", "web[fast]>=1", "winlib; sys_platform == 'win32'", "old; python_version < '3.10'"),
            resolved("web", "1.2", "core", "speedup; extra == 'fast'", "docs; extra == 'docs'"),
            resolved("core", "1"),
            resolved("speedup", "2"),
        ]
    }
    p = B.plan([root("app")], res, {}, TARGET)
    assert {d.name for d in p.of("ship")} == {"app", "web", "core", "speedup"}
    assert p.problems == []


def test_plan_profile_omit_and_no_deps():
    res = {
        r.name: r
        for r in [
            resolved("app", "1", "polars>=1", "kernels"),
            resolved("polars", "2.1", "polars-runtime==2.1"),
            resolved("polars-runtime", "2.1"),
            resolved("kernels", "0.6", "cuda-tile>=1", "tiny"),
            resolved("tiny", "1"),
        ]
    }
    roots = [root("app"), root("kernels", keep=frozenset(), role="no-deps")]
    p = B.plan(roots, res, {}, TARGET, omit={"polars": "analysis only"})
    assert p.problems == []
    assert p.decisions["polars"].action == "omit" and "analysis only" in p.decisions["polars"].reason
    assert "polars-runtime" not in p.decisions  # not reached through an omitted package
    assert p.decisions["kernels"].action == "ship" and "not followed" in p.decisions["kernels"].reason
    assert p.decisions["cuda-tile"].action == "omit"  # a protected name, but only declared: no refusal
    assert p.decisions["tiny"].action == "omit"
    # without no-deps, kernels' protected requirement that the node lacks is a refusal
    p2 = B.plan([root("app")], res, {}, TARGET, omit={"polars": "x"})
    assert any(x.startswith("cuda-tile: protected") for x in p2.problems)


def test_plan_flags_a_shipped_version_outside_a_requirement():
    res = {r.name: r for r in [resolved("app", "1", "lib>=2"), resolved("lib", "1.5")]}
    p = B.plan([root("app")], res, {}, TARGET)
    assert p.problems == ["lib 1.5: app needs >=2"]


# ----------------------------------------------------------------------------------------------- real pip


def test_resolve_with_node_stubs_offline(tmp_path):
    """A real pip resolution (no index: local wheels only); the node's torch enters as a stub and stays there."""
    links = tmp_path / "links"
    links.mkdir()
    make_wheel(links, "app", "1.0", ("lib>=1", "torch==2.11.0"))
    make_wheel(links, "lib", "1.0")
    make_wheel(links, "lib", "2.0", ("helper",))
    make_wheel(links, "helper", "0.1")
    installed = {"torch": "2.11.0+cu130", "helper": "0.1", "mystery": None}
    target = B.Target(HERE_PY, ("manylinux_2_17_x86_64",))
    got = B.resolve(
        ["app"],
        target,
        installed,
        pin="all",
        workdir=tmp_path / "work",
        find_links=[links],
        pip_options=["--no-index"],
    )
    assert got["lib"].version == "2.0"
    assert got["torch"].version == "2.11.0+cu130" and "/stubs/" in got["torch"].url
    assert got["helper"].version == "0.1+node"  # pinned to the node's version
    assert got["app"].sha256 and len(got["app"].sha256) == 64
    plan = B.plan([root("app")], {k: v for k, v in got.items() if "/stubs/" not in v.url}, installed, target)
    assert {d.name for d in plan.of("ship")} == {"app", "lib"}
    assert plan.decisions["torch"].action == "node" and plan.decisions["helper"].action == "node"
    with pytest.raises(B.BundleError, match="could not resolve"):
        B.resolve(
            ["app", "lib<1"],
            target,
            installed,
            pin="all",
            workdir=tmp_path / "w2",
            find_links=[links],
            pip_options=["--no-index"],
        )


def test_pip_report_parsing():
    report = {
        "install": [
            {
                "metadata": {"name": "Foo_Bar", "version": "1.0", "requires_dist": ["baz>=1"]},
                "download_info": {
                    "url": "https://x.invalid/foo_bar-1.0-py3-none-any.whl",
                    "archive_info": {"hash": "sha256=" + "a" * 64},
                },
            }
        ]
    }
    got = B.parse_pip_report(report)
    assert got["foo-bar"].sha256 == "a" * 64 and got["foo-bar"].requires == ("baz>=1",)
    assert got["foo-bar"].filename == "foo_bar-1.0-py3-none-any.whl" and got["foo-bar"].pure


def test_lock_roundtrip(tmp_path):
    res = {r.name: r for r in [resolved("app", "1", "lib"), resolved("lib", "2.0")]}
    res["app"] = B.Resolved("app", "1", "file:///x/app-1-py3-none-any.whl", "b" * 64, ("lib",))
    plan = B.plan([root("app", group="pipeline")], res, {}, TARGET)
    lock = tmp_path / "lock.txt"
    B.write_lock(lock, plan, res, header=["test"], built_here=["app"])
    text = lock.read_text()
    assert "lib==2.0 --hash=sha256:" + "0" * 64 in text
    assert B.read_lock(lock) == [("app", "1", None, "pipeline"), ("lib", "2.0", "0" * 64, "pipeline")]
    res["app"] = B.Resolved("app", "1", "file:///x/app-1-py3-none-any.whl", "b" * 64, ("lib", "huge==1"))
    plan = B.plan([root("app", group="pipeline", keep=frozenset({"lib"}))], res, {}, TARGET)
    B.write_lock(lock, plan, res, header=["test"], built_here=["app"])
    assert [(o["name"], o["group"]) for o in B.read_lock_omitted(lock)] == [("huge", "pipeline")]
    lock.write_text("lib>=2\n")
    with pytest.raises(B.BundleError):
        B.read_lock(lock)


# ----------------------------------------------------------------------------------------------- wheels


def test_read_wheel_checks_metadata(tmp_path):
    w = make_wheel(tmp_path, "good-pkg", "1.2.3", ("dep>=1",))
    meta = B.read_wheel(w)
    assert (meta.name, meta.version, meta.requires, meta.pure) == ("good-pkg", "1.2.3", ("dep>=1",), True)
    liar = make_wheel(tmp_path, "liar", "1.0", meta_name="someone-else")
    with pytest.raises(B.BundleError, match="METADATA says"):
        B.read_wheel(liar)


def test_repack_stored_keeps_members_and_record(tmp_path):
    src = make_wheel(tmp_path, "pkg", "1.0", modules={"pkg": "X = 1\n" * 200})
    dst = tmp_path / "out" / src.name
    dst.parent.mkdir()
    B.repack_stored(src, dst)
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst) as b:
        assert a.namelist() == b.namelist()
        assert all(a.read(n) == b.read(n) for n in a.namelist())
        assert all(i.compress_type == zipfile.ZIP_STORED for i in b.infolist())
    assert dst.stat().st_size > src.stat().st_size  # really uncompressed
    # deterministic: the same input gives the same bytes
    dst2 = tmp_path / "again.whl"
    B.repack_stored(src, dst2)
    assert B.sha256_file(dst) == B.sha256_file(dst2)
    # a member that does not match its RECORD hash is refused
    bad = tmp_path / "bad" / src.name
    bad.parent.mkdir()
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(bad, "w") as b:
        for i in a.infolist():
            data = a.read(i)
            b.writestr(i, b"tampered" if i.filename == "pkg/__init__.py" else data)
    with pytest.raises(B.BundleError, match="RECORD"):
        B.repack_stored(bad, tmp_path / "x.whl")


def test_check_unique_refuses_two_versions():
    e = B.Entry("a", "1", "a-1.whl", "0", 1, "0", 1, "g", "r")
    B.check_unique([e, B.Entry("b", "1", "b-1.whl", "0", 1, "0", 1, "g", "r")])
    with pytest.raises(B.BundleError, match="twice"):
        B.check_unique([e, B.Entry("a", "2", "a-2.whl", "0", 1, "0", 1, "g", "r")])


# ----------------------------------------------------------------------------------------------- stand-ins


def test_standin_module_behaviour(tmp_path):
    (tmp_path / "fakegrammar").mkdir()
    (tmp_path / "fakegrammar" / "__init__.py").write_text(B.standin_source("fakegrammar", ["Matcher", "Compiled"]))
    code = """
import fakegrammar as g
assert g.SPECJOULE_STANDIN is True
ann = g.Matcher | None          # what a signature annotation evaluates at import
try:
    g.Matcher()
except RuntimeError as e:
    assert "stand-in" in str(e)
else:
    raise SystemExit("instantiating a stand-in must fail")
try:
    from fakegrammar import Missing
except ImportError:
    pass
else:
    raise SystemExit("a name the stand-in does not define must not import")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# ----------------------------------------------------------------------------------------------- bundle on disk


def _stage_fake_bundle(tmp_path: Path) -> tuple[Path, dict]:
    """Three wheels (one whose import fails), staged like make_bundle.py stages the real one."""
    src = tmp_path / "src"
    src.mkdir()
    w1 = make_wheel(src, "goodmod", "1.0", modules={"goodmod": "Matcher = object\nVERSION = '1.0'\n" + "#pad\n" * 3000})
    w2 = make_wheel(src, "fakegrammar", "0.2", modules={"fakegrammar": "raise ImportError('needs a GPU build')\n"})
    w3 = make_wheel(src, "helper", "3.1", ("goodmod>=1",), modules={"helper": "import goodmod\n"})
    profile = B.profile_from_dict(
        "demo",
        {
            "top": ["goodmod==1.0"],
            "exports": {"DEMO_FLAG": "1", "QUOTED": "it's"},
            "standins": {"fakegrammar": ["Matcher"], "goodmod": ["Matcher"]},
        },
    )
    stage = tmp_path / "out" / B.BUNDLE_NAME
    target = B.Target(HERE_PY, ("manylinux_2_17_x86_64",))
    manifest = B.stage_bundle(
        stage,
        [(w1, "demo", "top"), (w2, "demo", "dep"), (w3, "demo", "dep")],
        target=target,
        profiles=[profile],
        plan_=None,
        install_script=REPO / "bundle" / "install.sh",
    )
    return stage, manifest


def test_stage_manifest(tmp_path):
    stage, manifest = _stage_fake_bundle(tmp_path)
    names = [w["name"] for w in manifest["wheels"]]
    assert names == sorted(names) == ["fakegrammar", "goodmod", "helper"]
    for w in manifest["wheels"]:
        path = stage / "wheels" / w["filename"]
        assert B.sha256_file(path) == w["sha256"] and path.stat().st_size == w["size"]
        assert w["source_size"] < w["size"]  # stored in the bundle, deflated as served
    assert manifest["total_wheel_bytes"] == sum(w["size"] for w in manifest["wheels"])
    assert manifest["python_version"] == HERE_PY and manifest["exports"]["DEMO_FLAG"] == "1"
    assert (stage / "standins" / "fakegrammar" / "__init__.py").exists()
    sums = B.read_sums((stage / "SHA256SUMS").read_text())
    assert set(sums) == {f"wheels/{w['filename']}" for w in manifest["wheels"]}
    assert "export QUOTED='it'\\''s'" in (stage / "exports.sh").read_text()


def test_archive_split_join_roundtrip(tmp_path):
    stage, _ = _stage_fake_bundle(tmp_path)
    a1 = B.make_archive(stage, tmp_path / "a1.tar.xz", preset=6, use_xz_cli=False)
    a2 = B.make_archive(stage, tmp_path / "a2.tar.xz", preset=6, use_xz_cli=False)
    assert B.sha256_file(a1) == B.sha256_file(a2)  # deterministic
    size = a1.stat().st_size
    part_size = 4096
    parts = B.split_file(a1, part_size, tmp_path / "parts")
    assert len(parts) == -(-size // part_size) >= 2
    assert all(p.size <= part_size for p in parts) and sum(p.size for p in parts) == size
    assert all(p.size == parts[0].size for p in parts[:-1])  # balanced: one size, the last a little smaller
    assert parts[0].size - parts[-1].size < len(parts)
    unbalanced = B.split_file(a1, part_size, tmp_path / "parts-u", balanced=False)
    assert [p.size for p in unbalanced[:-1]] == [part_size] * (len(unbalanced) - 1)
    for p in parts:  # each folder carries its own part and both sum files
        d = tmp_path / "parts" / B.part_dir_name(p.index)
        assert sorted(x.name for x in d.iterdir()) == sorted([p.filename, "PARTS.sha256", "ARCHIVE.sha256"])
    flat = tmp_path / "flat"
    flat.mkdir()
    for d in (tmp_path / "parts").iterdir():
        for f in d.iterdir():
            shutil.copy2(f, flat / f.name)
    joined = B.join_parts(flat, tmp_path / "joined.tar.xz")
    assert B.sha256_file(joined) == B.sha256_file(a1)
    # a damaged part is named
    victim = flat / parts[1].filename
    data = bytearray(victim.read_bytes())
    data[10] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(B.BundleError) as e:
        B.join_parts(flat, tmp_path / "j2")
    assert e.value.value == [parts[1].filename]
    victim.unlink()
    with pytest.raises(B.BundleError, match="missing 1 of"):
        B.join_parts(flat, tmp_path / "j3")


def test_exact_multiple_makes_no_empty_part(tmp_path):
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(8192))
    assert [p.size for p in B.split_file(f, 4096, tmp_path / "p")] == [4096, 4096]
    assert [p.size for p in B.split_file(f, 4096, tmp_path / "q", balanced=False)] == [4096, 4096]
    assert [p.size for p in B.split_file(f, 5000, tmp_path / "r")] == [4096, 4096]  # balanced: 2 × 4096
    assert [p.size for p in B.split_file(f, 5000, tmp_path / "s", balanced=False)] == [5000, 3192]


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def test_device_scripts_receive_install_and_standins(tmp_path):
    """receive_part.sh per part, then install_bundle.sh: reassemble, verify, pip install --no-index --no-deps,
    stand-in only for the package that fails to import, environment file, image freeze to $OUT."""
    stage, _ = _stage_fake_bundle(tmp_path)
    archive = B.make_archive(stage, tmp_path / B.ARCHIVE_NAME, preset=6, use_xz_cli=False)
    parts = B.split_file(archive, 2048, tmp_path / "parts")
    assert len(parts) >= 2
    dest = tmp_path / "bundle-parts"
    receive = REPO / "tools" / "device" / "receive_part.sh"
    install = REPO / "tools" / "device" / "install_bundle.sh"
    site, out = tmp_path / "site", tmp_path / "OUT"
    out.mkdir()
    env = {
        **os.environ,
        "OUT": str(out),
        "CHECK": "0",
        "PYTHON": sys.executable,
        "UNPACK_DIR": str(tmp_path / "unpacked"),
    }

    # before every part has arrived, the install refuses and names what is missing
    r = _run(["bash", str(receive), str(tmp_path / "parts" / "00"), str(dest)])
    assert r.returncode == 0, r.stderr
    assert f"1 of {len(parts)} parts" in r.stdout
    r = _run(["bash", str(install), str(dest), str(site)], env=env)
    assert r.returncode == 3 and parts[1].filename in r.stderr

    for p in parts[1:]:
        r = _run(["bash", str(receive), str(tmp_path / "parts" / B.part_dir_name(p.index)), str(dest)])
        assert r.returncode == 0, r.stderr
    assert f"all {len(parts)} parts" in r.stdout

    r = _run(["bash", str(install), str(dest), str(site)], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "STAND-INS in use (structured output unavailable): fakegrammar" in r.stdout
    # CHECK=0 skips the full check, never the measurement path's import smoke (issue 22)
    assert "MEASUREMENT PATH: OK" in r.stdout
    assert (site / "goodmod" / "__init__.py").exists() and (site / "helper" / "__init__.py").exists()
    assert (site / "_specjoule_standins" / "fakegrammar").is_dir()
    assert not (site / "_specjoule_standins" / "goodmod").exists()  # the real one imports: no stand-in
    assert (out / "gpu-image-freeze.txt").read_text().count("==") > 5
    probe = (
        "import fakegrammar, goodmod, helper, os; "
        "print(fakegrammar.SPECJOULE_STANDIN, goodmod.VERSION, os.environ['DEMO_FLAG'], os.environ['QUOTED'])"
    )
    r = _run(["bash", "-c", f'source {site}/specjoule-env.sh && {sys.executable} -c "{probe}"'])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "1.0", "1", "it's"]

    # a module of the measurement path that does not import fails the install, CHECK=0 or not (fault injector)
    blocked = {
        **env,
        "PYTHONPATH": str(REPO / "tests" / "fault_injectors" / "no_analysis_extra"),
        "FAULT_BLOCK_MODULES": "specjoule.runner",
        "UNPACK_DIR": str(tmp_path / "unpacked2"),
    }
    r = _run(["bash", str(install), str(dest), str(tmp_path / "site2")], env=blocked)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "MEASUREMENT PATH: FAILED: no module named 'specjoule.runner'" in r.stderr
    assert "install_bundle: the measurement path does not import with" in r.stderr

    # a part damaged in transfer is refused on arrival
    bad = tmp_path / "badpart"
    shutil.copytree(tmp_path / "parts" / "00", bad)
    f = bad / parts[0].filename
    f.write_bytes(b"x" + f.read_bytes()[1:])
    r = _run(["bash", str(receive), str(bad), str(tmp_path / "dest2")])
    assert r.returncode == 1 and "sha256 does not match" in r.stderr
    assert not (tmp_path / "dest2" / parts[0].filename).exists()


def test_install_sh_puts_pth_directories_on_pythonpath(tmp_path):
    """A wheel that makes its package importable through a .pth file, as nvidia-cutlass-dsl does for `cutlass`
    (ADR 0193): a PYTHONPATH directory is no site directory, so install.sh must carry the .pth's entry itself."""
    src = tmp_path / "src"
    src.mkdir()
    pth = "import sys, os, nvdemo_dsl; sys.path.insert(0, os.path.join(nvdemo_dsl.__path__[0], 'dsl_packages'))\n"
    wheel = make_wheel(
        src,
        "nvdemo-dsl",
        "4.6.0",
        modules={"nvdemo_dsl": "", "nvdemo_dsl.dsl_packages.cutdemo": "KIND = 'dsl'\n"},
        extra_files={"nvdemo_dsl_packages.pth": pth},
    )
    profile = B.profile_from_dict("demo", {"top": ["nvdemo-dsl==4.6.0"]})
    stage = tmp_path / "out" / B.BUNDLE_NAME
    B.stage_bundle(
        stage,
        [(wheel, "demo", "top")],
        target=B.Target(HERE_PY, ("manylinux_2_17_x86_64",)),
        profiles=[profile],
        plan_=None,
        install_script=REPO / "bundle" / "install.sh",
    )
    site = tmp_path / "site"
    r = _run(
        ["bash", str(stage / "install.sh"), "--target", str(site), "--python", sys.executable, "--standins", "off"]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    probe = [sys.executable, "-c", "import cutdemo; print(cutdemo.KIND, cutdemo.__file__)"]
    # without the .pth's entry the package is not importable from the target alone
    bare = _run(probe, env={**os.environ, "PYTHONPATH": str(site)})
    assert bare.returncode != 0 and "No module named 'cutdemo'" in bare.stderr
    r = _run(["bash", "-c", f'source {site}/specjoule-env.sh && {" ".join(probe[:2])} "{probe[2]}"'])
    assert r.returncode == 0, r.stderr
    kind, path = r.stdout.split()
    assert kind == "dsl" and Path(path).is_relative_to(site / "nvdemo_dsl" / "dsl_packages")


def test_install_sh_refuses_other_python(tmp_path):
    stage, manifest = _stage_fake_bundle(tmp_path)
    m = json.loads((stage / "manifest.json").read_text())
    m["python_version"] = "3.99"
    (stage / "manifest.json").write_text(json.dumps(m))
    r = _run(["bash", str(stage / "install.sh"), "--target", str(tmp_path / "site"), "--python", sys.executable])
    assert r.returncode == 1 and "this bundle is for Python 3.99" in r.stderr
    r = _run(["bash", str(stage / "install.sh"), "--standins", "sometimes"])
    assert r.returncode == 2


def test_check_env_reports_pipeline_imports(tmp_path):
    """tools/device/check_env.py on this machine's environment: a pipeline-only manifest."""
    manifest = {
        "profiles": ["pipeline"],
        "wheels": [{"name": "snakemake", "version": "x", "group": "pipeline"}],
        "tops": [{"name": "specjoule", "keep": None, "override": {}}],
    }
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    r = _run(
        [
            sys.executable,
            str(REPO / "tools" / "device" / "check_env.py"),
            "--manifest",
            str(tmp_path / "m.json"),
            "--out",
            str(tmp_path / "o"),
        ],
        env={**os.environ, "SPECJOULE_REPO": str(REPO)},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "BUNDLE CHECK: OK" in r.stdout
    result = json.loads((tmp_path / "o" / "bundle-check.json").read_text())
    rows = {x["module"]: x for x in result["imports"]}
    assert rows["snakemake"]["ok"] and rows["snakemake"]["critical"]
    assert rows["specjoule"]["from"] == "checkout"


def test_check_env_fails_when_a_bundled_package_is_imported_from_the_node(tmp_path):
    """The bundle ships pyyaml here, but the site it names is empty: the node's (this venv's) yaml is imported."""
    manifest = {
        "profiles": ["pipeline"],
        "wheels": [{"name": "pyyaml", "version": "x", "group": "pipeline"}],
        "tops": [{"name": "specjoule", "keep": None, "override": {}}],
    }
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    (tmp_path / "site").mkdir()
    env = {**os.environ, "SPECJOULE_REPO": str(REPO), "SPECJOULE_SITE": str(tmp_path / "site")}
    r = _run(
        [
            sys.executable,
            str(REPO / "tools" / "device" / "check_env.py"),
            "--manifest",
            str(tmp_path / "m.json"),
            "--out",
            str(tmp_path / "o"),
        ],
        env=env,
    )
    assert r.returncode == 1 and "BUNDLE CHECK: FAILED: yaml bundled, but the node's copy is imported" in r.stdout
    result = json.loads((tmp_path / "o" / "bundle-check.json").read_text())
    assert result["bundled_but_node_imported"] == ["yaml"]
    assert result["failed"] == []


def test_travel_size_counts_tracked_and_untracked_not_ignored(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    _run(["git", "init", "-q", str(repo)])
    (repo / ".gitignore").write_text("/.bundle/\n")
    (repo / "a.txt").write_bytes(b"x" * 100)
    (repo / "b.txt").write_bytes(b"y" * 50)
    (repo / ".bundle").mkdir()
    (repo / ".bundle" / "big").write_bytes(b"z" * 10_000)
    (repo / "c.bin").write_bytes(b"w" * (B.TRAVEL_BLOCK + 1))
    # counted as the device tool counts them: each file in whole 4 KiB blocks (a.txt, b.txt, .gitignore one block
    # each, c.bin two); the ignored .bundle/ not at all
    assert B.travel_size(repo) == 3 * 4096 + 2 * 4096


def test_requirement_objects_are_what_pip_sees():
    # the stripped form keeps the specifier and drops the extras and the evaluated marker
    assert B._without(Requirement("fastapi[standard]<0.137,>=0.133; python_version>'3'"), strip_extras=True) == (
        "fastapi<0.137,>=0.133"
    )
    assert B._without(Requirement("uvicorn[standard]>=0.30"), strip_extras=False) == "uvicorn[standard]>=0.30"


def test_parts_are_named_as_a_device_call_carries_them():
    """`make_bundle.py --out .bundle/sglang` printed `carry .bundle/parts/NN` (the vLLM bundle's folders) for the
    SGLang parts (2026-12-02b); the carry path is the part folder's own, relative to the repository."""
    from tools import make_bundle

    assert make_bundle._carry_path(REPO / ".bundle" / "sglang" / "parts" / "03") == ".bundle/sglang/parts/03"
    assert make_bundle._carry_path(REPO / ".bundle" / "parts" / "00") == ".bundle/parts/00"
    assert make_bundle._carry_path(Path("/elsewhere/parts/01")) == "/elsewhere/parts/01"
