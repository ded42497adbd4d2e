"""The cell table: one row per measurement, built once per parse.

A *campaign* is the set of cells compared on one GPU: same engine, model pair, workload, batch
size, corpus, seed and graph mode. It holds an opening baseline, the speculative points in an
order shuffled under a recorded seed, and (by default) a closing baseline.

Identity is content-addressed: a cell's id hashes every parameter that changes what is measured,
and nothing else (not the run order, not the check thresholds), so adding a model, a batch size
or a corpus leaves every existing id and path untouched.
"""

from __future__ import annotations

import copy
import csv
import functools
import hashlib
import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specjoule import acceptance as acc
from specjoule import axes, schemes
from specjoule.cellspec import (
    AcceptanceSpec,
    ArmSpec,
    CampaignSpec,
    CellSpec,
    CorpusSpec,
    EngineSpec,
    ModelSpec,
    ProtocolSpec,
    SchemeSpec,
    WorkloadSpec,
)

CELLS_DIR = "results/cells"
TIMELINES_DIR = "results/timelines"
LOGS_DIR = "results/logs/cells"

# Role names are declared with the axes (specjoule.axes); kept here for the modules that read them from cells.
ROLE_OPENING, ROLE_CLOSING, ROLE_POINT = axes.ROLE_OPENING, axes.ROLE_CLOSING, axes.ROLE_POINT
# Where the group jobs of an engine-sharing run leave their "measured under this id" stamps (ADR 0017).
STAMPS_DIR = "results/.specjoule/measured"
PHASES = axes.PHASES


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
    # What the runner and engine read, typed (specjoule.cellspec); ``spec`` is its dict form.
    setup: CellSpec = field(compare=False, hash=False)
    run_order_index: int = 0
    run_order_seed: int = 0
    estimated_s: float = 0.0
    # Campaigns that differ only in batch size, corpus and seed (ADR 0017); not part of the identity.
    family_id: str = ""
    # Replicate axes (ADR 0064): in the identity only when not 0.
    window_index: int = 0
    engine_replicate: int = 0
    # Known at planning time (specjoule.support): the engine cannot run this cell; not part of the identity.
    unsupported_reason: str | None = None

    @functools.cached_property
    def spec(self) -> dict:
        """The cell's dict form (CellSpec.as_dict): the engine worker's input and what the cell id hashes."""
        return self.setup.as_dict()

    @property
    def n_gpus(self) -> int:
        """GPUs the cell holds: its target's tensor-parallel size (a drafter runs on the same GPUs; ADR 0155)."""
        return self.setup.engine.n_gpus

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
        """Stamp of a cell measured by an engine-group job under this id and version (specjoule.engine_jobs)."""
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
            "target_model": self.setup.engine.target.model,
            "tensor_parallel_size": self.n_gpus,
            # The model that drafts: the scheme's own drafter for eagle3, dflash, dspark (and an mtp assistant);
            # otherwise the pair's draft as before (draft_model; null for a pair without one).
            "draft_model": self.setup.scheme.drafter
            or (self.setup.engine.draft.model if self.setup.engine.draft else None),
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
            "prompt_len": self.setup.workload.prompt_len,
            "output_len": self.setup.workload.output_len,
            "request_rate": self.setup.workload.rate,
            "concurrency": self.setup.workload.concurrency,
            "device": self.device,
            "prefix_caching": self.setup.engine.prefix_caching,
            "run_order_index": self.run_order_index,
            "run_order_seed": self.run_order_seed,
            "window_index": self.window_index,
            "engine_replicate": self.engine_replicate,
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
    # A start that loads its compiled graphs from the campaign's compile cache (ADR 0189); None: planned as cold.
    engine_start_warm_s: float | None = None
    _groups: dict[str, EngineGroup] | None = field(default=None, repr=False)
    _warm_starts: frozenset[str] | None = field(default=None, repr=False)

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
                out[gid] = (
                    g
                    if len(kept) == len(g.cells)
                    else EngineGroup(gid, g.family_id, g.index, g.phase, g.engine_key, kept)
                )
        return out

    def warm_start_groups(self) -> frozenset[str]:
        """Engine groups whose start the runner makes from a warm compile cache (ADR 0189): a vLLM start on cuda
        whose engine configuration (start_signature) an earlier group of the plan already started, in plan order.
        Snakemake may run families in another order; the number of warm starts is the same, as long as two starts
        of one configuration do not run at once."""
        if self._warm_starts is None:
            seen: set[tuple] = set()
            warm = set()
            for gid, g in self.engine_groups().items():
                signature = start_signature(g.cells)
                if signature is None:
                    continue
                if signature in seen:
                    warm.add(gid)
                seen.add(signature)
            self._warm_starts = frozenset(warm)
        return self._warm_starts

    def group_estimate(self, group: EngineGroup, warm_cache: bool = True) -> GroupEstimate:
        """Where a group's device time goes: one engine start (warm from the compile cache where the plan says so
        and ``warm_cache``) and idle measurement, then each member's warm-up — only where the engine's state
        changed (cells.warmup_planned, ADR 0188) — window and cool-down. Members planned unsupported cost nothing."""
        measured = [c for c in group.cells if not c.unsupported_reason]
        if not measured:
            return GroupEstimate()
        warm = warm_cache and self.engine_start_warm_s is not None and group.group_id in self.warm_start_groups()
        warmups = skipped = 0
        warmup_s = windows_s = cooldown_s = 0.0
        previous = None
        for c in measured:
            wl = c.setup.workload
            if warmup_planned(previous, c):
                warmups += 1
                warmup_s += wl.warmup_s
            elif wl.warmup_s > 0:
                skipped += 1
            windows_s += wl.energy_window_s
            cooldown_s += 0.0 if wl.kind == "closed_batch" else wl.cooldown_s
            previous = c
        start = self.engine_start_warm_s if warm and self.engine_start_warm_s is not None else self.engine_start_s
        return GroupEstimate(start, warm, self.idle_s, warmup_s, warmups, skipped, windows_s, cooldown_s)

    def group_estimated_s(self, group: EngineGroup, warm_cache: bool = True) -> float:
        """Device seconds of one engine launch (group_estimate). ``warm_cache=False``: every start planned cold (a
        job's time limit must not rely on a cache that another node may not see)."""
        return self.group_estimate(group, warm_cache).total_s

    def _estimates(self) -> list[tuple[GroupEstimate, int]]:
        return [(self.group_estimate(g), g.cells[0].n_gpus) for g in self.engine_groups().values()]

    def estimated_gpu_s(self) -> float:
        """GPU-seconds: each engine launch's (a shared group's, or a cell's) device time × the GPUs it holds
        (ADR 0155)."""
        return sum(e.total_s * n for e, n in self._estimates())

    def estimated_device_s(self) -> float:
        """Wall-clock device seconds when the cells run one after another (equals estimated_gpu_s at TP = 1)."""
        return sum(e.total_s for e, _ in self._estimates())

    def estimated_window_s(self) -> float:
        """Energy-window seconds the plan holds (each cell's minimum window)."""
        return sum(c.setup.workload.energy_window_s for c in self.cells)

    def engine_starts(self) -> int:
        """Engines the plan starts: a group (or, without sharing, a cell) planned unsupported starts none."""
        if not self.share_engines:
            return sum(1 for c in self.cells if not c.unsupported_reason)
        return sum(1 for g in self.engine_groups().values() if any(not c.unsupported_reason for c in g.cells))

    def write_plan(self, path: str | Path) -> None:
        identity = [
            "campaign_id",
            "cell_name",
            "run_order_index",
            "role",
            "engine",
            "model_pair",
            "scheme",
            "method",
            "k",
            "acceptance_name",
            "configured_L",
            "batch_size",
            "corpus",
            "seed",
            "cuda_graphs",
            "workload",
            "window_index",
            "engine_replicate",
        ]
        # warmup: 1 = the cell warms up, 0 = it follows a window of the same engine state (ADR 0188);
        # warm_start: 1 = its group's start is planned from a warm compile cache (ADR 0189). Appended.
        columns = [
            *identity,
            "cell_id",
            "record_path",
            "estimated_gpu_s",
            "engine_group",
            "engine_start",
            "unsupported",
            "n_gpus",
            "warmup",
            "warm_start",
        ]
        # A cell's estimate is its share of its engine launch's: the first member carries the engine start and the
        # idle measurement, every member its warm-up (where planned), window and cool-down (the column still sums
        # to estimated_gpu_s()).
        rows: dict[str, tuple[str | None, bool, float, bool, bool]] = {}
        for gid, g in self.engine_groups().items():
            estimate = self.group_estimate(g)
            previous = None
            for i, c in enumerate(g.cells):
                wl = c.setup.workload
                warmup = warmup_planned(previous, c)
                est = (
                    (estimate.start_s + estimate.idle_s if i == 0 else 0.0)
                    + (wl.warmup_s if warmup else 0.0)
                    + wl.energy_window_s
                    + (0.0 if wl.kind == "closed_batch" else wl.cooldown_s)
                )
                if c.unsupported_reason:  # written without a lease or an engine start (ADR 0063)
                    rows[c.record_path] = (gid if self.share_engines else None, False, 0.0, False, False)
                    continue
                rows[c.record_path] = (
                    gid if self.share_engines else None,
                    i == 0,
                    est,
                    warmup,
                    i == 0 and estimate.warm_start,
                )
                previous = c
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh, delimiter="\t", lineterminator="\n")
            w.writerow(columns)
            for cells in self.campaigns.values():
                for c in cells:
                    ident = c.identity()
                    gid, starts, est, warmup, warm = rows[c.record_path]
                    w.writerow(
                        [ident.get(col) for col in identity]
                        + [
                            c.cell_id,
                            c.record_path,
                            f"{est * c.n_gpus:.0f}",
                            gid,
                            int(starts),
                            c.unsupported_reason or "",
                            c.n_gpus,
                            int(warmup),
                            int(warm),
                        ]
                    )

    def summary(self) -> str:
        by_launch = self._estimates()
        hours = sum(e.total_s * n for e, n in by_launch) / 3600
        engines = len({c.engine_key for c in self.cells})
        if self.share_engines:
            families = len({c.family_id for c in self.cells})
            starts = (
                f"{self.engine_starts()} engine starts: one per engine group, {families} campaign "
                f"famil{'y' if families == 1 else 'ies'}, share_engines on"
                + (", synthetic acceptance swapped in place" if self.swap_acceptance else "")
            )
        else:
            starts = f"{self.engine_starts()} engine starts: one per cell"
        estimates = [e for e, _ in by_launch]
        device_s = sum(e.total_s for e in estimates)
        share = (
            f", ≈ {100 * self.estimated_window_s() / device_s:.0f} % of it inside energy windows" if device_s else ""
        )
        if any(c.n_gpus > 1 for c in self.cells):  # tensor-parallel cells hold several GPUs at once (ADR 0155)
            share = f" ({device_s / 3600:.2f} device-hours one cell at a time{share})"
        unsupported = sum(1 for c in self.cells if c.unsupported_reason)
        skipped = (
            (
                f"; {unsupported} cell(s) the engine cannot run are written as unsupported records without "
                f"a GPU (see the plan's unsupported column)"
            )
            if unsupported
            else ""
        )
        return (
            f"{len(self.cells)} cells in {len(self.campaigns)} campaigns, {engines} distinct engine "
            f"configurations, estimated {hours:.2f} GPU-hours{share} ({starts}){skipped}"
            + (self._outside_windows(estimates) if device_s else "")
        )

    def _outside_windows(self, estimates: list[GroupEstimate]) -> str:
        """Where the planned device time outside the windows goes (ADR 0038, 0188, 0189)."""
        started = [e for e in estimates if e.start_s or e.warm_start]
        warm = sum(e.warm_start for e in started)
        cached = (
            f", {warm} of them from a warm compile cache"
            if warm
            else f", {len(self.warm_start_groups())} of them could load their compiled graphs from the compile cache "
            f"(protocol.engine_start_warm_s unset: planned cold)"
            if self.warm_start_groups()
            else ""
        )
        skipped = sum(e.warmups_skipped for e in estimates)
        return (
            f"\nOutside the energy windows: engine starts {sum(e.start_s for e in started):.0f} s{cached}; idle "
            f"power {sum(e.idle_s for e in started):.0f} s; warm-ups {sum(e.warmup_s for e in estimates):.0f} s "
            f"for {sum(e.warmups for e in estimates)} cells, {skipped} cells without one (same engine state as "
            f"the window before, ADR 0188)"
            + (
                f"; cool-downs {sum(e.cooldown_s for e in estimates):.0f} s"
                if any(e.cooldown_s for e in estimates)
                else ""
            )
            + "."
        )


