"""Where a speculation round's time goes: profile a few rounds of one or more cells on their own engines (ADR 0095).

    python tools/device/profile_rounds.py CONFIG CELL [CELL ...] --out DIR [options]

CELL is a record path of the config's plan (``results/cells/<campaign>/<cell>.parquet``) or ``<campaign>/<cell>``.
Each cell gets one engine start (built as the measurement built it, through ``specjoule.engines.make_engine``), a
warm-up, a few seconds of unprofiled reference batches, then ``--batches`` profiled closed batches of at most
``--rounds`` speculation rounds each, with NVML at 10 Hz throughout; its folder is
``DIR/<campaign>/<cell>[--<tag>]/``. At the end the folders are analysed (``specjoule.analysis.rounds``) into
``DIR/rounds.parquet`` and a table on stdout.

``--set KEY=VALUE`` (repeatable) changes one engine option for this profile only (VALUE is JSON, else text;
``env.NAME=VALUE`` sets an engine environment variable), e.g. ``--set async_scheduling=true`` for vLLM;
``--tag`` names the variant's folder (default: the settings themselves).

On the GPU machine: ``source /tmp/site/specjoule-env.sh`` first (SGLang also needs ``SPECJOULE_SGLANG_PYTHONPATH``
and ``CUDA_HOME`` as in tools/device/README.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def parse_set(items: list[str]) -> dict:
    """``KEY=VALUE`` pairs into an engine_options overlay; ``env.NAME=VALUE`` into its ``env``."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"profile_rounds: --set {item!r}: expected KEY=VALUE")
        key, raw = item.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if key.startswith("env."):
            out.setdefault("env", {})[key[4:]] = str(value)
        else:
            out[key] = value
    return out


def variant_tag(overrides: dict, tag: str | None) -> str:
    if tag:
        return tag
    if not overrides:
        return ""
    text = ",".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(overrides.items()))
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", text)[:80]


def analyze(out: Path) -> int:
    """``out``'s traces into rounds.parquet and a table on stdout; 1 when the traces cannot be analysed. Without
    polars (a measurement-only node: the offline bundle's pipeline profile, issue 22) the traces are kept and the
    message says how to analyse them where polars is: not a failure of the profile."""
    try:
        from specjoule.analysis import rounds
    except ModuleNotFoundError as exc:
        from specjoule.extras import INSTALL_HINT, missing_analysis_module

        if missing_analysis_module(exc) is None:
            raise
        print(
            f"profile_rounds: traces kept in {out}, not analysed: {exc.name} is not installed here ({INSTALL_HINT}); "
            f"analyse them later with `python -m specjoule.analysis.rounds {out}`",
            file=sys.stderr,
        )
        return 0
    try:
        df, detail, kernels = rounds.analyze_dir_tables(out)
        print(rounds.write_tables(df, detail, kernels, out / "rounds.parquet"))
    except rounds.TraceError as exc:  # the traces stay for a later look; say why there is no table
        print(f"profile_rounds: analysis: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    from specjoule import cells, config, profiling

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("cells", nargs="+")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--batches", type=int, default=profiling.ProfileSettings.batches)
    ap.add_argument("--rounds", type=int, default=profiling.ProfileSettings.rounds)
    ap.add_argument("--warmup-batches", type=int, default=profiling.ProfileSettings.warmup_batches)
    ap.add_argument("--reference-s", type=float, default=profiling.ProfileSettings.reference_s)
    stack = ap.add_mutually_exclusive_group()
    stack.add_argument("--with-stack", dest="with_stack", action="store_true", default=None)
    stack.add_argument("--no-stack", dest="with_stack", action="store_false")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--tag", default=None)
    ap.add_argument("--no-analyze", action="store_true")
    ap.add_argument(
        "--bundle",
        type=Path,
        default=None,
        help="also pack DIR into this .tar.gz (the device tool returns files at most two folders deep)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )

    cfg = config.load(args.config)
    table = cells.build(cfg)
    try:
        chosen = profiling.select_cells(table, args.cells)
        overrides = parse_set(args.set)
        settings = profiling.ProfileSettings(
            batches=args.batches,
            rounds=args.rounds,
            warmup_batches=args.warmup_batches,
            reference_s=args.reference_s,
            with_stack=args.with_stack,
            overrides=overrides,
        )
        settings.check()
    except profiling.ProfileError as exc:
        print(f"profile_rounds: {exc}", file=sys.stderr)
        return 2
    tag = variant_tag(overrides, args.tag)
    failed = 0
    for cell in chosen:
        folder = args.out / cell.campaign_id / (cell.name + (f"--{tag}" if tag else ""))
        t0 = time.monotonic()
        try:
            profiling.profile_cell(table, cell, folder, settings)
        except Exception as exc:  # noqa: BLE001 - one cell's failure must not cost the others their device time
            failed += 1
            logging.getLogger("specjoule.profiling").error(
                "profile %s/%s failed after %.0f s: %s: %s",
                cell.campaign_id,
                cell.name,
                time.monotonic() - t0,
                type(exc).__name__,
                exc,
            )
    if not args.no_analyze and any(args.out.rglob(profiling.PROFILE_FILE)):
        failed += analyze(args.out)
    if args.bundle is not None:
        import tarfile

        args.bundle.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.bundle, "w:gz") as tar:
            tar.add(args.out, arcname=args.out.name)
        print(
            f"profile_rounds: packed {args.out} into {args.bundle} ({args.bundle.stat().st_size / 1e6:.1f} MB)",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
