"""The Snakemake targets of each campaign family of a config, planned as the workflow plans them (issue 22).

    python3 tools/device/family_targets.py CONFIG [FAMILY ...]     one line per family: FAMILY TARGET [TARGET ...]
    python3 tools/device/family_targets.py --names CONFIG          the family names only, in plan order

Run it in the working directory Snakemake will run in (the results tree decides what is left to measure). With
engine sharing a family's target is the done file of its last planned group job, e.g.
``results/.specjoule/groups/vllm-qwen3_30b_a3b-closed-cg1/g02-closing-f23bdc54e364.done`` (ADR 0140: record paths
are no rule's outputs there); without, the last record of each of its campaigns. A family with nothing left to
measure prints its name alone. No FAMILY: every family, in plan order. tools/device/campaign.sh uses this.
Exit 2 on an unknown family or a config error (the same error Snakemake would give).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def resolve(config_path: str | Path, families: list[str] | None = None) -> dict[str, list[str]]:
    """{family: targets} for ``families`` (every family when None), in plan order; the config is read and planned
    as rules/common.smk does. A KeyError names an unknown family."""
    from specjoule import config, engine_jobs

    cfg, table = config.plan(config.read_yaml(config_path), str(config_path))
    shared = bool(cfg["protocol"].get("share_engines"))
    targets = engine_jobs.family_targets(table, engine_jobs.plan_jobs(table, cfg["version"]) if shared else None)
    if families is None:
        return targets
    unknown = [f for f in families if f not in targets]
    if unknown:
        raise KeyError(f"no campaign family {', '.join(unknown)} in {config_path}; its families: {', '.join(targets)}")
    return {f: targets[f] for f in families}


def main(argv: list[str] | None = None) -> int:
    from specjoule.config import ConfigError

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--names", action="store_true", help="print the family names only")
    ap.add_argument("config")
    ap.add_argument("families", nargs="*")
    args = ap.parse_args(argv)
    try:
        targets = resolve(args.config, args.families or None)
    except (ConfigError, KeyError) as exc:
        print(f"family_targets: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    for family, paths in targets.items():
        print(family if args.names else " ".join([family, *paths]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