@dataclass(frozen=True)
class GroupEstimate:
    """Planned device seconds of one engine launch, by where they go (CellTable.group_estimate)."""

    start_s: float = 0.0  # 0: every member planned unsupported, no engine start
    warm_start: bool = False  # planned from a warm compile cache (ADR 0189)
    idle_s: float = 0.0
    warmup_s: float = 0.0
    warmups: int = 0
    warmups_skipped: int = 0  # members that follow a window of the same engine state (ADR 0188)
    windows_s: float = 0.0
    cooldown_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.start_s + self.idle_s + self.warmup_s + self.windows_s + self.cooldown_s


def same_engine_state(previous: Cell | None, cell: Cell) -> bool:
    """``cell`` repeats, on the same engine, the configuration whose window ran just before it: only replicate
    axes differ (the seed's prompt sample, the window index; specjoule.axes.SAME_ENGINE_STATE holds the rest), in
    closed batches. The engine is then in the state a warm-up would bring it to — same batch shape, lengths,
    acceptance rates, captured graphs and compiled kernels, clocks at load a fraction of a second ago — so the
    warm-up is left out (ADR 0188). A swapped vector, another batch size, corpus or workload warm up again; so
    does every loop cell, whose warm-up brings arrivals and requests in flight to their steady state after the
    previous loop drained."""
    if previous is None or cell.workload_kind != "closed_batch" or previous.cell_id == cell.cell_id:
        return False
    return (
        previous.engine_key == cell.engine_key
        and all(getattr(previous, f) == getattr(cell, f) for f in axes.SAME_ENGINE_STATE)
        and previous.acceptance_rates == cell.acceptance_rates
        and previous.setup.workload == cell.setup.workload
    )


