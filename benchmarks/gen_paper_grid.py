"""Write the paper-scale grid as a config: 11 pairs × 6 schemes × 7 batch sizes × 5 corpora × 3 seeds
× 2 graph modes = 13,860 cells (no closing baseline, as in the paper's pairing), or a smaller one.

    python benchmarks/gen_paper_grid.py --pairs 11 > /tmp/paper.yaml
    time snakemake -n --configfile /tmp/paper.yaml --quiet
"""

from __future__ import annotations

import argparse
import sys

import yaml

# The paper's five text types (random tokens stand in: planning and analysis do not read prompts).
CORPUS_NAMES = ("code", "conversation", "longdoc", "news_en", "news_rm")


def grid(pairs: int, batch_sizes: list[int], corpora: int, seeds: int, closing: bool, share: bool = False) -> dict:
    models = {
        f"pair{i:02d}": {
            "target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy"},
            "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"},
        }
        for i in range(pairs)
    }
    return {
        "name": "paper",
        "device": "cuda",
        "models": models,
        "schemes": {
            "baseline": {"method": "baseline"},
            "ngram": {"method": "ngram", "k": 5},
            "draft": {"method": "draft_model", "k": 5},
            "eagle3": {"method": "eagle3", "k": 5, "drafter": "hub/eagle3"},
            "mtp": {"method": "mtp", "k": 1, "drafter": "hub/mtp"},
            "dflash": {"method": "dflash", "k": 16, "drafter": "hub/dflash"},
        },
        "batch_sizes": batch_sizes,
        "corpora": {name: {"source": "random"} for name in CORPUS_NAMES[:corpora]}
        | {f"c{i}": {"source": "random"} for i in range(len(CORPUS_NAMES), corpora)},
        "seeds": list(range(seeds)),
        "cuda_graphs": [True, False],
        "workloads": {"closed": {"kind": "closed_batch", "prompt_len": 512, "output_len": 512}},
        "protocol": {"closing_baseline": closing, "share_engines": share},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=11)
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--corpora", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--closing-baseline", action="store_true")
    ap.add_argument("--share-engines", action="store_true", help="protocol.share_engines: one job per engine group")
    a = ap.parse_args()
    cfg = grid(
        a.pairs, [int(b) for b in a.batch_sizes.split(",")], a.corpora, a.seeds, a.closing_baseline, a.share_engines
    )
    yaml.safe_dump(cfg, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
