"""Offline bundles of wheels for air-gapped GPU nodes (ADR 0060, 0061).

Many clusters' compute nodes have no network. A node that already has Python, torch and the CUDA wheels can run
an inference engine from a directory of wheels installed with ``pip install --no-index --no-deps --target DIR``.
This module holds the logic that decides *which* wheels, and packs them so that they travel in pieces of a
bounded size:

1. profiles (``bundle/profiles.toml``) name a top-level package and the part of its declared requirements that
   its import path needs on such a node;
2. a real resolution (pip's ``--dry-run --report`` for the node's Python and platform) pins every version, with
   the node's own packages offered to the resolver as dependency-free stub wheels so that it keeps them;
3. :func:`plan` walks the resolved graph from the tops and decides, per package, ``ship`` (not on the node, or
   the node's version violates a requirement), ``node`` (the node has it at a compatible version) or ``omit``
   (declared by a ``--no-deps`` top but not on its import path). Torch, the CUDA wheels and the rest of
   :data:`PROTECTED` are never shipped: the engine must run against the node's own build;
4. wheels are re-zipped uncompressed (:func:`repack_stored`) and the bundle is one deterministic ``tar.xz``:
   LZMA's large window finds the repetition inside CUDA fat binaries that a wheel's per-file deflate cannot
   (vLLM's FA3 library: 153 MB raw, 38 MB deflated, 11 MB xz);
5. :func:`split_file` cuts it into parts of at most ``part_size`` bytes with sha256 sums, and
   :func:`join_parts` checks and reassembles them.

Everything here is pure logic on files; the only process it starts is pip (:func:`resolve`, :func:`download`)
and, where present, ``xz``.
"""

from __future__ import annotations

import base64
import csv
import fnmatch
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

BUNDLE_NAME = "specjoule-bundle"
ARCHIVE_NAME = f"{BUNDLE_NAME}.tar.xz"
MANIFEST_VERSION = 1
MIB = 1024 * 1024
#: What one device call may carry in all (working tree + carried paths), /work/.library/device/README.md.
DEVICE_CALL_LIMIT = 64 * MIB
#: The largest bundle a session carries: vLLM 0.26.0 + the pipeline from ``bundle/lock-vllm+pipeline.txt``
#: (ADR 0193). Rebuilt from the same lock the archive differs by up to tens of kB (2026-12-03e's build: 32,816 B
#: more than 2026-12-02e's), so this is the largest build seen. Update it when the lock changes or a build is larger.
VLLM_BUNDLE_BYTES = 302_387_328  # 2026-12-06i's rebuild from the lock (ADR 0213 addendum 13); 2026-12-06's: 302,383,692
#: The device calls its parts may take (ADR 0213): the repository must leave room for parts this few.
VLLM_BUNDLE_PARTS = 14  # 8 from 2026-12-02e (ADR 0213 addendum 2), 9 from 2026-12-03e (3), 10 from 2026-12-04d (5), 11 from 2026-12-04g (7), 12 from 2026-12-05e (8), 10 from 2026-12-05g (9: packed runs, ADR 0246), 11 from 2026-12-06e (12), 12 from 2026-12-06i (13), 13 from 2026-12-07f (15), 14 from 2026-12-07j (16)
#: The SGLang 0.5.17 + pipeline bundle (2026-12-02b's build, `--out .bundle/sglang`) and its parts: 6 until 2026-12-03d,
#: when the repository left 216 KB beside 6 (tools/device/README.md, "What is left").
SGLANG_BUNDLE_BYTES = 248_546_888  # 2026-12-07's rebuild from the lock, the largest seen (ADR 0213 addendum 14; 2026-12-05h's: 248,533,688)
SGLANG_BUNDLE_PARTS = 12  # 7 until 2026-12-04b (ADR 0213 addendum 4), 8 until 2026-12-04f (6), 9 until 2026-12-05e (8), 10 until 2026-12-05g (9), 8 until 2026-12-06d (11), 9 until 2026-12-06i (13), 10 until 2026-12-07f (15), 11 until 2026-12-07j (16)

#: Packages a bundle never ships, whatever a requirement says: the engine must run against the node's own torch,
#: CUDA libraries and array stack (shadowing torch 2.11.0+cu130 with a registry build, or numpy under a torch
#: built against another, breaks at import or, worse, at the first kernel).
PROTECTED: tuple[str, ...] = (
    "torch",
    "torchvision",
    "torchaudio",
    "triton",
    "numpy",
    "nvidia-*",
    "cuda-*",
    "cupy-*",
    "jax",
    "jaxlib",
    "jax-cuda*",
)

_PROFILE_KEYS = {
    "description",
    "top",
    "deps",
    "keep",
    "strip_extras",
    "add",
    "override",
    "force",
    "exports",
    "standins",
    "conflicts",
    "build",
    "no_deps",
    "omit",
    "node_provides",
}


class BundleError(ValueError):
    """Bad input to the bundle builder: names the key, the value and why."""

    def __init__(self, key: str, value: Any, reason: str) -> None:
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"{key}={value!r}: {reason}")


def canonical(name: str) -> str:
    return str(canonicalize_name(name))


def parse_size(text: str | int) -> int:
    """``"60M"`` → 60 MiB in bytes. Suffixes K, M, G are binary (KiB, MiB, GiB); a bare number is bytes."""
    if isinstance(text, int):
        size = text
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
        if not m:
            raise BundleError("size", text, "expected a number with an optional K, M or G suffix (binary units)")
        size = int(float(m.group(1)) * {"": 1, "K": 1024, "M": MIB, "G": 1024 * MIB}[m.group(2).upper()])
    if size <= 0:
        raise BundleError("size", text, "must be positive")
    return size


def sha256_file(path: Path, chunk: int = 4 * MIB) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


#: Names the patterns above catch that are not the node's CUDA stack (torch's libraries, the driver's bindings):
#: shipped like anything else. nvidia-ml-py is plain Python; cutlass-dsl is a kernel compiler that vLLM's
#: FlashAttention 4 imports (ADR 0193), that no node image carries and that torch does not depend on.
NOT_PROTECTED: frozenset[str] = frozenset(
    {
        "nvidia-ml-py",
        "nvidia-cutlass-dsl",
        "nvidia-cutlass-dsl-libs-base",
        "nvidia-cutlass-dsl-libs-core",
        "nvidia-cutlass-dsl-libs-cu12",
        "nvidia-cutlass-dsl-libs-cu13",
    }
)


