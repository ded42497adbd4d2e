"""The cell table: one row per measurement, built once per parse.

A *campaign* is the set of cells compared on one GPU: same engine, model pair, workload, batch
size, corpus, seed and graph mode. It holds an opening baseline, the speculative points in an
order shuffled under a recorded seed, and (by default) a closing baseline.

Identity is content-addressed: a cell's id hashes every parameter that changes what is measured,
and nothing else (not the run order, not the check thresholds), so adding a model, a batch size
or a corpus leaves every existing id and path untouched.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specjoule import acceptance as acc

CELLS_DIR = "results/cells"
TIMELINES_DIR = "results/timelines"
LOGS_DIR = "results/logs/cells"

ROLE_OPENING = "opening_baseline"
ROLE_CLOSING = "closing_baseline"
ROLE_POINT = "point"


def _blob(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _sha(blob: str, n: int = 12) -> str:
    return hashlib.sha1(blob.encode()).hexdigest()[:n]


@dataclass(frozen=True)
class Cell:
    cell_id: str
    campaign_id: str
    name: str  # readable, unique inside its campaign
    role: str
    engine: str
    model_pair: str
    scheme: str
    method: str
    k: int | None
    synthetic: bool
    acceptance_name: str | None
    acceptance_kind: str | None  # minvar | geometric | rates; None for baselines and model acceptance
    acceptance_rates: tuple[float, ...] | None
    configured_L: float | None
    batch_size: int
    corpus: str
    seed: int
    cuda_graphs: bool
    workload: str
    workload_kind: str
    device: str
    engine_key: str  # cells with equal keys can share one running engine
    run_order_index: int = 0
    run_order_seed: int = 0
    estimated_s: float = 0.0
    spec: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def record_path(self) -> str:
        return f"{CELLS_DIR}/{self.campaign_id}/{self.name}.parquet"

    @property
    def timeline_path(self) -> str:
        return f"{TIMELINES_DIR}/{self.campaign_id}/{self.name}.parquet"

    @property
    def log_path(self) -> str:
        return f"{LOGS_DIR}/{self.campaign_id}/{self.name}.log"

    def identity(self) -> dict[str, Any]:
        """Columns every record carries from the plan."""
        return {
            "cell_id": self.cell_id,
            "campaign_id": self.campaign_id,
            "cell_name": self.name,
            "role": self.role,
            "engine": self.engine,
            "model_pair": self.model_pair,
            "target_model": self.spec["target"]["model"],
            "draft_model": (self.spec.get("draft") or {}).get("model"),
            "scheme": self.scheme,
            "method": self.method,
            "k": self.k,
            "synthetic": self.synthetic,
            "acceptance_name": self.acceptance_name,
            "acceptance_kind": self.acceptance_kind,
            "acceptance_rates": list(self.acceptance_rates) if self.acceptance_rates is not None else None,
            "configured_L": self.configured_L,
            "batch_size": self.batch_size,
            "corpus": self.corpus,
            "seed": self.seed,
            "cuda_graphs": self.cuda_graphs,
            "workload": self.workload,
            "workload_kind": self.workload_kind,
            "prompt_len": self.spec["workload"]["prompt_len"],
            "output_len": self.spec["workload"]["output_len"],
            "request_rate": self.spec["workload"].get("rate"),
            "device": self.device,
            "prefix_caching": self.spec["prefix_caching"],
            "run_order_index": self.run_order_index,
            "run_order_seed": self.run_order_seed,
        }


@dataclass
class CellTable:
    cells: list[Cell]
    by_path: dict[str, Cell]
    campaigns: dict[str, list[Cell]]  # in run order

    def __iter__(self) -> Iterator[Cell]:
        return iter(self.cells)

    def __len__(self) -> int:
        return len(self.cells)

    def get(self, record_path: str) -> Cell:
        return self.by_path[record_path]

    def by_wildcards(self, campaign: str, cell: str) -> Cell:
        return self.by_path[f"{CELLS_DIR}/{campaign}/{cell}.parquet"]

    def opening(self, campaign: str) -> Cell:
        return self.campaigns[campaign][0]

    def points(self, campaign: str) -> list[Cell]:
        return [c for c in self.campaigns[campaign] if c.role == ROLE_POINT]

    def estimated_gpu_s(self) -> float:
        return sum(c.estimated_s for c in self.cells)

    def write_plan(self, path: str | Path) -> None:
        columns = ["campaign_id", "cell_name", "run_order_index", "role", "engine", "model_pair", "scheme",
                   "method", "k", "acceptance_name", "configured_L", "batch_size", "corpus", "seed",
                   "cuda_graphs", "workload", "cell_id", "record_path", "estimated_gpu_s"]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh, delimiter="\t", lineterminator="\n")
            w.writerow(columns)
            for cid, cells in self.campaigns.items():
                for c in cells:
                    ident = c.identity()
                    w.writerow([ident.get(col) if col in ident else None for col in columns[:-3]]
                               + [c.cell_id, c.record_path, f"{c.estimated_s:.0f}"])

    def summary(self) -> str:
        hours = self.estimated_gpu_s() / 3600
        engines = len({c.engine_key for c in self.cells})
        return (f"{len(self.cells)} cells in {len(self.campaigns)} campaigns, {engines} distinct engine "
                f"configurations, estimated {hours:.2f} GPU-hours (one engine start per cell)")


def _estimate_s(workload: dict, protocol: dict) -> float:
    base = protocol["engine_start_s"] + protocol["idle_s"] + workload["warmup_s"]
    if workload["kind"] == "closed_batch":
        return base + workload["min_window_s"]
    return base + workload["window_s"] + workload["cooldown_s"]


def _scheme_variants(name: str, scheme: dict, config: dict) -> list[tuple[str | None, str | None, tuple | None, float | None]]:
    """(acceptance name, kind, rates, configured L) for each cell a scheme yields."""
    if not scheme.get("synthetic"):
        return [(None, None, None, None)]
    out = []
    for vname in scheme.get("acceptance", list(config["acceptance"])):
        kind, rates = acc.resolve(config["acceptance"][vname], scheme["k"])
        out.append((vname, kind, tuple(rates), acc.mean_acceptance_length(rates)))
    return out


def build(config: dict) -> CellTable:
    """Expand a validated config into cells. Cheap: plain Python, no per-cell I/O."""
    protocol = config["protocol"]
    order_seed = protocol["run_order_seed"]
    engine_opts = config["engine_options"]
    baseline_name = next(n for n, s in config["schemes"].items() if s["method"] == "baseline")
    point_schemes = [(n, s) for n, s in config["schemes"].items() if s["method"] != "baseline"]
    variants = {n: _scheme_variants(n, s, config) for n, s in point_schemes}

    cells: list[Cell] = []
    by_path: dict[str, Cell] = {}
    campaigns: dict[str, list[Cell]] = {}

    for engine in config["engines"]:
        for pair_name, pair in config["models"].items():
            for wl_name, wl in config["workloads"].items():
                est = _estimate_s(wl, protocol)
                for graphs in config["cuda_graphs"]:
                    # Engine-shaping parameters, shared by every cell of a (pair, scheme, vector).
                    engine_base = {"engine": engine, "pair": pair, "graphs": graphs, "device": config["device"],
                                   "prefix_caching": config["prefix_caching"], "opts": engine_opts.get(engine, {})}
                    engine_blob = _blob(engine_base)
                    for batch in config["batch_sizes"]:
                        for corpus_name, corpus in config["corpora"].items():
                            for seed in config["seeds"]:
                                campaign = f"{engine}-{pair_name}-{wl_name}-b{batch}-{corpus_name}-s{seed}-cg{int(graphs)}"
                                spec_base = {
                                    "engine": engine, "target": pair["target"], "draft": pair.get("draft"),
                                    "max_model_len": pair.get("max_model_len"), "batch_size": batch,
                                    "corpus": corpus_name, "corpus_spec": corpus, "pool_size": corpus.get("pool_size", config["pool_size"]),
                                    "seed": seed, "cuda_graphs": graphs, "workload": wl, "device": config["device"],
                                    "prefix_caching": config["prefix_caching"], "engine_options": engine_opts.get(engine, {}),
                                    "protocol": {k: protocol[k] for k in ("idle_s", "engine_ready_timeout_s")},
                                    "meter": config["meter"],
                                }

                                # Hash the shared part once per campaign; each cell adds only its own part.
                                base_blob = _blob(spec_base)

                                def make(name: str, role: str, scheme_name: str, scheme: dict, variant) -> Cell:
                                    vname, kind, rates, L = variant
                                    own = {"scheme": {**scheme, "name": scheme_name}, "role": role,
                                           "acceptance_rates": list(rates) if rates else None}
                                    spec = {**spec_base, **own}
                                    ekey = _sha(engine_blob + _blob({"scheme": scheme, "rates": rates}), 10)
                                    return Cell(
                                        cell_id=_sha(base_blob + _blob(own)),
                                        campaign_id=campaign, name=name, role=role, engine=engine, model_pair=pair_name,
                                        scheme=scheme_name, method=scheme["method"], k=scheme.get("k"),
                                        synthetic=bool(scheme.get("synthetic")), acceptance_name=vname,
                                        acceptance_kind=kind, acceptance_rates=rates, configured_L=L,
                                        batch_size=batch, corpus=corpus_name, seed=seed, cuda_graphs=graphs,
                                        workload=wl_name, workload_kind=wl["kind"], device=config["device"],
                                        engine_key=ekey, run_order_seed=order_seed, estimated_s=est, spec=spec,
                                    )

                                base_scheme = config["schemes"][baseline_name]
                                opening = make(f"{baseline_name}--open", ROLE_OPENING, baseline_name, base_scheme, (None,) * 4)
                                points = []
                                for sname, scheme in point_schemes:
                                    for variant in variants[sname]:
                                        label = sname if variant[0] is None else f"{sname}--{variant[0]}"
                                        points.append(make(label, ROLE_POINT, sname, scheme, variant))
                                # Shuffle under the recorded seed, salted by the campaign id so that
                                # campaigns do not share one order (thermal drift stays uncorrelated).
                                # Sorted first: the order must not depend on how a YAML or JSON copy
                                # of the config happens to order its keys.
                                points.sort(key=lambda c: c.name)
                                random.Random(f"{order_seed}:{campaign}").shuffle(points)
                                members = [opening, *points]
                                if protocol["closing_baseline"]:
                                    members.append(make(f"{baseline_name}--close", ROLE_CLOSING, baseline_name, base_scheme, (None,) * 4))
                                ordered = []
                                for idx, c in enumerate(members):
                                    c = _with_order(c, idx)
                                    ordered.append(c)
                                    by_path[c.record_path] = c
                                campaigns[campaign] = ordered
                                cells.extend(ordered)
    return CellTable(cells=cells, by_path=by_path, campaigns=campaigns)


def _with_order(cell: Cell, index: int) -> Cell:
    # Frozen dataclass: rebuild with the order index (cheap; no deep copy of spec).
    return Cell(**{f: getattr(cell, f) for f in cell.__dataclass_fields__ if f != "run_order_index"}, run_order_index=index)
