"""The grid's axes, declared once (ADR 0160).

Each axis says where the config lists its values, which record columns carry it, at which scope it
varies (a campaign's shared parameters, or an arm inside a campaign), whether it shapes the engine
start (enters the engine key), whether it only repeats a configuration (a replicate), and how figures
and the report label it. Every grouping-key list of the analysis and the report is derived here from
this one declaration, so adding an axis touches this module and the code that gives the axis meaning
(cells.expand, the runner or engine that acts on it), not the key lists.

The order of ``AXES`` is the order a reader meets the axes in figures and report tables; lists that
follow the record instead (summary and curve tables) are sorted by ``specjoule.records`` position.
Role names of a campaign's cells live here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

# -- roles of a campaign's cells --------------------------------------------------------------------

ROLE_OPENING = "opening_baseline"
ROLE_CLOSING = "closing_baseline"
ROLE_POINT = "point"
# Run order of a campaign: opening baselines, the speculative points, closing baselines.
PHASES: tuple[str, ...] = (ROLE_OPENING, ROLE_POINT, ROLE_CLOSING)
BASELINE_ROLES: tuple[str, ...] = (ROLE_OPENING, ROLE_CLOSING)

Scope = Literal["campaign", "arm", "setting"]


@dataclass(frozen=True)
class Axis:
    """One dimension of the grid.

    ``name`` is also its primary record column (and the Cell attribute of that name). ``keys`` are the
    further record columns that name a configuration together with it (a scheme's method and k); they
    are functions of the axis value. ``attributes`` are record columns the value determines that are
    carried but never grouped on (a workload's prompt length). Scope: ``campaign`` axes are shared by
    every cell of a campaign (they enter the campaign id), ``arm`` axes vary inside one, ``setting`` is
    one value per config (no grid: never a grouping key)."""

    name: str
    config_key: str
    scope: Scope
    label: str
    shapes_engine: bool  # enters the engine key: cells differing in it never share an engine start
    replicate: bool = False  # a repeat of one configuration: summaries pool over it, never group on it
    keys: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()

    @property
    def key_columns(self) -> tuple[str, ...]:
        return (self.name, *self.keys)

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.name, *self.keys, *self.attributes)


ENGINE = Axis("engine", "engines", "campaign", "engine", shapes_engine=True)
MODEL_PAIR = Axis("model_pair", "models", "campaign", "model pair", shapes_engine=True,
                  # draft_model is the scheme's own drafter where it has one (cells.Cell.identity).
                  attributes=("target_model", "tensor_parallel_size", "draft_model"))
WORKLOAD = Axis("workload", "workloads", "campaign", "workload", shapes_engine=False, keys=("workload_kind",),
                attributes=("prompt_len", "output_len", "request_rate", "concurrency"))
CORPUS = Axis("corpus", "corpora", "campaign", "corpus", shapes_engine=False)
CUDA_GRAPHS = Axis("cuda_graphs", "cuda_graphs", "campaign", "CUDA graphs", shapes_engine=True)
BATCH_SIZE = Axis("batch_size", "batch_sizes", "campaign", "batch", shapes_engine=False)
SCHEME = Axis("scheme", "schemes", "arm", "scheme", shapes_engine=True, keys=("method", "k"),
              attributes=("synthetic",))
ACCEPTANCE = Axis("acceptance_name", "acceptance", "arm", "acceptance vector", shapes_engine=True,
                  keys=("acceptance_kind", "configured_L"), attributes=("acceptance_rates",))
SEED = Axis("seed", "seeds", "campaign", "seed", shapes_engine=False, replicate=True)
WINDOW = Axis("window_index", "windows", "arm", "window", shapes_engine=False, replicate=True)
ENGINE_REPLICATE = Axis("engine_replicate", "engine_replicates", "campaign", "engine replicate", shapes_engine=False,
                        replicate=True)
DEVICE = Axis("device", "device", "setting", "device", shapes_engine=True)
PREFIX_CACHING = Axis("prefix_caching", "prefix_caching", "setting", "prefix caching", shapes_engine=True)

AXES: tuple[Axis, ...] = (ENGINE, MODEL_PAIR, WORKLOAD, CORPUS, CUDA_GRAPHS, BATCH_SIZE, SCHEME, ACCEPTANCE,
                          SEED, WINDOW, ENGINE_REPLICATE, DEVICE, PREFIX_CACHING)

# Record identity columns that come from the plan's bookkeeping, not from an axis value.
PLAN_COLUMNS: tuple[str, ...] = ("cell_id", "campaign_id", "cell_name", "role", "run_order_index", "run_order_seed")


def by_name(name: str) -> Axis:
    for a in AXES:
        if a.name == name:
            return a
    raise KeyError(f"no axis {name!r}; declared: {', '.join(a.name for a in AXES)}")


def grid(axes: Iterable[Axis] = AXES) -> tuple[Axis, ...]:
    """Axes that span the grid (settings are one value per config)."""
    return tuple(a for a in axes if a.scope != "setting")


def configuration(axes: Iterable[Axis] = AXES) -> tuple[Axis, ...]:
    """Grid axes that tell configurations apart (replicates only repeat one)."""
    return tuple(a for a in grid(axes) if not a.replicate)


def key_columns(axes: Iterable[Axis], without: Iterable[str] = ()) -> tuple[str, ...]:
    """The axes' key columns in declaration order, less ``without``."""
    drop = set(without)
    return tuple(c for a in axes for c in a.key_columns if c not in drop)


def primary_columns(axes: Iterable[Axis], without: Iterable[str] = ()) -> tuple[str, ...]:
    drop = set(without)
    return tuple(a.name for a in axes if a.name not in drop)


def record_ordered(columns: Iterable[str]) -> tuple[str, ...]:
    """Columns in the order of the record schema (tables that follow the record: curves, summary)."""
    from specjoule.records import RECORD_FIELDS

    position = {name: i for i, (name, *_) in enumerate(RECORD_FIELDS)}
    cols = tuple(columns)
    unknown = [c for c in cols if c not in position]
    if unknown:
        raise KeyError(f"axis column(s) {unknown} are not record columns (specjoule.records.RECORD_FIELDS)")
    return tuple(sorted(cols, key=position.__getitem__))


# -- derived key lists ------------------------------------------------------------------------------
# Everything below is a function of AXES; tests/test_axes.py checks each against the declaration.

# What a campaign shares: a record pairs with the baselines of its own campaign (analysis.aggregate).
CAMPAIGN_AXES: tuple[Axis, ...] = tuple(a for a in grid() if a.scope == "campaign")
PAIR_KEYS: tuple[str, ...] = ("campaign_id", *primary_columns(CAMPAIGN_AXES))
# A configuration: every key column of a non-replicate axis, in record order (spread, derive, report.spread).
CONFIGURATION_KEYS: tuple[str, ...] = record_ordered(key_columns(configuration()))
# A curve's identity columns: the configuration and the seed it was measured under.
CURVE_KEYS: tuple[str, ...] = record_ordered(key_columns((*configuration(), SEED)))
# Points along L: a configuration less its acceptance vector (analysis.checks).
SERIES_KEYS: tuple[str, ...] = record_ordered(key_columns(a for a in configuration() if a is not ACCEPTANCE))
# A figure's slice: the campaign's configuration axes in reading order (report.figures, report.render).
SLICE_KEYS: tuple[str, ...] = primary_columns(a for a in configuration() if a.scope == "campaign")
# Every key column of a configuration in reading order (figure tooltips and matching).
READING_KEYS: tuple[str, ...] = key_columns(configuration())
# An arm of a campaign: its configuration axes that vary inside the campaign.
ARM_KEYS: tuple[str, ...] = key_columns(a for a in configuration() if a.scope == "arm")
# The primary columns of those arm axes: what names an arm in a report table (scheme, acceptance vector).
ARM_NAMES: tuple[str, ...] = primary_columns(a for a in configuration() if a.scope == "arm")
# Axes a window replicate shares with the window before it on one engine (runner.same_engine_state).
SAME_ENGINE_STATE: tuple[str, ...] = primary_columns(a for a in grid() if a is not WINDOW)

# Figure and report labels of the axes; the other dimensions figures slice by are not grid axes.
LABELS: dict[str, str] = {a.name: a.label for a in AXES}


def leading(keys: Iterable[str], *first: str) -> tuple[str, ...]:
    """``keys`` with ``first`` moved to the front in that order (a table's reading order), the rest as declared."""
    rest = tuple(keys)
    missing = [k for k in first if k not in rest]
    if missing:
        raise KeyError(f"{missing} not among {rest}")
    return (*first, *(k for k in rest if k not in first))


def substitute(keys: Iterable[str], replacements: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """``keys`` with each named key replaced in place by its replacement columns (none: dropped)."""
    return tuple(c for k in keys for c in replacements.get(k, (k,)))
