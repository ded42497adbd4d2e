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
import os
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
# Where the group jobs of an engine-sharing run leave their "measured under this id" stamps (ADR 0017).
STAMPS_DIR = "results/.specjoule/measured"
PHASES = (ROLE_OPENING, ROLE_POINT, ROLE_CLOSING)


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
    # Campaigns that differ only in batch size, corpus and seed (ADR 0017); not part of the identity.
    family_id: str = ""

    @property
    def record_path(self) -> str:
        return f"{CELLS_DIR}/{self.campaign_id}/{self.name}.parquet"

    @property
    def timeline_path(self) -> str:
        return f"{TIMELINES_DIR}/{self.campaign_id}/{self.name}.parquet"

    @property
    def log_path(self) -> str:
        return f"{LOGS_DIR}/{self.campaign_id}/{self.name}.log"

    def stamp_path(self, version: Any) -> str:
        """Written (empty) after an engine-group job measured this cell under this id and version."""
        return f"{STAMPS_DIR}/{self.campaign_id}/{self.name}.{self.cell_id}-v{version}"

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
            "concurrency": self.spec["workload"].get("concurrency"),
            "device": self.device,
            "prefix_caching": self.spec["prefix_caching"],
            "run_order_index": self.run_order_index,
            "run_order_seed": self.run_order_seed,
        }


@dataclass(frozen=True)
class EngineGroup:
    """Cells run one after another on one engine start: one family, one phase, one engine key."""

    group_id: str  # <family>.g<NN>, NN = position in the family's group order
    family_id: str
    index: int
    phase: str
    engine_key: str
    cells: tuple[Cell, ...]  # in run order: (batch size, corpus, seed, name)


@dataclass
class CellTable:
    cells: list[Cell]
    by_path: dict[str, Cell]
    campaigns: dict[str, list[Cell]]  # in run order
    share_engines: bool = False
    swap_acceptance: bool = False  # protocol.swap_synthetic_acceptance (ADR 0039)
    engine_start_s: float = 0.0  # planning estimates, for what a shared start saves
    idle_s: float = 0.0
    _groups: dict[str, EngineGroup] | None = field(default=None, repr=False)

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

    def engine_groups(self, only: set[str] | None = None) -> dict[str, EngineGroup]:
        """Engine groups in run order (families in plan order, each family's groups chained).

        ``only``: record paths to keep (a planning run keeps the cells still to measure); groups
        left empty are dropped, the others keep their ids. Without sharing every cell is its own
        group (one engine start per cell)."""
        if self._groups is None:
            self._groups = _engine_groups(self)
        if only is None:
            return self._groups
        out = {}
        for gid, g in self._groups.items():
            kept = tuple(c for c in g.cells if c.record_path in only)
            if kept:
                out[gid] = g if len(kept) == len(g.cells) else EngineGroup(gid, g.family_id, g.index, g.phase, g.engine_key, kept)
        return out

    def group_estimated_s(self, group: EngineGroup) -> float:
        """Members' estimates less the engine starts (and idle measurements) the sharing saves."""
        saved = (len(group.cells) - 1) * (self.engine_start_s + self.idle_s)
        return sum(c.estimated_s for c in group.cells) - saved

    def estimated_gpu_s(self) -> float:
        if not self.share_engines:
            return sum(c.estimated_s for c in self.cells)
        return sum(self.group_estimated_s(g) for g in self.engine_groups().values())

    def estimated_window_s(self) -> float:
        """Energy-window seconds the plan holds (each cell's minimum window)."""
        return sum(_window_s(c.spec["workload"]) for c in self.cells)

    def engine_starts(self) -> int:
        return len(self.engine_groups()) if self.share_engines else len(self.cells)

    def pending(self, version: Any) -> set[str]:
        """Record paths an engine-sharing run must (re-)measure; see :func:`pending_records`."""
        return pending_records(self, version)

    def write_plan(self, path: str | Path) -> None:
        columns = ["campaign_id", "cell_name", "run_order_index", "role", "engine", "model_pair", "scheme",
                   "method", "k", "acceptance_name", "configured_L", "batch_size", "corpus", "seed",
                   "cuda_graphs", "workload", "cell_id", "record_path", "estimated_gpu_s", "engine_group",
                   "engine_start"]
        # With sharing, a cell's estimate is its share of its group's: the first member carries the
        # engine start, the others do not (the column still sums to estimated_gpu_s()).
        group_of: dict[str, tuple[str, bool]] = {}
        if self.share_engines:
            for gid, g in self.engine_groups().items():
                for i, c in enumerate(g.cells):
                    group_of[c.record_path] = (gid, i == 0)
        saved = self.engine_start_s + self.idle_s
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh, delimiter="\t", lineterminator="\n")
            w.writerow(columns)
            for cid, cells in self.campaigns.items():
                for c in cells:
                    ident = c.identity()
                    gid, starts = group_of.get(c.record_path, (None, True))
                    est = c.estimated_s if starts else c.estimated_s - saved
                    w.writerow([ident.get(col) if col in ident else None for col in columns[:-5]]
                               + [c.cell_id, c.record_path, f"{est:.0f}", gid, int(starts)])

    def summary(self) -> str:
        hours = self.estimated_gpu_s() / 3600
        engines = len({c.engine_key for c in self.cells})
        if self.share_engines:
            families = len({c.family_id for c in self.cells})
            starts = (f"{self.engine_starts()} engine starts: one per engine group, {families} campaign "
                      f"famil{'y' if families == 1 else 'ies'}, share_engines on"
                      + (", synthetic acceptance swapped in place" if self.swap_acceptance else ""))
        else:
            starts = f"{self.engine_starts()} engine starts: one per cell"
        gpu_s = self.estimated_gpu_s()
        share = f", ≈ {100 * self.estimated_window_s() / gpu_s:.0f} % of it inside energy windows" if gpu_s else ""
        return (f"{len(self.cells)} cells in {len(self.campaigns)} campaigns, {engines} distinct engine "
                f"configurations, estimated {hours:.2f} GPU-hours{share} ({starts})")