def warmup_planned(previous: Cell | None, cell: Cell) -> bool:
    """Whether ``cell`` runs its configured warm-up after ``previous`` on one engine (None: the engine's first)."""
    return cell.setup.workload.warmup_s > 0 and not same_engine_state(previous, cell)


# Engine options under which vLLM compiles nothing or keeps no compile cache: no start is warm (ADR 0189).
_NO_COMPILE_CACHE_ENV = ("VLLM_DISABLE_COMPILE_CACHE", "TORCH_COMPILE_DISABLE")


def start_signature(members: tuple[Cell, ...] | list[Cell]) -> tuple | None:
    """What a vLLM engine start is built from (runner._engine_spec): the engine key, the workload kind (offline
    engine or server), the largest batch and the first cell's acceptance rates. Two starts with one signature
    build the same engine, so the second loads the first one's compiled graphs from the compile cache (ADR 0189).
    None where no compile cache serves the start: not vLLM, not cuda (the CPU engine runs eager), every member
    planned unsupported, or engine options that turn compilation or its cache off."""
    measured = [c for c in members if not c.unsupported_reason]
    if not measured:
        return None
    first = measured[0]
    engine = first.setup.engine
    if first.engine != "vllm" or first.device != "cuda":
        return None
    options = dict(engine.options or {})
    env = options.get("env") or {}
    if any(str(env.get(k, "0")).strip().lower() not in ("", "0", "false") for k in _NO_COMPILE_CACHE_ENV):
        return None
    compilation = options.get("compilation_config")
    mode = compilation.get("mode", compilation.get("level")) if isinstance(compilation, dict) else None
    if options.get("enforce_eager") or (mode is not None and str(mode).upper() in ("0", "NONE")):
        return None
    return (first.engine_key, first.workload_kind, max(c.batch_size for c in measured), first.acceptance_rates)


