"""Build an offline bundle of wheels for an air-gapped GPU node (ADR 0060; logic in tools/bundle.py).

    python tools/make_bundle.py                          # vllm + pipeline for the H200 image, split in 60 MiB parts
    python tools/make_bundle.py --profile sglang --profile pipeline --out .bundle/sglang
    python tools/make_bundle.py --plan-only              # resolve and print the decisions, download nothing
    python tools/make_bundle.py --from-lock              # no resolution: the versions frozen in bundle/lock-*.txt

Inputs: the node's Python version and platform tags, its package list (`pip list --format=freeze` taken on the
node; bundle/gpu-image-packages.txt is the GPU machine's image), and profiles (bundle/profiles.toml). Output under
--out (default .bundle/, git-ignored): specjoule-bundle/ (wheels, manifest.json, install.sh, stand-ins),
specjoule-bundle.tar.xz, and parts/NN/ folders of at most --split bytes, each one device call's `carry`.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from packaging.requirements import Requirement  # noqa: E402

from tools import bundle as B  # noqa: E402


def log(msg: str) -> None:
    print(f"[make_bundle {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pip_cmd(args: argparse.Namespace) -> list[str]:
    return [args.pip_python, "-m", "pip"]


def run(cmd: list[str], logfile: Path) -> None:
    with open(logfile, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = [ln for ln in logfile.read_text().splitlines() if not ln.startswith("WARNING: Location")][-25:]
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd[:6])} ...\n" + "\n".join(tail))


def build_local_wheel(args: argparse.Namespace, dest: Path, logfile: Path) -> Path:
    """This repository as a wheel (no build isolation: setuptools is in the development environment)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(dest),
            str(REPO),
        ],
        logfile,
    )
    wheels = list(dest.glob("specjoule-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one specjoule wheel in {dest}, found {wheels}")
    # setuptools leaves build/ behind in the checkout: it is git-ignored, but keep the tree as we found it
    shutil.rmtree(REPO / "build", ignore_errors=True)
    return wheels[0]


def build_sdist_wheels(
    args, names: list[str], dest: Path, logfile: Path, pins: dict[str, str] | None = None
) -> list[Path]:
    """Wheels for requirements the registry has only as source; a bundle takes them only if pure Python."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    out = []
    for name in names:
        req = f"{name}=={pins[name]}" if pins and name in pins else name
        run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-binary", name, "--quiet", "-w", str(dest), req],
            logfile,
        )
    for w in sorted(dest.glob("*.whl")):
        meta = B.read_wheel(w)
        if not meta.pure:
            raise SystemExit(f"{w.name}: built from source but not pure Python: cannot travel to another platform")
        log(f"built from source: {w.name}")
        out.append(w)
    return out


def download(args, target: B.Target, lines: list[str], cache: Path, logfile: Path) -> None:
    """`pip download --no-deps --require-hashes` of exact pins; files already in the cache are reused."""
    if not lines:
        return
    req = cache.parent / "work" / "download-requirements.txt"
    req.write_text("\n".join(lines) + "\n")
    run(
        [
            *pip_cmd(args),
            "download",
            "--no-deps",
            "--require-hashes",
            "--quiet",
            "-d",
            str(cache),
            *target.pip_args(),
            "-r",
            str(req),
        ],
        logfile,
    )


def find_wheel(cache: Path, name: str, version: str) -> Path:
    for p in cache.glob("*.whl"):
        try:
            fname, fver, _, _ = B.parse_wheel_filename(p.name)
        except Exception:
            continue
        if B.canonical(str(fname)) == name and str(fver) == str(B.Version(version)):
            return p
    raise SystemExit(f"{name}=={version}: no wheel in {cache} after download")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", action="append", help="profile from --profiles (repeat); default vllm + pipeline")
    ap.add_argument("--profiles", type=Path, default=REPO / "bundle" / "profiles.toml")
    ap.add_argument(
        "--installed",
        type=Path,
        default=REPO / "bundle" / "gpu-image-packages.txt",
        help="the node's `pip list --format=freeze` (bare names = version not recorded)",
    )
    ap.add_argument("--python-version", default="3.12", help="the node's Python, 3.N")
    ap.add_argument("--glibc", default="2.39", help="the node's glibc (manylinux tags up to it are accepted)")
    ap.add_argument("--arch", default="x86_64", choices=["x86_64", "aarch64"])
    ap.add_argument("--platform", action="append", help="explicit platform tags instead of --glibc/--arch (repeat)")
    ap.add_argument("--out", type=Path, default=REPO / ".bundle")
    ap.add_argument(
        "--split",
        default="auto",
        help="largest part (K/M/G = KiB/MiB/GiB); 0 = do not split; auto (default) = what fits one "
        "device call beside the repository as it is now, less 2 MiB for growth, at most 60 MiB",
    )
    ap.add_argument(
        "--pin",
        choices=["auto", "all", "protected"],
        default="auto",
        help="node packages pinned for the resolver: all with a known version, or only torch/CUDA "
        "(auto: all, then protected if that cannot resolve)",
    )
    ap.add_argument(
        "--unknown",
        choices=["trust", "ship-pure"],
        default="trust",
        help="node packages without a recorded version that a bundled one constrains",
    )
    ap.add_argument("--lock", type=Path, default=None, help="lock file (default bundle/lock-<profiles>.txt)")
    ap.add_argument("--from-lock", action="store_true", help="skip the resolution; download what the lock lists")
    ap.add_argument("--plan-only", action="store_true", help="resolve, print and write the lock; nothing else")
    ap.add_argument("--no-archive", action="store_true", help="stop after staging the bundle directory")
    ap.add_argument("--xz-preset", type=int, default=9, choices=range(0, 10))
    ap.add_argument("--xz-threads", type=int, default=0, help="xz -T (0: one per core)")
    ap.add_argument(
        "--verify-python",
        default=None,
        help="a local interpreter of the node's Python version: pip-install the bundle into a scratch "
        "target with it (--no-index --no-deps) as the node will",
    )
    ap.add_argument("--pip-python", default=sys.executable, help="interpreter whose pip resolves and downloads")
    ap.add_argument(
        "--split-only",
        action="store_true",
        help="only cut the existing --out archive into parts again (e.g. a smaller --split once the "
        "repository has grown)",
    )
    args = ap.parse_args(argv)
    if args.split_only:
        archive = args.out.resolve() / B.ARCHIVE_NAME
        if not archive.exists():
            raise SystemExit(f"no {archive}: build the bundle first")
        report_parts(
            B.split_file(archive, part_size(args.split), args.out.resolve() / "parts"),
            args.out.resolve() / "parts",
            archive,
        )
        return 0

    names = args.profile or ["vllm", "pipeline"]
    profiles = B.select_profiles(B.load_profiles(args.profiles), names)
    platforms = tuple(args.platform) if args.platform else B.manylinux_platforms(args.glibc, args.arch)
    target = B.Target(args.python_version, platforms)
    installed = B.parse_installed(args.installed.read_text())
    provided = {n: v for p in profiles for n, (v, _) in p.node_provides.items() if n not in installed}
    installed.update(provided)  # the resolver sees a stub of each, like any node package
    lock = args.lock or REPO / "bundle" / f"lock-{'+'.join(names)}.txt"
    out = args.out.resolve()
    work, cache = out / "work", out / "cache"
    work.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    logfile = work / "pip.log"
    logfile.write_text("")
    log(
        f"profiles {names}; Python {target.python_version}; {len(platforms)} platform tags ({platforms[0]} ...); "
        f"node list {args.installed.name}: {len(installed)} packages, "
        f"{sum(v is not None for v in installed.values())} with versions"
        + (f"; provided by the node in substance (profiles' node_provides): {provided}" if provided else "")
    )

    local = build_local_wheel(args, work / "local", logfile) if any(p.local_top for p in profiles) else None
    to_build = sorted({b for p in profiles for b in p.build})
    locks_pins = {n: v for n, v, h, _ in B.read_lock(lock) if h is None} if args.from_lock and lock.exists() else None
    built = build_sdist_wheels(args, to_build, work / "built", logfile, locks_pins) if to_build else []
    built_by_name = {B.read_wheel(w).name: w for w in built}

    plan = None
    if args.from_lock:
        entries = B.read_lock(lock)
        log(f"from lock {lock.name}: {len(entries)} wheels")
        download(args, target, [f"{n}=={v} --hash=sha256:{h}" for n, v, h, _ in entries if h], cache, logfile)
        shipped = []
        for n, v, h, g in entries:
            if h:
                shipped.append((find_wheel(cache, n, v), g, "from lock"))
            elif n == "specjoule" and local is not None:
                shipped.append((local, g, "this repository"))
            elif n in built_by_name:
                shipped.append((built_by_name[n], g, "built from source"))
            else:
                raise SystemExit(f"lock lists {n}=={v} as local, and nothing here builds it")
    else:
        # 1. --no-deps tops: their own metadata says what they declare.
        resolved_tops: dict[str, B.Resolved] = {}
        top_names: dict[str, str] = {}
        requests: list[str] = []
        for p in profiles:
            for t in p.top:
                if p.local_top:
                    meta = B.read_wheel(local)
                    top_names[t] = meta.name
                    continue
                name = B.canonical(Requirement(t).name)
                top_names[t] = name
                if p.deps == "all":
                    continue
                run(
                    [*pip_cmd(args), "download", "--no-deps", "--quiet", "-d", str(cache), *target.pip_args(), t],
                    logfile,
                )
                spec = Requirement(t).specifier
                cands = [
                    w
                    for w in cache.glob("*.whl")
                    if B.read_wheel(w).name == name and spec.contains(B.read_wheel(w).version, prereleases=True)
                ]
                meta = max((B.read_wheel(w) for w in cands), key=lambda m: B.Version(m.version))
                path = cache / meta.filename
                resolved_tops[name] = B.Resolved(
                    name, meta.version, f"pip-download:{meta.filename}", B.sha256_file(path), meta.requires
                )
                log(
                    f"top {name} {meta.version}: {len(meta.requires)} declared requirements, "
                    f"{path.stat().st_size / B.MIB:.1f} MiB"
                )
            reqs = B.resolution_inputs(
                p, resolved_tops[top_names[p.top[0]]].requires if p.deps == "keep" else (), target
            )
            requests += reqs
        requests = sorted(set(requests))
        # 2. A real resolution on the node's Python/platform, the node's packages entering as stubs.
        pins = ["all", "protected"] if args.pin == "auto" else [args.pin]
        resolved = None
        for pin in pins:
            try:
                log(
                    f"resolving {len(requests)} requirements (+{'specjoule wheel' if local else 'no local wheel'}), "
                    f"node pinned: {pin}"
                )
                resolved = B.resolve(
                    requests,
                    target,
                    installed,
                    pin=pin,
                    workdir=work,
                    local_wheels=[local] if local else [],
                    find_links=[work / "built"] if built else [],
                    pip=pip_cmd(args),
                    log=logfile,
                )
                break
            except B.BundleError as exc:
                log(f"resolution with node pinned '{pin}' failed:\n{exc.reason}")
        if resolved is None:
            raise SystemExit(f"no resolution; try --from-lock ({lock})")
        # the stubs stood for node packages: they are no candidates for the bundle
        resolved = {**{k: v for k, v in resolved.items() if "/stubs/" not in v.url}, **resolved_tops}
        # 3. Decide what to ship.
        roots = [r for p in profiles for r in B.roots_for(p, top_names)]
        omit = {k: v for p in profiles for k, v in p.omit.items()}
        for p in profiles:  # a profile that ships a package wins over another that omits it
            for t in p.top:
                omit.pop(top_names[t], None)
        plan = B.plan(roots, resolved, installed, target, unknown=args.unknown, omit=omit)
        print_plan(plan, resolved)
        if plan.problems:
            for pr in plan.problems:
                log(f"PROBLEM: {pr}")
            raise SystemExit(f"{len(plan.problems)} problem(s): the bundle would not work as planned")
        B.write_lock(
            lock,
            plan,
            resolved,
            header=[
                f"specjoule offline bundle lock: profiles {'+'.join(names)}; Python {target.python_version}; "
                f"{platforms[0]}; node list {args.installed.name}",
                "written by tools/make_bundle.py; `--from-lock` downloads exactly these (pip --require-hashes)",
            ],
            built_here=[*built_by_name, *(["specjoule"] if local else [])],
        )
        log(f"lock written: {lock.relative_to(REPO) if lock.is_relative_to(REPO) else lock}")
        if args.plan_only:
            return 0
        here = set(built_by_name) | ({"specjoule"} if local else set())
        pins_to_get = [
            f"{d.name}=={d.version} --hash=sha256:{resolved[d.name].sha256}"
            for d in plan.of("ship")
            if d.name not in here
        ]
        log(f"downloading {len(pins_to_get)} wheels (cache {cache})")
        download(args, target, pins_to_get, cache, logfile)
        shipped = []
        for d in plan.of("ship"):
            if local is not None and d.name == "specjoule":
                path = local
            elif d.name in built_by_name:
                path = built_by_name[d.name]
            else:
                path = find_wheel(cache, d.name, d.version)
            shipped.append((path, d.group, d.reason))

    # 4. Stage: stored wheels, stand-ins, install.sh, manifest.
    stage = out / B.BUNDLE_NAME
    log(f"staging {len(shipped)} wheels (re-zipped uncompressed, RECORD hashes checked) in {stage}")
    manifest = B.stage_bundle(
        stage,
        shipped,
        target=target,
        profiles=profiles,
        plan_=plan,
        install_script=REPO / "bundle" / "install.sh",
        extra={
            "node_list": args.installed.name,
            "lock": lock.name,
            **({"omitted": B.read_lock_omitted(lock)} if args.from_lock else {}),
        },
    )
    print_sizes(manifest)
    if args.verify_python:
        verify_install(args.verify_python, stage, work / "verify-site", target, logfile)

    if args.no_archive:
        return 0
    # 5. One deterministic tar.xz, then parts.
    archive = out / B.ARCHIVE_NAME
    t0 = time.time()
    log(f"compressing (xz -{args.xz_preset}) ...")
    B.make_archive(stage, archive, preset=args.xz_preset, threads=args.xz_threads)
    asize = archive.stat().st_size
    log(
        f"{archive.name}: {asize:,} bytes ({asize / B.MIB:.1f} MiB) in {time.time() - t0:.0f} s; "
        f"sha256 {B.sha256_file(archive)}"
    )
    if args.split != "0":
        parts = B.split_file(archive, part_size(args.split), out / "parts")
        report_parts(parts, out / "parts", archive)
    return 0


def print_plan(plan: B.Plan, resolved: dict) -> None:
    for action in ("ship", "node", "omit"):
        ds = plan.of(action)
        log(f"{action}: {len(ds)}")
        for d in ds:
            print(f"    {d.name:40s} {str(d.version or ''):16s} [{d.group}] {d.reason}")
    for w in plan.warnings:
        log(f"warning: {w}")


def print_sizes(manifest: dict) -> None:
    groups: dict[str, list[int]] = {}
    for w in manifest["wheels"]:
        g = groups.setdefault(w["group"], [0, 0, 0])
        g[0] += 1
        g[1] += w["source_size"]
        g[2] += w["size"]
    for g, (n, src, stored) in sorted(groups.items()):
        log(f"group {g:9s}: {n:3d} wheels, {src / B.MIB:8.1f} MiB as served, {stored / B.MIB:8.1f} MiB stored")
    log(
        f"total: {len(manifest['wheels'])} wheels, {manifest['total_source_bytes']:,} bytes as served, "
        f"{manifest['total_wheel_bytes']:,} stored"
    )


def verify_install(python: str, stage: Path, site: Path, target: B.Target, logfile: Path) -> None:
    """Install the staged wheels as the node will, with a local interpreter of the node's Python version."""
    have = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if have != target.python_version:
        raise SystemExit(f"--verify-python {python} is Python {have}, the bundle is for {target.python_version}")
    shutil.rmtree(site, ignore_errors=True)
    t0 = time.time()
    # the node's platform tags, not this machine's: its glibc may be older than the node's
    run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--quiet",
            "--target",
            str(site),
            *target.pip_args(),
            *map(str, sorted((stage / "wheels").glob("*.whl"))),
        ],
        logfile,
    )
    dists = sorted(p.name for p in site.glob("*.dist-info"))
    log(
        f"verify: {len(dists)} distributions installed into {site} with {python} in {time.time() - t0:.0f} s "
        f"({B.dir_size(site) / B.MIB:.0f} MiB)"
    )


