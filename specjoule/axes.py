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

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

# -- roles of a campaign's cells --------------------------------------------------------------------

ROLE_OPENING = "opening_baseline"
ROLE_CLOSING = "closing_baseline"
ROLE_POINT = "point"
# Run order of a campaign: opening baselines, the speculative points, closing baselines.
PHASES: tuple[str, ...] = (ROLE_OPENING, ROLE_POINT, ROLE_CLOSING)
BASELINE_ROLES: tuple[str, ...] = (ROLE_OPENING, ROLE_CLOSING)
# A baseline cell's name: the config's baseline scheme, its phase, then a window suffix (cells.campaign_arms writes
# ``<baseline>--open``, ``<baseline>--close--w1``). Attempt markers carry only the name; readers tell role by it.
BASELINE_CELL_NAME = r"--(open|close)(--w\d+)?$"

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
MODEL_PAIR = Axis(
    "model_pair",
    "models",
    "campaign",
    "model pair",
    shapes_engine=True,
    # draft_model is the scheme's own drafter where it has one (cells.Cell.identity).
    attributes=("target_model", "tensor_parallel_size", "draft_model"),
)
WORKLOAD = Axis(
    "workload",
    "workloads",
    "campaign",
    "workload",
    shapes_engine=False,
    keys=("workload_kind",),
    attributes=("prompt_len", "output_len", "request_rate", "concurrency"),
)
CORPUS = Axis("corpus", "corpora", "campaign", "corpus", shapes_engine=False)
CUDA_GRAPHS = Axis("cuda_graphs", "cuda_graphs", "campaign", "CUDA graphs", shapes_engine=True)
BATCH_SIZE = Axis("batch_size", "batch_sizes", "campaign", "batch", shapes_engine=False)
SCHEME = Axis("scheme", "schemes", "arm", "scheme", shapes_engine=True, keys=("method", "k"), attributes=("synthetic",))
ACCEPTANCE = Axis(
    "acceptance_name",
    "acceptance",
    "arm",
    "acceptance vector",
    shapes_engine=True,
    keys=("acceptance_kind", "configured_L"),
    attributes=("acceptance_rates",),
)
SEED = Axis("seed", "seeds", "campaign", "seed", shapes_engine=False, replicate=True)
WINDOW = Axis("window_index", "windows", "arm", "window", shapes_engine=False, replicate=True)
ENGINE_REPLICATE = Axis(
    "engine_replicate", "engine_replicates", "campaign", "engine replicate", shapes_engine=False, replicate=True
)
DEVICE = Axis("device", "device", "setting", "device", shapes_engine=True)
PREFIX_CACHING = Axis("prefix_caching", "prefix_caching", "setting", "prefix caching", shapes_engine=True)

AXES: tuple[Axis, ...] = (
    ENGINE,
    MODEL_PAIR,
    WORKLOAD,
    CORPUS,
    CUDA_GRAPHS,
    BATCH_SIZE,
    SCHEME,
    ACCEPTANCE,
    SEED,
    WINDOW,
    ENGINE_REPLICATE,
    DEVICE,
    PREFIX_CACHING,
)

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


def record_ordered(columns: Iterable[str], record_columns: Sequence[str] | None = None) -> tuple[str, ...]:
    """Columns in the order of the record schema (tables that follow the record: curves, summary). An axis
    column must be a record column (specjoule.records: appended, as every new column is)."""
    if record_columns is None:
        from specjoule.records import RECORD_COLUMNS

        record_columns = RECORD_COLUMNS
    position = {name: i for i, name in enumerate(record_columns)}
    cols = tuple(columns)
    unknown = [c for c in cols if c not in position]
    if unknown:
        raise KeyError(f"axis column(s) {unknown} are not record columns (specjoule.records.RECORD_FIELDS)")
    return tuple(sorted(cols, key=position.__getitem__))


@dataclass(frozen=True)
class KeyLists:
    """Every grouping-key list the analysis and the report use, as functions of a declaration."""

    # A record pairs with the baselines of its own campaign: its id and every campaign-scope axis (aggregate).
    pair: tuple[str, ...]
    # A configuration: every key column of a non-replicate axis, in record order (spread, derive, report.spread).
    configuration: tuple[str, ...]
    # A curve point's identity: its configuration and the seed it was measured under (derive).
    curve: tuple[str, ...]
    # Points along L: a configuration less its acceptance vector (checks).
    series: tuple[str, ...]
    # A figure's slice: the campaign's configuration axes in reading order (report.figures, report.render).
    slice: tuple[str, ...]
    # Every key column of a configuration in reading order (figure tooltips and matching).
    reading: tuple[str, ...]
    # The key columns of the configuration axes that vary inside a campaign, and their primary columns.
    arm: tuple[str, ...]
    arm_names: tuple[str, ...]
    # Axes a cell shares with the window before it on one engine when it needs no warm-up: every configuration
    # axis; only replicates (seed, window) may differ (cells.same_engine_state, ADR 0188).
    same_engine_state: tuple[str, ...]
    # Figure and report labels.
    labels: dict[str, str]

    @classmethod
    def of(cls, declared: Sequence[Axis], record_columns: Sequence[str] | None = None) -> KeyLists:
        config_axes = configuration(declared)
        campaign_axes = [a for a in grid(declared) if a.scope == "campaign"]
        arm_axes = [a for a in config_axes if a.scope == "arm"]
        acceptance = [a for a in declared if a.name == ACCEPTANCE.name]
        seed = [a for a in declared if a.name == SEED.name]
        return cls(
            pair=("campaign_id", *primary_columns(campaign_axes)),
            configuration=record_ordered(key_columns(config_axes), record_columns),
            curve=record_ordered(key_columns((*config_axes, *seed)), record_columns),
            series=record_ordered(key_columns(a for a in config_axes if a not in acceptance), record_columns),
            slice=primary_columns(a for a in config_axes if a.scope == "campaign"),
            reading=key_columns(config_axes),
            arm=key_columns(arm_axes),
            arm_names=primary_columns(arm_axes),
            same_engine_state=primary_columns(config_axes),
            labels={a.name: a.label for a in declared},
        )


# -- derived key lists ------------------------------------------------------------------------------
# Every name below is a function of AXES; tests/test_axes.py checks each module's lists against it. They
# are made on first use: record order needs specjoule.records (pyarrow), which planning never imports.

KEYS: KeyLists
PAIR_KEYS: tuple[str, ...]
CONFIGURATION_KEYS: tuple[str, ...]
CURVE_KEYS: tuple[str, ...]
SERIES_KEYS: tuple[str, ...]
SLICE_KEYS: tuple[str, ...]
READING_KEYS: tuple[str, ...]
ARM_KEYS: tuple[str, ...]
ARM_NAMES: tuple[str, ...]
SAME_ENGINE_STATE: tuple[str, ...]
LABELS: dict[str, str]
_DERIVED = {
    "PAIR_KEYS": "pair",
    "CONFIGURATION_KEYS": "configuration",
    "CURVE_KEYS": "curve",
    "SERIES_KEYS": "series",
    "SLICE_KEYS": "slice",
    "READING_KEYS": "reading",
    "ARM_KEYS": "arm",
    "ARM_NAMES": "arm_names",
    "SAME_ENGINE_STATE": "same_engine_state",
    "LABELS": "labels",
}


@functools.cache
def _keys() -> KeyLists:
    return KeyLists.of(AXES)


def __getattr__(name: str) -> Any:
    if name == "KEYS":
        return _keys()
    if name in _DERIVED:
        return getattr(_keys(), _DERIVED[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