def _estimate_s(workload: WorkloadSpec, protocol: dict) -> float:
    base = protocol["engine_start_s"] + protocol["idle_s"] + workload.warmup_s + workload.energy_window_s
    return base if workload.kind == "closed_batch" else base + workload.cooldown_s


def _scheme_variants(
    name: str, scheme: dict, config: dict
) -> list[tuple[str | None, str | None, tuple | None, float | None]]:
    """(acceptance name, kind, rates, configured L) for each cell a scheme yields."""
    if not scheme.get("synthetic"):
        return [(None, None, None, None)]
    out = []
    for vname in scheme.get("acceptance", list(config["acceptance"])):
        kind, rates = acc.resolve(config["acceptance"][vname], scheme["k"])
        out.append((vname, kind, tuple(rates), acc.mean_acceptance_length(rates)))
    return out


# -- expand: the grid's campaigns and the arms of each ----------------------------------------------


@dataclass(frozen=True)
class Arm:
    """One cell of a campaign before it has an identity: role, scheme, acceptance variant, window."""

    name: str
    role: str
    scheme_name: str
    scheme: dict
    variant: tuple  # (acceptance name, kind, rates, configured L); all None for baselines and model acceptance
    window_index: int = 0
    # The scheme's own `batch_sizes` (a subset of the grid's), None = every batch size. Not part of the arm's
    # identity: widening the subset later adds cells and leaves the measured ones' ids alone (ADR 0180).
    batch_sizes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class CampaignPlan:
    """A campaign's shared parameters: what every one of its cells measures alike."""

    campaign_id: str
    family_id: str
    engine: str
    pair_name: str
    workload_name: str
    setup: CampaignSpec  # what its cells share, typed; its dict form is the campaign's hash input
    engine_blob: str  # hash input of the engine-shaping parameters (engine keys)
    estimated_s: float