def is_protected(name: str, patterns: Sequence[str] = PROTECTED) -> bool:
    n = canonical(name)
    return n not in NOT_PROTECTED and any(fnmatch.fnmatchcase(n, p) for p in patterns)


# --------------------------------------------------------------------------------------------- node packages


def parse_installed(text: str) -> dict[str, str | None]:
    """Parse ``pip list --format=freeze`` output (or a hand-written list) into name → version.

    Accepts ``name==version``, ``name===version``, ``name @ url`` (version unknown), and a bare ``name`` (installed,
    version not recorded). Comments, blank lines and ``-e`` lines are skipped. The same name twice with different
    versions is an error: a node has one.
    """
    out: dict[str, str | None] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith(("-e ", "--")):
            continue
        if " @ " in line:
            name, version = line.split(" @ ", 1)[0].strip(), None
        elif "==" in line:
            name, _, version = line.partition("===") if "===" in line else line.partition("==")
            name, version = name.strip(), version.strip()
        else:
            name, version = line, None
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise BundleError(f"installed line {lineno}", raw, "expected `name==version` or `name`")
        if version is not None:
            try:
                Version(version)
            except InvalidVersion:
                raise BundleError(f"installed line {lineno}", raw, "not a valid version") from None
        key = canonical(name)
        if key in out and out[key] is not None and version is not None and out[key] != version:
            raise BundleError(f"installed line {lineno}", raw, f"{key} already listed as {out[key]}")
        if key not in out or out[key] is None:
            out[key] = version
    return out


def stub_version(version: str) -> str:
    """A version only a stub can have: the node's own, with a local label the registry never serves."""
    return version if "+" in version else f"{version}+node"


def write_stub_wheel(directory: Path, name: str, version: str) -> Path:
    """A dependency-free wheel that stands for a package the node already has, for the resolver only.

    It is offered with ``--find-links`` and pinned with a constraint, so the resolver treats the node's version as
    given (torch 2.11.0+cu130 is on no public index, and its registry twin would drag in the CUDA wheels).
    Stubs never reach a bundle: :func:`plan` keeps every node package on the node.
    """
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    path = Path(directory) / f"{dist}-{version}-py3-none-any.whl"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        "Summary: resolver stub for a package already on the node (specjoule bundle)\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: specjoule-bundle-stub\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    _write_wheel(path, files)
    return path


def _write_wheel(path: Path, files: Mapping[str, str | bytes]) -> None:
    """Write a valid wheel (with RECORD) from ``relpath → content``; used for stubs and stand-ins."""
    info = next(p.split("/")[0] for p in files if p.split("/")[0].endswith(".dist-info"))
    rows = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            zi = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{rel},sha256={digest},{len(data)}\n")
        rows.append(f"{info}/RECORD,,\n")
        zi = zipfile.ZipInfo(f"{info}/RECORD", date_time=(1980, 1, 1, 0, 0, 0))
        z.writestr(zi, "".join(rows))


# --------------------------------------------------------------------------------------------- target


def manylinux_platforms(glibc: str = "2.39", arch: str = "x86_64") -> tuple[str, ...]:
    """Every manylinux tag a node with this glibc accepts, newest first (pip matches each exactly)."""
    major, minor = (int(x) for x in glibc.split("."))
    if major != 2 or minor < 5:
        raise BundleError("glibc", glibc, "expected 2.N with N >= 5")
    tags = [f"manylinux_2_{n}_{arch}" for n in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{legacy[n]}_{arch}" for n in sorted(legacy, reverse=True) if n <= minor]
    return tuple(tags)


@dataclass(frozen=True)
class Target:
    """The node: Python version and the platform tags its pip accepts."""

    python_version: str = "3.12"
    platforms: tuple[str, ...] = field(default_factory=manylinux_platforms)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"3\.\d+", self.python_version):
            raise BundleError("python_version", self.python_version, "expected 3.N, e.g. 3.12")
        if not self.platforms:
            raise BundleError("platforms", self.platforms, "at least one platform tag")

    @property
    def machine(self) -> str:
        for arch in ("x86_64", "aarch64"):
            if self.platforms[0].endswith(arch):
                return arch
        raise BundleError("platforms", self.platforms[0], "cannot tell the machine (x86_64 or aarch64)")

    def marker_env(self) -> dict[str, str]:
        """PEP 508 marker values for the node (Linux, CPython)."""
        return {
            "python_version": self.python_version,
            "python_full_version": f"{self.python_version}.0",
            "implementation_version": f"{self.python_version}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "platform_system": "Linux",
            "sys_platform": "linux",
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_release": "",
            "platform_version": "",
            "extra": "",
        }

    def pip_args(self) -> list[str]:
        args = ["--only-binary=:all:", "--python-version", self.python_version, "--implementation", "cp"]
        for p in self.platforms:
            args += ["--platform", p]
        return args


# --------------------------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    top: tuple[str, ...]
    deps: str  # "keep" | "all"
    keep: frozenset[str] = frozenset()
    strip_extras: frozenset[str] = frozenset()
    add: tuple[str, ...] = ()
    override: Mapping[str, str] = field(default_factory=dict)
    force: Mapping[str, str] = field(default_factory=dict)
    exports: Mapping[str, str] = field(default_factory=dict)
    standins: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    conflicts: frozenset[str] = frozenset()
    build: tuple[str, ...] = ()  # registry has only a source distribution: built here into a pure wheel
    no_deps: frozenset[str] = frozenset()  # kept packages whose own requirements are not followed (like the top)
    omit: Mapping[str, str] = field(default_factory=dict)  # name -> why it is never shipped by this profile
    # name -> (version, why): a distribution the node lacks by name but has in substance (a metapackage whose parts
    # it has); resolution and plan treat it as the node's at that version
    node_provides: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def local_top(self) -> bool:
        """``top = ["specjoule"]``: this repository, built as a wheel."""
        return self.top == ("specjoule",)