def _window_s(workload: dict) -> float:
    return float(workload["min_window_s"] if workload["kind"] == "closed_batch" else workload["window_s"])


def _estimate_s(workload: dict, protocol: dict) -> float:
    base = protocol["engine_start_s"] + protocol["idle_s"] + workload["warmup_s"] + _window_s(workload)
    return base if workload["kind"] == "closed_batch" else base + workload["cooldown_s"]


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
    share = bool(protocol.get("share_engines", False))
    swap = share and bool(protocol.get("swap_synthetic_acceptance", False))
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
                    family = f"{engine}-{pair_name}-{wl_name}-cg{int(graphs)}"
                    family_order: dict[str, int] | None = None  # point order key -> position (sharing)
                    family_engine_order: dict[str, int] = {}  # point engine key -> its first vector's position
                    order_keys: dict[str, str] = {}  # cell id -> order key (the engine key before any swap)
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
                                    order_key = _sha(engine_blob + _blob({"scheme": scheme, "rates": rates}), 10)
                                    # A swappable arm's vectors share one engine: its key leaves the rates
                                    # out; the order key keeps them, so the vectors still run shuffled.
                                    swapped = (swap and engine == "vllm" and bool(scheme.get("synthetic"))
                                               and wl["kind"] == "closed_batch" and rates is not None)
                                    ekey = (_sha(engine_blob + _blob({"scheme": scheme, "rates": "swapped"}), 10)
                                            if swapped else order_key)
                                    cell_id = _sha(base_blob + _blob(own))
                                    order_keys[cell_id] = order_key
                                    return Cell(
                                        cell_id=cell_id,
                                        campaign_id=campaign, name=name, role=role, engine=engine, model_pair=pair_name,
                                        scheme=scheme_name, method=scheme["method"], k=scheme.get("k"),
                                        synthetic=bool(scheme.get("synthetic")), acceptance_name=vname,
                                        acceptance_kind=kind, acceptance_rates=rates, configured_L=L,
                                        batch_size=batch, corpus=corpus_name, seed=seed, cuda_graphs=graphs,
                                        workload=wl_name, workload_kind=wl["kind"], device=config["device"],
                                        engine_key=ekey, run_order_seed=order_seed, estimated_s=est, spec=spec,
                                        family_id=family,
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
                                if share:
                                    # One order for the whole family: its point groups run in a shuffle
                                    # of the family's engine keys (ADR 0017), the same for every campaign
                                    # of the family (they run interleaved on the same engine starts).
                                    # Swapped vectors of one arm stay together (one engine), in the
                                    # shuffled order of their own keys (ADR 0039).
                                    if family_order is None:
                                        keys = sorted({order_keys[c.cell_id] for c in points})
                                        random.Random(f"{order_seed}:{family}").shuffle(keys)
                                        family_order = {k: i for i, k in enumerate(keys)}
                                        for c in sorted(points, key=lambda c: family_order[order_keys[c.cell_id]]):
                                            family_engine_order.setdefault(c.engine_key, family_order[order_keys[c.cell_id]])
                                    points.sort(key=lambda c: (family_engine_order[c.engine_key],
                                                               family_order[order_keys[c.cell_id]], c.name))
                                else:
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
    return CellTable(cells=cells, by_path=by_path, campaigns=campaigns, share_engines=share, swap_acceptance=swap,
                     engine_start_s=float(protocol["engine_start_s"]), idle_s=float(protocol["idle_s"]))


def _engine_groups(table: CellTable) -> dict[str, EngineGroup]:
    """Cut every campaign family into its chain of engine groups.

    A group = one phase (opening baseline, point, closing baseline) and one engine key across the
    family's campaigns. Order: the opening group, the point groups in the family's shuffled order
    (already the order of each campaign's points, see build()), the closing group. Inside a
    group: batch size, corpus, seed, name — ascending, so that the order never depends on how the
    config lists them. Without sharing each cell is a group of its own, in campaign order."""
    if not table.share_engines:
        return {c.record_path: EngineGroup(c.record_path, c.family_id, c.run_order_index, c.role, c.engine_key, (c,))
                for members in table.campaigns.values() for c in members}
    families: dict[str, dict[tuple[int, int, str], list[Cell]]] = {}
    for members in table.campaigns.values():
        for c in members:
            # Every campaign of a family has the same point keys in the same order (build()).
            slot = (PHASES.index(c.role), _point_rank(members, c), c.engine_key)
            families.setdefault(c.family_id, {}).setdefault(slot, []).append(c)
    out: dict[str, EngineGroup] = {}
    for family, slots in families.items():
        for index, slot in enumerate(sorted(slots)):
            # run_order_index is equal across a group unless its vectors are swapped: then it carries
            # the family's shuffled vector order (build()); batch size ascending inside each vector.
            members = sorted(slots[slot], key=lambda c: (c.run_order_index, c.batch_size, c.corpus, c.seed, c.name))
            gid = f"{family}.g{index:02d}"
            out[gid] = EngineGroup(gid, family, index, PHASES[slot[0]], slot[2], tuple(members))
    return out


def _point_rank(members: list[Cell], cell: Cell) -> int:
    """Position of a cell's engine key among its campaign's point keys (0 for baselines)."""
    if cell.role != ROLE_POINT:
        return 0
    keys: list[str] = []
    for c in members:
        if c.role == ROLE_POINT and c.engine_key not in keys:
            keys.append(c.engine_key)
    return keys.index(cell.engine_key)


def pending_records(table: CellTable, version: Any) -> set[str]:
    """Record paths an engine-sharing run must (re-)measure (ADR 0017).

    With sharing, group membership is decided here, at planning time, instead of by Snakemake's
    per-output triggers: a group job re-measures every cell it outputs, so a record that is done
    must not be an output at all. A cell is done when its record exists and
    - the stamp for its current id and config version exists (measured by a group job), or
    - there is no stamp for the record at all (measured one cell per job, without sharing) and the
      record itself holds the current cell id and version; the stamp is then written, so the
      record is read once.
    Then, per campaign, everything from the first cell not done onward is pending too: the
    campaign's order (opening → points → closing) must hold for what is re-measured, exactly as
    the chain re-runs a campaign's later cells without sharing (ADR 0051)."""
    pending: set[str] = set()
    for campaign, members in table.campaigns.items():
        stamp_dir = Path(STAMPS_DIR) / campaign
        try:
            stamps = set(os.listdir(stamp_dir))
        except FileNotFoundError:
            stamps = set()
        rerun = False
        for c in members:  # in run order
            if not rerun:
                rerun = not _done(c, version, stamps, stamp_dir)
            if rerun:
                pending.add(c.record_path)
    return pending


def _done(cell: Cell, version: Any, stamps: set[str], stamp_dir: Path) -> bool:
    if not os.path.exists(cell.record_path):
        return False
    stamp = Path(cell.stamp_path(version)).name
    if stamp in stamps:
        return True
    if any(s.startswith(cell.name + ".") for s in stamps):
        return False  # measured by a group job under another id or version
    try:
        import polars as pl

        row = pl.read_parquet(cell.record_path, columns=["cell_id", "version_param"]).row(0, named=True)
    except Exception:  # unreadable or empty: measure again rather than trust it
        return False
    if row["cell_id"] != cell.cell_id or str(row["version_param"]) != str(version):
        return False
    stamp_dir.mkdir(parents=True, exist_ok=True)
    (stamp_dir / stamp).touch()
    return True


def _with_order(cell: Cell, index: int) -> Cell:
    # Frozen dataclass: rebuild with the order index (cheap; no deep copy of spec).
    return Cell(**{f: getattr(cell, f) for f in cell.__dataclass_fields__ if f != "run_order_index"}, run_order_index=index)