def replicate_suffix(index: int, letter: str) -> str:
    """Index 0 of a replicate axis leaves names and ids as they were before the axis existed (ADR 0064)."""
    return f"{letter}{index}" if index else ""


def expand(config: dict) -> Iterator[tuple[str, list[CampaignPlan]]]:
    """Every campaign family (engine × pair × workload × graph mode × engine replicate) with its campaigns
    (batch size × corpus × seed), in plan order. Pure: no ids, no order."""
    protocol = config["protocol"]
    engine_opts = config["engine_options"]
    for engine in config["engines"]:
        for pair_name, pair in config["models"].items():
            for wl_name, wl in config["workloads"].items():
                workload = WorkloadSpec(wl)
                est = _estimate_s(workload, protocol)
                for graphs in config["cuda_graphs"]:
                    for rep in range(int(config.get("engine_replicates", 1))):
                        rsuffix = "-" + replicate_suffix(rep, "r") if rep else ""
                        family = f"{engine}-{pair_name}-{wl_name}-cg{int(graphs)}{rsuffix}"
                        engine_base = {
                            "engine": engine,
                            "pair": pair,
                            "graphs": graphs,
                            "device": config["device"],
                            "prefix_caching": config["prefix_caching"],
                            "opts": engine_opts.get(engine, {}),
                        }
                        engine_blob = _blob(engine_base)
                        engine_spec = EngineSpec(
                            engine=engine,
                            target=ModelSpec(pair["target"]),
                            draft=ModelSpec(pair["draft"]) if pair.get("draft") is not None else None,
                            max_model_len=pair.get("max_model_len"),
                            cuda_graphs=graphs,
                            device=config["device"],
                            prefix_caching=config["prefix_caching"],
                            options=engine_opts.get(engine, {}),
                        )
                        plans = []
                        for batch in config["batch_sizes"]:
                            for corpus_name, corpus in config["corpora"].items():
                                for seed in config["seeds"]:
                                    campaign = (
                                        f"{engine}-{pair_name}-{wl_name}-b{batch}-{corpus_name}-s{seed}"
                                        f"-cg{int(graphs)}{rsuffix}"
                                    )
                                    setup = CampaignSpec(
                                        engine=engine_spec,
                                        workload=workload,
                                        corpus=CorpusSpec(
                                            corpus_name, corpus.get("pool_size", config["pool_size"]), corpus
                                        ),
                                        batch_size=batch,
                                        seed=seed,
                                        protocol=ProtocolSpec(protocol["idle_s"], protocol["engine_ready_timeout_s"]),
                                        meter=config["meter"],
                                        engine_replicate=rep,
                                    )
                                    plans.append(
                                        CampaignPlan(
                                            campaign, family, engine, pair_name, wl_name, setup, engine_blob, est
                                        )
                                    )
                        yield family, plans


def campaign_arms(config: dict, variants: dict[str, list]) -> list[Arm]:
    """The arms every campaign holds, in declaration order: opening baseline windows, each point's
    (variant, window), closing baseline windows. A point whose scheme names its own batch sizes is dropped
    from the campaigns of other batch sizes by arms_at()."""
    windows = int(config.get("windows", 1))
    baseline_name = next(n for n, s in config["schemes"].items() if s["method"] == "baseline")
    base = config["schemes"][baseline_name]
    none = (None,) * 4

    def wsuffix(w: int) -> str:
        return "--" + replicate_suffix(w, "w") if w else ""

    arms = [
        Arm(f"{baseline_name}--open{wsuffix(w)}", ROLE_OPENING, baseline_name, base, none, w) for w in range(windows)
    ]
    for sname, scheme in config["schemes"].items():
        if scheme["method"] == "baseline":
            continue
        only = tuple(scheme["batch_sizes"]) if scheme.get("batch_sizes") is not None else None
        scheme = {key: value for key, value in scheme.items() if key != "batch_sizes"}
        for variant in variants[sname]:
            label = sname if variant[0] is None else f"{sname}--{variant[0]}"
            arms.extend(
                Arm(f"{label}{wsuffix(w)}", ROLE_POINT, sname, scheme, variant, w, only) for w in range(windows)
            )
    if config["protocol"]["closing_baseline"]:
        arms.extend(
            Arm(f"{baseline_name}--close{wsuffix(w)}", ROLE_CLOSING, baseline_name, base, none, w)
            for w in range(windows)
        )
    return arms