def _req(key: str, text: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise BundleError(key, text, f"not a requirement: {exc}") from None


def profile_from_dict(name: str, d: Mapping[str, Any]) -> Profile:
    unknown = set(d) - _PROFILE_KEYS
    if unknown:
        raise BundleError(f"profiles.{name}", sorted(unknown)[0], f"unknown key; known: {sorted(_PROFILE_KEYS)}")
    top = tuple(d.get("top", ()))
    if not top:
        raise BundleError(f"profiles.{name}.top", top, "at least one top-level requirement")
    deps = d.get("deps", "all")
    if deps not in ("keep", "all"):
        raise BundleError(f"profiles.{name}.deps", deps, "must be 'keep' or 'all'")
    if deps == "keep" and not d.get("keep"):
        raise BundleError(f"profiles.{name}.keep", d.get("keep"), "deps = 'keep' needs a keep list")
    if deps == "keep" and len(top) != 1:
        raise BundleError(f"profiles.{name}.top", top, "deps = 'keep' takes exactly one top package")
    if top != ("specjoule",):
        for t in top:
            _req(f"profiles.{name}.top", t)
    for a in d.get("add", ()):
        _req(f"profiles.{name}.add", a)
    for table in ("override", "force"):
        for k, v in d.get(table, {}).items():
            if canonical(_req(f"profiles.{name}.{table}.{k}", v).name) != canonical(k):
                raise BundleError(f"profiles.{name}.{table}.{k}", v, "requirement names another package")
    for var, val in d.get("exports", {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var) or not isinstance(val, str):
            raise BundleError(f"profiles.{name}.exports.{var}", val, "a shell variable name and a string value")
    node_provides = {}
    for pkg, entry in d.get("node_provides", {}).items():
        key = f"profiles.{name}.node_provides.{pkg}"
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(e, str) and e for e in entry)):
            raise BundleError(key, entry, "a [version, reason] pair of strings")
        try:
            Version(entry[0])
        except InvalidVersion:
            raise BundleError(key, entry[0], "not a version") from None
        node_provides[canonical(pkg)] = (entry[0], entry[1])
    standins = {}
    for mod, attrs in d.get("standins", {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", mod) or not all(str(a).isidentifier() for a in attrs):
            raise BundleError(f"profiles.{name}.standins.{mod}", attrs, "a module name and a list of identifiers")
        standins[mod] = tuple(attrs)
    return Profile(
        name=name,
        description=str(d.get("description", "")),
        top=top,
        deps=deps,
        keep=frozenset(canonical(k) for k in d.get("keep", ())),
        strip_extras=frozenset(canonical(k) for k in d.get("strip_extras", ())),
        add=tuple(d.get("add", ())),
        override={canonical(k): v for k, v in d.get("override", {}).items()},
        force={canonical(k): v for k, v in d.get("force", {}).items()},
        exports=dict(d.get("exports", {})),
        standins=standins,
        conflicts=frozenset(d.get("conflicts", ())),
        build=tuple(canonical(b) for b in d.get("build", ())),
        no_deps=frozenset(canonical(n) for n in d.get("no_deps", ())),
        omit={canonical(k): str(v) for k, v in d.get("omit", {}).items()},
        node_provides=node_provides,
    )


def load_profiles(path: Path) -> dict[str, Profile]:
    import tomllib  # Python >= 3.11; the bundle is built on the developer's side

    with open(path, "rb") as f:
        data = tomllib.load(f)
    return {name: profile_from_dict(name, d) for name, d in data.items()}


def select_profiles(profiles: Mapping[str, Profile], names: Sequence[str]) -> list[Profile]:
    chosen = []
    for n in names:
        if n not in profiles:
            raise BundleError("profile", n, f"unknown; known: {sorted(profiles)}")
        chosen.append(profiles[n])
    for p in chosen:
        clash = p.conflicts & set(names)
        if clash:
            raise BundleError("profile", p.name, f"cannot share a bundle with {sorted(clash)}")
    return chosen


# --------------------------------------------------------------------------------------------- wheels


@dataclass(frozen=True)
class WheelMeta:
    filename: str
    name: str  # canonical
    version: str
    requires: tuple[str, ...]
    pure: bool


def read_wheel(path: Path) -> WheelMeta:
    """Name, version and Requires-Dist of a wheel, read from its METADATA (not trusted from the file name alone)."""
    path = Path(path)
    try:
        fname, fver, _build, tags = parse_wheel_filename(path.name)
    except Exception as exc:  # packaging raises InvalidWheelFilename
        raise BundleError("wheel", path.name, f"not a wheel file name: {exc}") from None
    with zipfile.ZipFile(path) as z:
        metas = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(metas) != 1:
            raise BundleError("wheel", path.name, f"expected one top-level .dist-info/METADATA, found {len(metas)}")
        msg = Parser().parsestr(z.read(metas[0]).decode("utf-8"))
    name, version = canonical(msg["Name"]), msg["Version"]
    if name != canonical(str(fname)) or Version(version) != fver:
        raise BundleError("wheel", path.name, f"METADATA says {name} {version}")
    pure = all(t.abi == "none" and t.platform == "any" for t in tags)
    return WheelMeta(path.name, name, version, tuple(msg.get_all("Requires-Dist") or ()), pure)


def wheel_min_glibc(filename: str) -> tuple[int, int] | None:
    """The oldest glibc a wheel installs on (its most permissive manylinux tag); None for a platform-free wheel."""
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    best = None
    for tag in parse_wheel_filename(filename)[3]:
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag.platform)
        if m:
            need: tuple[int, int] | None = (int(m.group(1)), int(m.group(2)))
        else:
            need = next((v for k, v in legacy.items() if tag.platform.startswith(k + "_")), None)
        if need is not None and (best is None or need < best):
            best = need
    return best


def repack_stored(src: Path, dst: Path, *, verify_record: bool = True) -> None:
    """Re-zip a wheel without compression, byte-for-byte the same members in the same order.

    pip installs a stored wheel like any other and RECORD's hashes are of the members, so they still hold (checked
    here, which also catches a corrupt download). Stored members let the bundle's single LZMA stream compress across
    files and inside fat binaries. ZipInfo fields are copied, so the output depends only on the input.
    """
    with zipfile.ZipFile(src) as zin:
        record_name = next((n for n in zin.namelist() if n.endswith(".dist-info/RECORD") and n.count("/") == 1), None)
        if record_name is None:
            raise BundleError("wheel", Path(src).name, "no .dist-info/RECORD")
        hashes: dict[str, str] = {}
        if verify_record:
            for row in csv.reader(io.StringIO(zin.read(record_name).decode("utf-8"))):
                if len(row) >= 2 and row[1].startswith("sha256="):
                    hashes[row[0]] = row[1][len("sha256=") :]
        tmp = Path(dst).with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zout:
            for info in zin.infolist():
                data = zin.read(info)
                if info.filename in hashes:
                    got = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    if got != hashes[info.filename]:
                        raise BundleError("wheel", Path(src).name, f"{info.filename} does not match its RECORD hash")
                out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                out.external_attr, out.create_system = info.external_attr, info.create_system
                out.compress_type = zipfile.ZIP_STORED
                zout.writestr(out, data)
        os.replace(tmp, dst)


# --------------------------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class Resolved:
    """One distribution the resolver chose."""

    name: str  # canonical
    version: str
    url: str
    sha256: str | None
    requires: tuple[str, ...]

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1].split("#", 1)[0]

    @property
    def pure(self) -> bool:
        try:
            tags = parse_wheel_filename(self.filename)[3]
        except Exception:
            return False
        return all(t.abi == "none" and t.platform == "any" for t in tags)