@functools.cache
def repo_travel_bytes() -> int:
    return B.travel_size(REPO)


def part_size(split: str) -> int:
    if split == "auto":
        repo_bytes = repo_travel_bytes()
        size = B.part_size_for_repo(repo_bytes)
        log(f"--split auto: parts of at most {size:,} bytes beside the repository's {repo_bytes:,}")
        return size
    return B.parse_size(split)


def _carry_path(part_dir: Path) -> str:
    """The part folder as a device call's ``carry`` names it: relative to the repository root (an --out of
    .bundle/sglang carries .bundle/sglang/parts/NN, not .bundle/parts/NN)."""
    try:
        return str(part_dir.resolve().relative_to(REPO))
    except ValueError:
        return str(part_dir)


def report_parts(parts: list[B.Part], parts_dir: Path, archive: Path) -> None:
    repo_bytes = repo_travel_bytes()
    log(f"{len(parts)} parts in {parts_dir}:")
    worst = 0
    for p in parts:
        d = parts_dir / B.part_dir_name(p.index)
        size = B.dir_size(d)
        worst = max(worst, size)
        print(f"    carry {_carry_path(d)}   {p.filename}  {p.size:,} bytes  sha256 {p.sha256[:16]}…")
    total = repo_bytes + worst
    log(
        f"a device call carries the repository ({repo_bytes:,} bytes travel) + one part folder (≤ {worst:,}) "
        f"= {total:,} of {B.DEVICE_CALL_LIMIT:,} bytes ({B.DEVICE_CALL_LIMIT - total:,} to spare)"
    )
    if total > B.DEVICE_CALL_LIMIT:
        raise SystemExit("a part plus the repository exceeds one device call's 64 MiB: use a smaller --split")


if __name__ == "__main__":
    sys.exit(main())