def arms_at(arms: list[Arm], batch_size: int) -> list[Arm]:
    """The arms of a campaign at one batch size. A campaign left with no point by the schemes' own
    `batch_sizes` is a baseline sweep point: it keeps its opening baseline and drops the closing one,
    which would bracket nothing (ADR 0180)."""
    kept = [a for a in arms if a.batch_sizes is None or batch_size in a.batch_sizes]
    if len(kept) == len(arms):
        return arms
    if not any(a.role == ROLE_POINT for a in kept):
        kept = [a for a in kept if a.role != ROLE_CLOSING]
    return kept


# -- identify: content-addressed ids and engine keys ------------------------------------------------


@functools.lru_cache(maxsize=256)
def _local_config(model: str) -> dict | None:
    """A local model dir's config.json; None for a hub id or a dir that cannot be read."""
    from specjoule import models

    try:
        if models.classify_model_ref(model)[0] != "local":
            return None
        raw, _ = models.read_config(model)
    except (models.ModelShapeError, OSError):
        return None
    return raw


def _architecture(model: str) -> str | None:
    """architectures[0] of a local model dir's config.json; None for a hub id or a dir that cannot be read."""
    archs = (_local_config(model) or {}).get("architectures") or []
    return str(archs[0]) if archs else None


def _model_type(model: str) -> str | None:
    """model_type of a local model dir's config.json; None for a hub id or a dir that cannot be read."""
    return (_local_config(model) or {}).get("model_type")


def planned_unsupported(
    engine: str,
    target_model: str,
    scheme: dict,
    options: Mapping[str, Any] | None = None,
    load_format: str = "auto",
) -> str | None:
    """Why the bundled engine version cannot run this arm, known from its registry alone (specjoule.support,
    ADR 0063, 0194); None when the tables see no reason (the engine may still refuse at start, in its own words).
    ``options`` are the engine's engine_options: an attention backend the engine refuses for the target's
    architecture fails every arm of it, the baseline included."""
    from specjoule import support

    arch = _architecture(target_model)
    if arch is not None:
        ok, reason = support.supported(engine, arch)
        if not ok:
            return reason
        if scheme.get("method") == "mtp" and not scheme.get("drafter"):
            target_cfg = schemes.read_model_config(target_model)
            if target_cfg is not None and schemes.target_mtp_layers(target_cfg) == 0:
                # Not the engine's word: SGLang would map e.g. Qwen3MoeForCausalLM to its MTP class and run
                # an MTP layer the model does not have (random weights), which measures nothing real.
                return (
                    f"{arch} has no MTP layers: its config.json declares none of "
                    f"{', '.join(schemes.MTP_LAYER_KEYS)}; method mtp drafts with the target's own MTP layers"
                )
        ok, reason = support.attention_backend_supported(engine, arch, dict(options or {}))
        if not ok:
            return reason
        ok, reason = support.model_type_supported(engine, _model_type(target_model))
        if not ok:
            return reason
        by_method = {
            "eagle3": support.eagle3_target_supported,
            "mtp": support.mtp_target_supported,
            "dflash": support.dflash_target_supported,
        }
        check = by_method.get(str(scheme.get("method")))
        if check is not None:
            ok, reason = check(engine, arch)
            if not ok:
                return reason
        if scheme.get("method") == "mtp":
            ok, reason = support.mtp_dummy_load_supported(engine, arch, load_format)
            if not ok:
                return reason
    drafter = scheme.get("drafter")
    drafter_arch = _architecture(drafter) if drafter else None
    if drafter_arch is not None:
        ok, reason = support.supported(engine, drafter_arch)
        if not ok:
            return f"drafter {drafter}: {reason}"
    return None


