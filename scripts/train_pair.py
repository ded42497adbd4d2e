"""Train the project's small real model pair (ADR 0120): a Qwen3 target and a smaller Qwen3 draft
distilled from it, on the built-in offline corpora, with the shipped tokenizer.

    python scripts/train_pair.py                 # writes config/models/trained-qwen3-{target,draft}
    python scripts/train_pair.py --check         # retrain into a temp dir, compare with the committed weights
    python scripts/train_pair.py --out /tmp/pair --target-steps 2 --draft-steps 2   # a quick try

Deterministic for one recipe on one machine (one thread); the committed checkpoints record their
recipe and weights hash in specjoule_training.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from specjoule import pair  # noqa: E402

DEFAULT_OUT = REPO / "config" / "models"
TARGET_NAME, DRAFT_NAME = "trained-qwen3-target", "trained-qwen3-draft"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory the two checkpoints go into")
    ap.add_argument("--seed", type=int, default=pair.PairRecipe.seed)
    ap.add_argument("--target-steps", type=int, default=pair.PairRecipe.target_steps)
    ap.add_argument("--draft-steps", type=int, default=pair.PairRecipe.draft_steps)
    ap.add_argument(
        "--check",
        action="store_true",
        help="retrain into a temporary directory and compare weights hashes with the checkpoints in --out",
    )
    args = ap.parse_args(argv)
    recipe = dataclasses.replace(
        pair.PairRecipe(), seed=args.seed, target_steps=args.target_steps, draft_steps=args.draft_steps
    )
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            result = pair.train_pair(recipe, Path(tmp) / TARGET_NAME, Path(tmp) / DRAFT_NAME, progress=print)
            return _compare(result, args.out)
    result = pair.train_pair(recipe, args.out / TARGET_NAME, args.out / DRAFT_NAME, progress=print)
    print(
        f"target {result.target_dir} sha256 {result.target_sha256}\ndraft  {result.draft_dir} sha256 "
        f"{result.draft_sha256}\ntrained in {result.seconds:.0f} s"
    )
    return 0


def _compare(result: pair.TrainingResult, out: Path) -> int:
    status = 0
    for name, sha in ((TARGET_NAME, result.target_sha256), (DRAFT_NAME, result.draft_sha256)):
        committed = pair.read_manifest(out / name)["weights_sha256"]
        same = committed == sha
        status |= not same
        print(
            f"{name}: {'same weights' if same else 'DIFFERENT weights'} (committed {committed[:16]}, retrained {sha[:16]})"
        )
    if status:
        print(
            "another CPU, torch version or Python version (the long-document corpus follows the interpreter) "
            "can round differently; the committed checkpoints stay valid (ADR 0120)"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