def parse_pip_report(report: Mapping[str, Any]) -> dict[str, Resolved]:
    """pip's ``--report`` JSON (format 1) → canonical name → :class:`Resolved`."""
    out = {}
    for item in report.get("install", []):
        meta, info = item["metadata"], item.get("download_info", {})
        hashes = info.get("archive_info", {}).get("hashes", {})
        sha = hashes.get("sha256")
        if sha is None and "archive_info" in info and "hash" in info["archive_info"]:
            algo, _, digest = info["archive_info"]["hash"].partition("=")
            sha = digest if algo == "sha256" else None
        r = Resolved(
            name=canonical(meta["name"]),
            version=meta["version"],
            url=info.get("url", ""),
            sha256=sha,
            requires=tuple(meta.get("requires_dist", ()) or ()),
        )
        out[r.name] = r
    return out


def requirement_applies(req: Requirement, env: Mapping[str, str], extras: Iterable[str] = ()) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**env, "extra": e}) for e in ("", *extras))


def resolution_inputs(profile: Profile, top_requires: Sequence[str], target: Target) -> list[str]:
    """What the resolver is asked for on behalf of one profile (tops with ``deps = "keep"`` are not among them:
    they go in with ``--no-deps``)."""
    env = target.marker_env()
    if profile.deps == "all":
        # a normal resolution of the tops, plus what the profile adds or forces (these were once left out, so an
        # `add` of a deps = "all" profile never reached the resolver)
        wanted = {canonical(Requirement(a).name): a for a in profile.add}
        wanted.update(profile.force)
        return sorted([*([] if profile.local_top else profile.top), *wanted.values()])
    wanted = {}
    for text in top_requires:
        req = Requirement(text)
        name = canonical(req.name)
        if name not in profile.keep or not requirement_applies(req, env):
            continue
        wanted[name] = profile.override.get(name) or _without(req, strip_extras=name in profile.strip_extras)
    missing = profile.keep - set(wanted)
    if missing:
        raise BundleError(f"profiles.{profile.name}.keep", sorted(missing), "not declared by the top package")
    for a in profile.add:
        wanted.setdefault(canonical(Requirement(a).name), a)
    for name, text in profile.force.items():
        wanted[name] = text
    return sorted(wanted.values())


def _without(req: Requirement, *, strip_extras: bool) -> str:
    """The requirement as pip should see it once its marker was evaluated (and, if asked, without extras)."""
    extras = "" if strip_extras or not req.extras else "[" + ",".join(sorted(req.extras)) + "]"
    return f"{req.name}{extras}{req.specifier}"