def _arm_part(plan: CampaignPlan, arm: Arm, config: dict, swap: bool) -> tuple:
    """What identify needs of one arm that depends on its campaign only through the pair and the engine: the
    scheme with its drafter, the arm spec and its hash input, the order and engine keys, why it is unsupported."""
    _, _, rates, _ = arm.variant
    scheme = arm.scheme
    pair = config["models"][plan.pair_name]
    drafter = schemes.resolve_drafter(scheme, pair)
    if drafter and not scheme.get("drafter"):
        # The pair's own drafter for this method (models.<pair>.drafters): in the cell's scheme, so the id is the
        # one the same drafter given on the scheme would give.
        scheme = {**scheme, "drafter": drafter}
    arm_spec = ArmSpec(
        role=arm.role,
        scheme=SchemeSpec({**scheme, "name": arm.scheme_name}),
        acceptance=AcceptanceSpec(tuple(rates) if rates else None),
        window_index=arm.window_index,
    )
    campaign = plan.setup
    order_key = _sha(plan.engine_blob + _blob({"scheme": scheme, "rates": rates}), 10)
    # A swappable arm's vectors share one engine: its key leaves the rates out; the order key keeps
    # them, so the vectors still run shuffled.
    swapped = (
        swap
        and plan.engine == "vllm"
        and bool(scheme.get("synthetic"))
        and campaign.workload.kind == "closed_batch"
        and rates is not None
    )
    engine_key = _sha(plan.engine_blob + _blob({"scheme": scheme, "rates": "swapped"}), 10) if swapped else order_key
    unsupported = None
    if schemes.get(scheme["method"]).needs_drafter and not drafter:
        unsupported = (
            f"no {scheme['method']} drafter for model pair {plan.pair_name!r}: give the scheme a drafter "
            f"or the pair its own (models.{plan.pair_name}.drafters.{scheme['method']})"
        )
    elif config["protocol"].get("unsupported_from_tables", True):
        unsupported = planned_unsupported(
            plan.engine,
            campaign.engine.target.model,
            scheme,
            campaign.engine.options,
            campaign.engine.target.load_format,
        )
    return scheme, arm_spec, _blob(arm_spec.as_dict()), order_key, engine_key, unsupported


def identify(
    plan: CampaignPlan, arm: Arm, config: dict, swap: bool, base_blob: str, memo: dict | None = None
) -> tuple[Cell, str]:
    """The cell of one arm in one campaign, and its order key (the engine key before any swap).

    The id hashes the campaign's shared spec and the arm's own part; the window index enters the hash
    only when it is not 0, so the first window keeps the id the cell had before windows existed.
    ``memo`` (one dict per build) keeps an arm's own part across the campaigns that share its pair and engine:
    a paper grid has thousands of campaigns and a few dozen distinct arm parts."""
    campaign = plan.setup
    key = (id(arm), plan.pair_name, plan.engine, plan.engine_blob, campaign.workload.kind, campaign.engine.target.model)
    part = memo.get(key) if memo is not None else None
    if part is None:
        part = _arm_part(plan, arm, config, swap)
        if memo is not None:
            memo[key] = part
    scheme, arm_spec, arm_blob, order_key, engine_key, unsupported = part
    vname, kind, rates, L = arm.variant
    cell = Cell(
        cell_id=_sha(base_blob + arm_blob),
        campaign_id=plan.campaign_id,
        name=arm.name,
        role=arm.role,
        engine=plan.engine,
        model_pair=plan.pair_name,
        scheme=arm.scheme_name,
        method=scheme["method"],
        k=scheme.get("k"),
        synthetic=bool(scheme.get("synthetic")),
        acceptance_name=vname,
        acceptance_kind=kind,
        acceptance_rates=rates,
        configured_L=L,
        batch_size=campaign.batch_size,
        corpus=campaign.corpus.name,
        seed=campaign.seed,
        cuda_graphs=campaign.engine.cuda_graphs,
        workload=plan.workload_name,
        workload_kind=campaign.workload.kind,
        device=config["device"],
        engine_key=engine_key,
        run_order_seed=config["protocol"]["run_order_seed"],
        estimated_s=0.0 if unsupported else plan.estimated_s,
        setup=CellSpec(campaign, arm_spec),
        family_id=plan.family_id,
        window_index=arm.window_index,
        engine_replicate=campaign.engine_replicate,
        unsupported_reason=unsupported,
    )
    return cell, order_key


# -- order: the pre-registered run order -------------------------------------------------------------


class FamilyOrder:
    """One shuffled order of a family's point engines, the same for every campaign of the family (ADR 0017).

    Swapped vectors of one arm stay together (one engine), in the shuffled order of their own keys
    (ADR 0039); window replicates of a point run after every point of its engine had the previous
    window (interleaved, so drift is not mistaken for agreement: ADR 0064)."""

    def __init__(self, family: str, order_seed: int) -> None:
        self.family, self.order_seed = family, order_seed
        self.point_order: dict[str, int] | None = None  # order key -> position
        self.engine_order: dict[str, int] = {}  # engine key -> its first vector's position

    def sort(self, points: list[Cell], order_keys: dict[str, str]) -> None:
        if not points:
            return
        if self.point_order is None:
            keys = sorted({order_keys[c.cell_id] for c in points})
            random.Random(f"{self.order_seed}:{self.family}").shuffle(keys)
            self.point_order = {k: i for i, k in enumerate(keys)}
        new = sorted({order_keys[c.cell_id] for c in points} - set(self.point_order))
        if new:
            # Only schemes with their own batch sizes give campaigns of one family different points: keys a
            # later campaign adds go after the first campaign's, in their own seeded shuffle.
            random.Random(f"{self.order_seed}:{self.family}:{len(self.point_order)}").shuffle(new)
            self.point_order.update({k: len(self.point_order) + i for i, k in enumerate(new)})
        for c in sorted(points, key=lambda c: self.point_order[order_keys[c.cell_id]]):
            self.engine_order.setdefault(c.engine_key, self.point_order[order_keys[c.cell_id]])
        points.sort(
            key=lambda c: (
                self.engine_order[c.engine_key],
                c.window_index,
                self.point_order[order_keys[c.cell_id]],
                c.name,
            )
        )


def order_campaign(
    cells_: list[Cell], order_keys: dict[str, str], share: bool, family: FamilyOrder, order_seed: int
) -> list[Cell]:
    """Opening baselines, the points in their shuffled order, closing baselines; each with its index."""
    opening = [c for c in cells_ if c.role == ROLE_OPENING]
    closing = [c for c in cells_ if c.role == ROLE_CLOSING]
    # Sorted first: the order must not depend on how a YAML or JSON copy of the config orders its keys.
    points = sorted((c for c in cells_ if c.role == ROLE_POINT), key=lambda c: c.name)
    if share:
        family.sort(points, order_keys)
    else:
        # Salted by the campaign id so that campaigns do not share one order (thermal drift stays uncorrelated).
        random.Random(f"{order_seed}:{cells_[0].campaign_id}").shuffle(points)
    return [_with_order(c, i) for i, c in enumerate([*opening, *points, *closing])]


def build(config: dict) -> CellTable:
    """Expand a validated config into cells: expand → identify → order. Cheap: plain Python, no per-cell I/O."""
    protocol = config["protocol"]
    order_seed = protocol["run_order_seed"]
    share = bool(protocol.get("share_engines", False))
    swap = share and bool(protocol.get("swap_synthetic_acceptance", False))
    variants = {n: _scheme_variants(n, s, config) for n, s in config["schemes"].items() if s["method"] != "baseline"}
    arms = campaign_arms(config, variants)

    cells: list[Cell] = []
    by_path: dict[str, Cell] = {}
    campaigns: dict[str, list[Cell]] = {}
    arm_parts: dict = {}  # identify's memo of each arm's own part
    for family, plans in expand(config):
        family_order = FamilyOrder(family, order_seed)
        for plan in plans:
            base_blob = _blob(plan.setup.as_dict())  # hashed once per campaign; each cell adds only its own part
            order_keys: dict[str, str] = {}
            members = []
            for arm in arms_at(arms, plan.setup.batch_size):
                cell, order_keys[cell.cell_id] = identify(plan, arm, config, swap, base_blob, arm_parts)
                members.append(cell)
            ordered = order_campaign(members, order_keys, share, family_order, order_seed)
            for c in ordered:
                by_path[c.record_path] = c
            campaigns[plan.campaign_id] = ordered
            cells.extend(ordered)
    return CellTable(
        cells=cells,
        by_path=by_path,
        campaigns=campaigns,
        share_engines=share,
        swap_acceptance=swap,
        engine_start_s=float(protocol["engine_start_s"]),
        idle_s=float(protocol["idle_s"]),
        engine_start_warm_s=(
            float(protocol["engine_start_warm_s"]) if protocol.get("engine_start_warm_s") is not None else None
        ),
    )


def _engine_groups(table: CellTable) -> dict[str, EngineGroup]:
    """Cut every campaign family into its chain of engine groups.

    A group = one phase (opening baseline, point, closing baseline) and one engine key across the
    family's campaigns. Order: the opening group, the point groups in the family's shuffled order
    (already the order of each campaign's points, see build()), the closing group. Inside a
    group: batch size, corpus, seed, name — ascending, so that the order never depends on how the
    config lists them. Without sharing each cell is a group of its own, in campaign order."""
    if not table.share_engines:
        return {
            c.record_path: EngineGroup(c.record_path, c.family_id, c.run_order_index, c.role, c.engine_key, (c,))
            for members in table.campaigns.values()
            for c in members
        }
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


def _with_order(cell: Cell, index: int) -> Cell:
    # Frozen dataclass: a shallow copy with the order index set. Not Cell(**fields): a frozen dataclass's
    # __init__ sets its 30 fields one object.__setattr__ at a time, a third of build() on a paper grid.
    ordered = copy.copy(cell)
    object.__setattr__(ordered, "run_order_index", index)
    return ordered