def resolve(
    requirements: Sequence[str],
    target: Target,
    installed: Mapping[str, str | None],
    *,
    pin: str,
    workdir: Path,
    local_wheels: Sequence[Path] = (),
    find_links: Sequence[Path] = (),
    pip: Sequence[str] = (sys.executable, "-m", "pip"),
    pip_options: Sequence[str] = (),
    log: Path | None = None,
) -> dict[str, Resolved]:
    """Ask pip for a full resolution on the node's Python/platform; the node's packages enter as stubs.

    ``pin="all"`` pins every node package whose version is known (the resolver must fit the node as it is);
    ``pin="protected"`` pins only :data:`PROTECTED` ones and lets it pick newer versions of the rest, which
    :func:`plan` then ships where the node's copy is too old.
    """
    if pin not in ("all", "protected"):
        raise BundleError("pin", pin, "must be 'all' or 'protected'")
    stubs = Path(workdir) / "stubs"
    shutil.rmtree(stubs, ignore_errors=True)
    stubs.mkdir(parents=True)
    constraints = []
    for name, version in sorted(installed.items()):
        if version is None or (pin == "protected" and not is_protected(name)):
            continue
        write_stub_wheel(stubs, name, stub_version(version))
        constraints.append(f"{name}=={stub_version(version)}")
    (stubs / "constraints.txt").write_text("\n".join(constraints) + "\n")
    report = Path(workdir) / f"report-{pin}.json"
    cmd = [
        *pip,
        "install",
        "--dry-run",
        "--ignore-installed",
        "--report",
        str(report),
        "--target",
        str(Path(workdir) / "never-written"),
        "--find-links",
        str(stubs),
        "--constraint",
        str(stubs / "constraints.txt"),
        *(a for d in find_links for a in ("--find-links", str(d))),
        *pip_options,
        *target.pip_args(),
        *requirements,
        *(str(w) for w in local_wheels),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if log is not None:
        with open(log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        tail = "\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith("WARNING: Location"))[-3000:]
        raise BundleError("resolution", pin, f"pip could not resolve:\n{tail}")
    return parse_pip_report(json.loads(report.read_text()))


# --------------------------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class Decision:
    name: str
    version: str | None
    action: str  # "ship" | "node" | "omit"
    reason: str
    group: str
    required_by: tuple[str, ...] = ()


@dataclass
class Plan:
    decisions: dict[str, Decision]
    problems: list[str]  # refusals: the bundle would not work
    warnings: list[str]  # worth reading: requirements nobody can check here

    def of(self, action: str) -> list[Decision]:
        return sorted((d for d in self.decisions.values() if d.action == action), key=lambda d: d.name)


@dataclass(frozen=True)
class Root:
    """A package the bundle ships by request: a profile's top, or one of its ``add``/``force`` entries."""

    name: str
    group: str
    keep: frozenset[str] | None = None  # a --no-deps top: only these requirements are followed
    strip_extras: frozenset[str] = frozenset()
    override: Mapping[str, str] = field(default_factory=dict)
    forced: bool = False
    role: str = "top"  # top | add | force | no-deps: said in the decision's reason
    spec: str = ""  # an `add` root's requirement: the node's copy is kept when it satisfies it


def roots_for(profile: Profile, top_names: Mapping[str, str]) -> list[Root]:
    """``top_names``: requirement string of each top → canonical name (the local top maps to ``specjoule``)."""
    roots = []
    for t in profile.top:
        keep = profile.keep if profile.deps == "keep" else None
        roots.append(Root(top_names[t], profile.name, keep, profile.strip_extras, profile.override))
    for a in profile.add:
        roots.append(Root(canonical(Requirement(a).name), profile.name, None, profile.strip_extras, role="add", spec=a))
    for name in profile.force:
        roots.append(Root(name, profile.name, None, profile.strip_extras, forced=True, role="force"))
    for name in sorted(profile.no_deps):
        roots.append(Root(name, profile.name, frozenset(), profile.strip_extras, role="no-deps"))
    return roots


def plan(
    roots: Sequence[Root],
    resolved: Mapping[str, Resolved],
    installed: Mapping[str, str | None],
    target: Target,
    *,
    unknown: str = "trust",
    protected: Sequence[str] = PROTECTED,
    omit: Mapping[str, str] | None = None,
) -> Plan:
    """Decide ship / node / omit for every package reachable from the roots.

    Walks requirement edges from shipped packages only: a package the node keeps is not expanded, since its own
    needs are the node's business. A package is shipped when it is a root, is not on the node, or the node's
    version violates a requirement of something shipped. ``unknown`` says what to do with a node package whose
    version is not recorded and on which a shipped package places a specifier: ``"trust"`` keeps the node's copy
    (and says so in the warnings), ``"ship-pure"`` ships it when it is pure Python.
    """
    if unknown not in ("trust", "ship-pure"):
        raise BundleError("unknown", unknown, "must be 'trust' or 'ship-pure'")
    omit = {canonical(k): v for k, v in (omit or {}).items()}
    env = target.marker_env()
    problems: list[str] = []
    warnings: list[str] = []
    forced = {r.name for r in roots if r.forced}
    # An `add` the node already satisfies stays the node's (the profile adds it so that the import path has it,
    # not to shadow a good copy): it is neither shipped nor expanded, like any node package.
    kept_adds = {
        r.name: r
        for r in roots
        if r.role == "add" and r.name not in forced and _node_satisfies(installed.get(r.name), Requirement(r.spec))
    }
    roots = [r for r in roots if r.name not in kept_adds]
    by_root = {r.name: r for r in roots}
    group_of: dict[str, str] = {}
    for r in roots:
        group_of.setdefault(r.name, r.group)
        if r.name not in resolved:
            problems.append(f"{r.name}: requested by profile {r.group} but absent from the resolution")
        if is_protected(r.name, protected):
            problems.append(f"{r.name}: requested by profile {r.group} but never shipped (protected: node's own)")
    ship: set[str] = {r.name for r in roots if r.name in resolved and not is_protected(r.name, protected)}
    extras: dict[str, set[str]] = {}  # extras asked of each package by shipped ones; only grows

    while True:
        edges: dict[str, list[tuple[str, Requirement]]] = {}
        declared_only: dict[str, list[tuple[str, Requirement]]] = {}
        extras_before = {k: set(v) for k, v in extras.items()}
        for src in sorted(ship):
            root = by_root.get(src)
            for text in resolved[src].requires:
                req = Requirement(text)
                name = canonical(req.name)
                if root is not None and name in root.override:
                    req = Requirement(root.override[name])
                if not requirement_applies(req, env, extras.get(src, ())):
                    continue
                if root is not None and root.keep is not None and name not in root.keep:
                    declared_only.setdefault(name, []).append((src, req))
                    continue
                strip = root.strip_extras if root is not None else frozenset()
                if req.extras and name not in strip:
                    extras.setdefault(name, set()).update(req.extras)
                edges.setdefault(name, []).append((src, req))
                group_of.setdefault(name, group_of.get(src, "?"))
        new_ship = {r.name for r in roots if r.name in resolved and not is_protected(r.name, protected)}
        for name, ins in edges.items():
            if _decide_edge(name, ins, resolved, installed, forced, unknown, protected, omit)[0] == "ship":
                new_ship.add(name)
        if new_ship == ship and extras == extras_before:
            break
        ship = new_ship

    decisions: dict[str, Decision] = {}
    for name in sorted(set(edges) | ship):
        ins = edges.get(name, [])
        by = tuple(sorted({s for s, _ in ins}))
        if name in by_root and name in ship:
            r = by_root[name]
            why = {
                "top": f"top of profile {r.group}",
                "add": f"added by profile {r.group}",
                "force": "forced: node copy too old or unrecorded",
                "no-deps": f"kept by profile {r.group}",
            }[r.role]
            if r.keep is not None:
                why += " (its requirements not followed)" if r.role == "no-deps" else " (installed with --no-deps)"
            decisions[name] = Decision(name, resolved[name].version, "ship", why, r.group, by)
            _check_specs(name, resolved[name].version, ins, problems)
            continue
        action, reason = _decide_edge(name, ins, resolved, installed, forced, unknown, protected, omit)
        group = group_of.get(name, "?")
        if action == "ship":
            version = resolved[name].version
            _check_specs(name, version, ins, problems)
        elif action == "omit":
            version = None
        elif action == "node":
            version = installed.get(name)
            if version is None and _specified(ins):
                warnings.append(f"{name}: node version unknown, trusted; needs {_spec_text(ins)}")
        else:  # a problem
            version = None
            problems.append(f"{name}: {reason} (required by {', '.join(by)})")
        decisions[name] = Decision(name, version, action, reason, group, by)

    for name, r in sorted(kept_adds.items()):
        if name not in decisions:
            decisions[name] = Decision(
                name,
                installed[name],
                "node",
                f"added by profile {r.group}; on the node at a compatible version ({installed[name]})",
                r.group,
            )
    for name, ins in sorted(declared_only.items()):
        if name in decisions:
            continue
        by = tuple(sorted({s for s, _ in ins}))
        if name in installed:
            version = installed[name]
            bad = [f"{s} needs {r.specifier}" for s, r in ins if version and not _contains(r, version)]
            if bad:
                warnings.append(f"{name}: node has {version} but {'; '.join(bad)} (not on the import path; kept)")
            reason = "on the node" + (f" ({version})" if version else " (version not recorded)")
            decisions[name] = Decision(name, version, "node", reason, group_of.get(by[0], "?"), by)
        else:
            decisions[name] = Decision(
                name,
                None,
                "omit",
                f"declared by {', '.join(by)} ({_spec_text(ins) or 'any'}); not on its offline import path",
                group_of.get(by[0], "?"),
                by,
            )
    return Plan(decisions, problems, warnings)


def _node_satisfies(version: str | None, req: Requirement) -> bool:
    return version is not None and _contains(req, version)


def _contains(req: Requirement, version: str) -> bool:
    return req.specifier.contains(Version(version), prereleases=True)


def _specified(ins: Sequence[tuple[str, Requirement]]) -> bool:
    return any(str(r.specifier) for _, r in ins)


def _spec_text(ins: Sequence[tuple[str, Requirement]]) -> str:
    return ", ".join(sorted({f"{r.specifier} ({s})" for s, r in ins if str(r.specifier)}))


def _check_specs(name: str, version: str, ins: Sequence[tuple[str, Requirement]], problems: list[str]) -> None:
    for src, req in ins:
        if not _contains(req, version):
            problems.append(f"{name} {version}: {src} needs {req.specifier}")


def _decide_edge(
    name: str,
    ins: Sequence[tuple[str, Requirement]],
    resolved: Mapping[str, Resolved],
    installed: Mapping[str, str | None],
    forced: set[str],
    unknown: str,
    protected: Sequence[str],
    omit: Mapping[str, str],
) -> tuple[str, str]:
    """One package required by shipped ones → (action, reason); action "problem" for a refusal."""
    if name in omit and name not in installed:
        return "omit", f"omitted by its profile: {omit[name]}"
    if is_protected(name, protected):
        if name not in installed:
            return "problem", "protected (torch/CUDA stack) but not on the node; a bundle never ships it"
        version = installed[name]
        bad = [f"{s} needs {r.specifier}" for s, r in ins if version and not _contains(r, version)]
        if bad:
            return "problem", f"protected; node has {version} but {'; '.join(bad)}"
        return "node", "protected: the node's own build" + (f" ({version})" if version else "")
    if name in forced:
        if name not in resolved:  # the node's stub stood for it (pin "all"): there is no wheel to ship
            return "problem", "forced, but the resolution kept the node's copy (resolve with node pinned: protected)"
        return "ship", "forced: node copy too old or unrecorded"
    if name not in installed:
        if name not in resolved:
            return "problem", "required but absent from the resolution"
        return "ship", "not on the node"
    version = installed[name]
    if version is not None:
        bad = [f"{s} needs {r.specifier}" for s, r in ins if not _contains(r, version)]
        if not bad:
            return "node", f"on the node at a compatible version ({version})"
        if name not in resolved:
            return "problem", f"node has {version} but {'; '.join(bad)}, and the resolution has no other"
        return "ship", f"shadows the node's {version}: {'; '.join(bad)}"
    if unknown == "ship-pure" and _specified(ins) and name in resolved and resolved[name].pure:
        return "ship", f"node version not recorded and {_spec_text(ins)} required; pure Python, shipped"
    return "node", "on the node (version not recorded: trusted)"


# --------------------------------------------------------------------------------------------- lock file


def write_lock(
    path: Path, plan_: Plan, resolved: Mapping[str, Resolved], header: Sequence[str], built_here: Iterable[str] = ()
) -> None:
    """The shipped set as a pip requirements file with hashes (``pip download --no-deps --require-hashes -r``).

    Wheels built here (this repository, source-only requirements) are comment lines: their bytes are not the
    registry's, so ``--from-lock`` builds them again."""
    built = {canonical(b) for b in built_here}
    lines = [f"# {h}" for h in header]
    for d in plan_.of("ship"):
        r = resolved[d.name]
        if d.name in built:
            lines.append(f"# {d.name}=={d.version}  (local: {r.filename}; group={d.group})")
            continue
        if not r.sha256:
            raise BundleError("lock", d.name, "the resolution gave no sha256 for it")
        lines.append(f"{d.name}=={d.version} --hash=sha256:{r.sha256}  # group={d.group}; {d.reason}")
    for d in plan_.of("omit"):
        lines.append(f"# omitted: {d.name}  # group={d.group}; {d.reason}")
    Path(path).write_text("\n".join(lines) + "\n")


def read_lock_omitted(path: Path) -> list[dict[str, Any]]:
    """The ``# omitted:`` lines of a lock file, in the manifest's form (so a bundle built from the lock still
    tells the device check which unmet requirements are on purpose)."""
    out = []
    for raw in Path(path).read_text().splitlines():
        m = re.fullmatch(r"#\s*omitted:\s*([A-Za-z0-9._-]+)\s+#\s*group=([\w-]+);\s*(.*)", raw.strip())
        if m:
            out.append(
                {
                    "name": canonical(m.group(1)),
                    "version": None,
                    "action": "omit",
                    "reason": m.group(3),
                    "group": m.group(2),
                    "required_by": [],
                }
            )
    return out


def read_lock(path: Path) -> list[tuple[str, str, str | None, str]]:
    """Shipped entries of a lock file: (name, version, sha256, group); sha256 is None for a wheel built here."""
    out: list[tuple[str, str, str | None, str]] = []
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        local = re.fullmatch(r"#\s*([A-Za-z0-9._-]+)==(\S+)\s+\(local: \S+; group=([\w-]+)\)", line)
        if local:
            out.append((canonical(local.group(1)), local.group(2), None, local.group(3)))
            continue
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*(?:#\s*group=([\w-]+).*)?", line)
        if not m:
            raise BundleError(f"lock {Path(path).name}", raw, "expected `name==version --hash=sha256:HEX  # group=G`")
        out.append((canonical(m.group(1)), m.group(2), m.group(3), m.group(4) or "?"))
    return out


# --------------------------------------------------------------------------------------------- stand-ins

STANDIN_TEMPLATE = '''"""STAND-IN for `{module}`, written by specjoule's offline bundle (ADR 0061). NOT the real thing.

vLLM imports `{module}` while it defines its structured-output classes, even when no request asks for
structured output. This module exists only so that such an import succeeds on a node where the real wheel does
not import. Anything that actually uses it fails loudly.
"""

SPECJOULE_STANDIN = True
__version__ = "0+specjoule.standin"

_MESSAGE = "`{module}` is a specjoule stand-in: structured output is unavailable in this offline install"


class _StandIn:
    def __init__(self, *args, **kwargs):
        raise RuntimeError(_MESSAGE)

{classes}

def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"{{name!r}}: " + _MESSAGE)
'''


def standin_source(module: str, attrs: Sequence[str]) -> str:
    classes = "\n".join(f"class {a}(_StandIn):\n    pass\n\n" for a in attrs)
    return STANDIN_TEMPLATE.format(module=module, classes=classes)


# --------------------------------------------------------------------------------------------- staging


@dataclass(frozen=True)
class Entry:
    """One wheel of a bundle, as the manifest records it."""

    name: str
    version: str
    filename: str
    sha256: str  # of the (stored) wheel in the bundle
    size: int
    source_sha256: str  # of the wheel as the registry served it (or as built here)
    source_size: int
    group: str
    reason: str


def check_unique(entries: Iterable[Entry]) -> None:
    seen: dict[str, Entry] = {}
    for e in entries:
        if e.name in seen:
            other = seen[e.name]
            raise BundleError("wheels", e.filename, f"{e.name} twice ({other.version}, {e.version}): pip stops on it")
        seen[e.name] = e


def stage_bundle(
    stage: Path,
    wheels: Sequence[tuple[Path, str, str]],
    *,
    target: Target,
    profiles: Sequence[Profile],
    plan_: Plan | None,
    install_script: Path,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the bundle directory: ``wheels/`` (stored), ``standins/``, ``install.sh``, ``exports.sh``,
    ``SHA256SUMS`` and ``manifest.json``. ``wheels``: (downloaded wheel, group, reason). Returns the manifest."""
    stage = Path(stage)
    if stage.exists():
        shutil.rmtree(stage)
    (stage / "wheels").mkdir(parents=True)
    entries: list[Entry] = []
    for src, group, reason in sorted(wheels, key=lambda w: Path(w[0]).name):
        meta = read_wheel(src)
        dst = stage / "wheels" / Path(src).name
        repack_stored(src, dst)
        entries.append(
            Entry(
                meta.name,
                meta.version,
                dst.name,
                sha256_file(dst),
                dst.stat().st_size,
                sha256_file(src),
                Path(src).stat().st_size,
                group,
                reason,
            )
        )
    check_unique(entries)
    standins: dict[str, list[str]] = {}
    for p in profiles:
        for mod, attrs in p.standins.items():
            standins.setdefault(mod, [])
            standins[mod] += [a for a in attrs if a not in standins[mod]]
    for mod, attrs in sorted(standins.items()):
        (stage / "standins" / mod).mkdir(parents=True)
        (stage / "standins" / mod / "__init__.py").write_text(standin_source(mod, attrs))
    exports: dict[str, str] = {}
    for p in profiles:
        for k, v in p.exports.items():
            if k in exports and exports[k] != v:
                raise BundleError(f"profiles.{p.name}.exports.{k}", v, f"another profile sets {exports[k]!r}")
            exports[k] = v
    (stage / "exports.sh").write_text(
        "# environment for the bundled packages (written by make_bundle.py from bundle/profiles.toml)\n"
        + "".join(f"export {k}={_shell_quote(v)}\n" for k, v in sorted(exports.items()))
    )
    shutil.copy2(install_script, stage / "install.sh")
    os.chmod(stage / "install.sh", 0o755)
    (stage / "SHA256SUMS").write_text("".join(f"{e.sha256}  wheels/{e.filename}\n" for e in entries))
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "bundle": BUNDLE_NAME,
        "python_version": target.python_version,
        "platforms": list(target.platforms),
        "profiles": [p.name for p in profiles],
        "exports": exports,
        "standins": dict(sorted(standins.items())),
        "tops": [
            {
                "name": "specjoule" if p.local_top else canonical(Requirement(t).name),
                "profile": p.name,
                "keep": sorted(p.keep) if p.deps == "keep" else None,
                "override": dict(p.override),
            }
            for p in profiles
            for t in p.top
        ],
        "wheels": [e.__dict__ for e in entries],
        "min_glibc": ".".join(
            map(str, max(filter(None, map(wheel_min_glibc, (e.filename for e in entries))), default=(2, 5)))
        ),
        "total_wheel_bytes": sum(e.size for e in entries),
        "total_source_bytes": sum(e.source_size for e in entries),
    }
    if plan_ is not None:
        manifest["node"] = [d.__dict__ for d in plan_.of("node")]
        manifest["omitted"] = [d.__dict__ for d in plan_.of("omit")]
        manifest["warnings"] = plan_.warnings
    manifest.update(extra or {})
    (stage / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    return manifest


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


# --------------------------------------------------------------------------------------------- archive + parts


def make_archive(stage: Path, out: Path, *, preset: int = 9, threads: int = 0, use_xz_cli: bool | None = None) -> Path:
    """A deterministic ``tar.xz`` of the staged directory (sorted members, zero times and owners).

    The ``xz`` program is used where present (multi-threaded); otherwise Python's lzma. Either way the node unpacks
    it with nothing but Python's standard library if it must.
    """
    stage, out = Path(stage), Path(out)
    if use_xz_cli is None:
        use_xz_cli = shutil.which("xz") is not None
    tmp = out.with_name(out.name + ".tmp")
    if use_xz_cli:
        with open(tmp, "wb") as f:
            proc = subprocess.Popen(["xz", f"-{preset}", f"-T{threads}", "-c", "-"], stdin=subprocess.PIPE, stdout=f)
            assert proc.stdin is not None
            try:
                _write_tar(stage, proc.stdin)
            finally:
                proc.stdin.close()
            if proc.wait() != 0:
                raise BundleError("xz", proc.returncode, "compression failed")
    else:
        with lzma.open(tmp, "wb", preset=preset) as f:
            _write_tar(stage, f)
    os.replace(tmp, out)
    return out


def _write_tar(stage: Path, fileobj: Any) -> None:
    def clean(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
        ti.mode = 0o755 if ti.isdir() or ti.name.endswith(".sh") else 0o644
        return ti

    with tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        root = stage.name
        tar.add(stage, arcname=root, recursive=False, filter=clean)
        for dirpath, dirnames, filenames in os.walk(stage):
            dirnames.sort()
            rel = Path(dirpath).relative_to(stage)
            for d in dirnames:
                tar.add(Path(dirpath) / d, arcname=str(Path(root) / rel / d), recursive=False, filter=clean)
            for fn in sorted(filenames):
                tar.add(Path(dirpath) / fn, arcname=str(Path(root) / rel / fn), recursive=False, filter=clean)


@dataclass(frozen=True)
class Part:
    index: int
    filename: str
    size: int
    sha256: str


def part_dir_name(index: int) -> str:
    return f"{index:02d}"


def split_file(path: Path, part_size: int | str, out_dir: Path, *, balanced: bool = True) -> list[Part]:
    """Cut ``path`` into parts of at most ``part_size`` bytes, each in its own folder ``out_dir/NN/`` together
    with ``PARTS.sha256`` (every part's sum, ``sha256sum -c`` format) and ``ARCHIVE.sha256`` (the whole file's),
    so that any one folder, carried alone, can be checked on arrival.

    ``balanced``: as few parts as ``part_size`` allows, all of one size (the last a little smaller), so that
    each leaves as much room as possible for the repository that travels with it."""
    path, out_dir = Path(path), Path(out_dir)
    part_size = parse_size(part_size)
    total = path.stat().st_size
    if balanced and total > 0:
        count = -(-total // part_size)
        part_size = -(-total // count)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    parts: list[Part] = []
    whole = hashlib.sha256()
    with open(path, "rb") as f:
        index = 0
        while True:
            h = hashlib.sha256()
            name = f"{path.name}.part{index:02d}"
            target_dir = out_dir / part_dir_name(index)
            written = 0
            with tempfile.NamedTemporaryFile(dir=out_dir, delete=False) as tmpf:
                while written < part_size:
                    block = f.read(min(4 * MIB, part_size - written))
                    if not block:
                        break
                    tmpf.write(block)
                    h.update(block)
                    whole.update(block)
                    written += len(block)
            if written == 0 and index > 0:
                os.unlink(tmpf.name)
                break
            target_dir.mkdir()
            os.replace(tmpf.name, target_dir / name)
            os.chmod(target_dir / name, 0o644)  # NamedTemporaryFile made it 0600
            parts.append(Part(index, name, written, h.hexdigest()))
            index += 1
            if written < part_size:
                break
    if len(parts) > 100:
        raise BundleError("split", part_size, f"{len(parts)} parts; use a larger part size")
    sums = "".join(f"{p.sha256}  {p.filename}\n" for p in parts)
    archive_sum = f"{whole.hexdigest()}  {path.name}\n"
    for p in parts:
        d = out_dir / part_dir_name(p.index)
        (d / "PARTS.sha256").write_text(sums)
        (d / "ARCHIVE.sha256").write_text(archive_sum)
    return parts


def read_sums(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip():
            digest, _, name = line.partition("  ")
            if not re.fullmatch(r"[0-9a-f]{64}", digest) or not name:
                raise BundleError("sha256 line", line, "expected `HEX  NAME`")
            out[name.strip()] = digest
    return out


def join_parts(parts_dir: Path, out: Path) -> Path:
    """Reassemble the parts in ``parts_dir`` (flat, as the device collects them) after checking every sum;
    name what is missing or corrupt. Returns the verified archive."""
    parts_dir = Path(parts_dir)
    sums_path = parts_dir / "PARTS.sha256"
    if not sums_path.exists():
        raise BundleError("parts", str(parts_dir), "no PARTS.sha256: no part has arrived here")
    sums = read_sums(sums_path.read_text())
    archive_name, archive_sum = next(iter(read_sums((parts_dir / "ARCHIVE.sha256").read_text()).items()))
    missing = [n for n in sums if not (parts_dir / n).exists()]
    if missing:
        raise BundleError("parts", missing, f"missing {len(missing)} of {len(sums)} parts")
    bad = [n for n, s in sums.items() if sha256_file(parts_dir / n) != s]
    if bad:
        raise BundleError("parts", bad, "sha256 mismatch")
    whole = hashlib.sha256()
    tmp = Path(out).with_name(Path(out).name + ".tmp")
    with open(tmp, "wb") as fo:
        for n in sorted(sums):
            with open(parts_dir / n, "rb") as fi:
                while block := fi.read(4 * MIB):
                    fo.write(block)
                    whole.update(block)
    if whole.hexdigest() != archive_sum:
        tmp.unlink()
        raise BundleError("archive", archive_name, "reassembled sha256 does not match ARCHIVE.sha256")
    os.replace(tmp, out)
    return Path(out)


# --------------------------------------------------------------------------------------------- device limits


def part_size_for_repo(
    repo_bytes: int,
    *,
    limit: int = DEVICE_CALL_LIMIT,
    margin: int = 2 * MIB,
    ceiling: int = 60 * MIB,
    floor: int = 8 * MIB,
) -> int:
    """The largest part that still travels beside ``repo_bytes`` of repository in one device call, with ``margin``
    left for the repository to grow (committed evidence) before the parts are used; at most ``ceiling``."""
    room = limit - repo_bytes - margin
    if room < floor:
        raise BundleError(
            "split",
            "auto",
            f"the repository's {repo_bytes:,} bytes leave {max(room, 0):,} bytes of a "
            f"{limit:,}-byte device call for a part; give --split explicitly or carry less",
        )
    return min(ceiling, room)


def parts_needed(bundle_bytes: int, repo_bytes: int) -> int:
    """How many parts (device calls) ``--split auto`` cuts a bundle into beside ``repo_bytes`` of repository."""
    return -(-bundle_bytes // part_size_for_repo(repo_bytes))


def largest_repo_for(bundle_bytes: int, parts: int, *, limit: int = DEVICE_CALL_LIMIT, margin: int = 2 * MIB) -> int:
    """The most bytes the repository may travel at for ``--split auto`` to cut the bundle into ``parts`` parts."""
    return limit - margin - -(-bundle_bytes // parts)


#: The device tool counts a call's files at more than their bytes: on 2026-12-02e a repository of 22,954,340
#: bytes (1,256 files) beside a 43,191,391-byte part folder, 66,145,731 bytes together, was refused as "larger
#: than 64 MiB"; the same repository beside a 37,792,663-byte folder travelled. Rounded up to whole 4 KiB blocks
#: (what ``du`` counts) the refused call was 68.7 MB and the accepted one 63.3 MB, so travel_size counts that way.
TRAVEL_BLOCK = 4096


def travel_size(repo: Path) -> int:
    """Bytes a device call counts for the repository: tracked plus untracked-not-ignored files, each rounded up
    to whole ``TRAVEL_BLOCK``s (see there)."""
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    total = 0
    for rel in filter(None, out.split(b"\0")):
        p = Path(repo) / os.fsdecode(rel)
        if p.is_file() and not p.is_symlink():
            total += -(-p.stat().st_size // TRAVEL_BLOCK) * TRAVEL_BLOCK
    return total


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
