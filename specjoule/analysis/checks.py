"""Pre-registered discard checks (ADR 0022, 0023, 0024).

Every threshold comes from the config's ``checks`` section, written before the runs; the config
hash the checks ran under is kept with the results. Each check is a named function over the
aggregated records that returns one row per campaign: status, value, threshold, the cells
concerned and a readable detail.

Status: ``fail`` (discard: derive refuses the campaign), ``flag`` (kept, marked on every curve row
it concerns), ``pass``, ``not_applicable`` (nothing to check, e.g. GPU telemetry on a CPU run).

Two levels:
- *campaign* checks compare arms with each other (baseline present, drift, committed spread,
  batch shape, same GPU, energy measured, pre-registration): the campaign is the unit.
- *cell* checks judge one record on its own (acceptance length, counters, window, power,
  temperature, throttle, failed requests, other processes, regime). They are still reported once
  per campaign — status is the worst over its cells, ``cell_names`` the cells with that status,
  ``value`` the worst value — so checks.md stays one readable row per campaign and check, and derive
  can mark exactly the curve rows a flag concerns (a failure marks its whole campaign, ADR 0025).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from specjoule import axes
from specjoule.analysis import AnalysisError
from specjoule.analysis.aggregate import window_index_expr
from specjoule.analysis.spread import is_measured
from specjoule.axes import ROLE_CLOSING, ROLE_OPENING, ROLE_POINT

PASS, FAIL, FLAG, NA = "pass", "fail", "flag", "not_applicable"
STATUSES = (FAIL, FLAG, PASS, NA)
STATUS_RANK = {NA: 0, PASS: 1, FLAG: 2, FAIL: 3}
# The one check whose failure does not refuse a campaign: it refuses only the energy columns.
ENERGY_CHECK = "energy_measured"
MAX_DETAIL_CELLS = 5

CHECK_SCHEMA = pl.Schema(
    {
        "check": pl.String,
        "campaign_id": pl.String,
        "cell_names": pl.List(pl.String),
        "status": pl.String,
        "value": pl.Float64,
        "threshold": pl.Float64,
        "detail": pl.String,
    }
)


@dataclass(frozen=True)
class Thresholds:
    """The config's ``checks`` section, typed. Defaults are the schema's (config/schema.yaml)."""

    baseline_drift_max: float
    acceptance_length_tolerance: float
    committed_spread_max: float
    concurrency_spread_max: float
    steady_state_band: float
    max_backlog_growth: float
    max_send_lag_s: float
    min_window_s: float
    min_energy_updates: int
    max_temperature_c: float
    forbidden_throttle_mask: int
    max_failed_requests: int
    power_slack_w: float
    idle_regime_ratio: float
    allow_failed_checks: bool
    engine_config_may_differ: list[str] = dataclasses.field(default_factory=list)
    # Issue 17 (ADR 0081-0083); the defaults here serve direct construction, from_config takes the schema's.
    acceptance_length_z: float = 4.0
    interval_width_max: float = 1.0
    reference_shift_max: float = 0.05
    # Not thresholds: the config's `report` section, pre-registered with it, that the spread checks read.
    interval_level: float = 0.95
    reference_evidence: str | None = None
    model_residual_max: float = 0.25  # issue 18 (ADR 0102); no schema default, see config/schema.yaml
    gpu_energy_imbalance_max: float = 0.10  # issue 23 (ADR 0156); the schema's default, hash_neutral
    # ADR 0227: no default at all; unset, window_drift is not applicable (nothing committed is re-judged).
    window_drift_max: float | None = None
    # Not a threshold: the runner's pre-registered policy for a GPU already in use at a cell's start (ADR 0133).
    gpu_in_use: str = "flag"

    @classmethod
    def from_config(cls, checks: Mapping[str, Any] | None, report: Mapping[str, Any] | None = None) -> Thresholds:
        from specjoule import config as _config

        props = _config._schema()["properties"]
        # A threshold added after configs were pre-registered may have no schema default (filling one in would
        # change those configs' hash unless marked hash_neutral); the dataclass default then applies.
        defaults = {k: v["default"] for k, v in props["checks"]["properties"].items() if "default" in v} | LATE_DEFAULTS
        given = dict(checks or {})
        names = {f.name for f in dataclasses.fields(cls)} - set(REPORT_CONTEXT)
        unknown = sorted(set(given) - names)
        if unknown:
            raise _config.ConfigError(
                f"checks.{unknown[0]}", given[unknown[0]], f"unknown check threshold; known: {', '.join(sorted(names))}"
            )
        merged = {**defaults, **given}
        merged["engine_config_may_differ"] = list(merged.get("engine_config_may_differ") or [])
        report_defaults = {k: props["report"]["properties"][k].get("default") for k in REPORT_CONTEXT}
        context = {**report_defaults, **{k: v for k, v in dict(report or {}).items() if k in REPORT_CONTEXT}}
        return cls(**{n: merged[n] for n in names if n in merged}, **context)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Fields of Thresholds read from the config's `report` section, not from `checks`.
REPORT_CONTEXT: tuple[str, ...] = ("interval_level", "reference_evidence")

# Thresholds added after configs were run: the schema gives them no default (a filled default would change every
# older config's hash and flag its records under `preregistration`); these apply when a config does not set them.
LATE_DEFAULTS: dict[str, Any] = {"steady_state_band": 0.1, "max_backlog_growth": 0.1, "max_send_lag_s": 0.05}


CheckFn = Callable[[pl.DataFrame, Thresholds, "str | None"], pl.DataFrame]


@dataclass(frozen=True)
class Check:
    name: str
    level: str  # "campaign" | "cell"
    doc: str
    fn: CheckFn


CHECKS: dict[str, Check] = {}


def check(name: str, level: str, doc: str) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        CHECKS[name] = Check(name, level, doc, fn)
        return fn

    return register


# ----------------------------------------------------------------------------------------------
# helpers

C = pl.col
meter_none = C("meter").is_null() | (C("meter") == "none")
is_point = C("role") == ROLE_POINT
is_baseline = C("role").is_in([ROLE_OPENING, ROLE_CLOSING])


def _r(expr: pl.Expr, digits: int = 4) -> pl.Expr:
    return expr.cast(pl.Float64).round_sig_figs(digits)


def _lit_f(v: float | None) -> pl.Expr:
    return pl.lit(v, pl.Float64)


def _reduce_cells(
    df: pl.DataFrame,
    name: str,
    *,
    status: pl.Expr,
    value: pl.Expr,
    detail: pl.Expr,
    threshold: pl.Expr | float | None,
    worst: str = "max",
) -> pl.DataFrame:
    """Collapse per-cell verdicts to one row per campaign.

    ``detail`` is evaluated per cell and should be null for a passing cell; the campaign's detail
    joins the distinct details of the cells that carry the campaign's (worst) status.
    """
    thr = threshold if isinstance(threshold, pl.Expr) else _lit_f(threshold)
    ev = df.select(
        "campaign_id",
        "cell_name",
        "run_order_index",
        status.alias("status"),
        value.cast(pl.Float64).alias("value"),
        detail.alias("detail"),
        thr.cast(pl.Float64).alias("threshold"),
    ).with_columns(C("status").replace_strict(STATUS_RANK, return_dtype=pl.Int8).alias("rank"))
    ev = ev.filter(C("rank") == C("rank").max().over("campaign_id"))
    agg_value = C("value").max() if worst == "max" else C("value").min()
    out = (
        ev.sort("campaign_id", "run_order_index")
        .group_by("campaign_id", maintain_order=True)
        .agg(
            C("cell_name").alias("cell_names"),
            C("status").first(),
            agg_value.alias("value"),
            C("threshold").drop_nulls().first().alias("threshold"),
            C("detail").drop_nulls().unique(maintain_order=True).alias("details"),
            pl.len().alias("n"),
        )
    )
    n_det = C("details").list.len()
    joined = C("details").list.head(MAX_DETAIL_CELLS).list.join("; ")
    more = (
        pl.when(n_det > MAX_DETAIL_CELLS)
        .then(pl.format("; … and {} more", n_det - MAX_DETAIL_CELLS))
        .otherwise(pl.lit(""))
    )
    summary = (
        pl.when(C("status") == PASS)
        .then(pl.format("{} cell(s) within threshold", C("n")))
        .otherwise(pl.format("{} cell(s)", C("n")))
    )
    detail_out = pl.when(n_det > 0).then(joined + more).otherwise(summary)
    return out.select(
        pl.lit(name).alias("check"),
        "campaign_id",
        "cell_names",
        "status",
        "value",
        "threshold",
        detail_out.alias("detail"),
    )


def _campaign_rows(name: str, out: pl.DataFrame) -> pl.DataFrame:
    return out.select(
        pl.lit(name).alias("check"),
        "campaign_id",
        "cell_names",
        "status",
        C("value").cast(pl.Float64),
        C("threshold").cast(pl.Float64),
        "detail",
    )


def _ordered_names(df: pl.DataFrame, mask: pl.Expr) -> pl.Expr:
    """Agg expression: cell names (in run order) where ``mask`` holds."""
    return C("cell_name").sort_by("run_order_index").filter(mask.sort_by("run_order_index"))


def _telemetry(
    df: pl.DataFrame,
    name: str,
    col: str,
    bad: pl.Expr,
    bad_detail: pl.Expr,
    threshold: float | None,
    value: pl.Expr | None = None,
) -> pl.DataFrame:
    """GPU telemetry columns: evaluated where recorded; missing is not applicable without a meter
    (CPU) and a failure with one (an NVML run that did not record it cannot be trusted)."""
    status = (
        pl.when(C(col).is_null() & meter_none)
        .then(pl.lit(NA))
        .when(C(col).is_null())
        .then(pl.lit(FAIL))
        .when(bad)
        .then(pl.lit(FAIL))
        .otherwise(pl.lit(PASS))
    )
    detail = (
        pl.when(C(col).is_null() & meter_none)
        .then(pl.lit(f"{col} not recorded: no meter (meter none)"))
        .when(C(col).is_null())
        .then(pl.format("{}: {} not recorded under meter {}", C("cell_name"), pl.lit(col), C("meter")))
        .when(bad)
        .then(bad_detail)
    )
    value = C(col) if value is None else pl.when(C(col).is_not_null()).then(value)
    return _reduce_cells(df, name, status=status, value=value, detail=detail, threshold=threshold)


# ----------------------------------------------------------------------------------------------
# campaign-level checks


@check(
    "baseline_present",
    "campaign",
    "every point and the closing baseline pair with exactly one opening baseline on the full pairing key",
)
def baseline_present(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    unpaired = C("opening_cell_name").is_null()
    out = df.group_by("campaign_id").agg(
        (C("role") == ROLE_OPENING).sum().alias("n_open"),
        unpaired.sum().alias("value"),
        _ordered_names(df, unpaired).alias("unpaired"),
        C("cell_name").sort_by("run_order_index").alias("all_cells"),
    )
    fail = (C("n_open") == 0) | (C("value") > 0)
    return _campaign_rows(
        "baseline_present",
        out.with_columns(
            pl.when(fail).then(pl.lit(FAIL)).otherwise(pl.lit(PASS)).alias("status"),
            pl.when(fail).then(C("unpaired")).otherwise(C("all_cells")).alias("cell_names"),
            _lit_f(0).alias("threshold"),
            pl.when(C("n_open") == 0)
            .then(pl.lit("no opening baseline record in this campaign"))
            .when(fail)
            .then(
                pl.format(
                    "no opening baseline with the same engine, model pair, batch, corpus, seed, "
                    "graph mode and workload for: {}",
                    C("unpaired").list.join(", "),
                )
            )
            .otherwise(pl.lit("every arm pairs with the opening baseline"))
            .alias("detail"),
        ),
    )


_DRIFT_METRICS = ("mj_per_committed_token", "s_per_committed_token")


def _common_window_sides(df: pl.DataFrame) -> pl.DataFrame:
    """Per campaign: the windows both baseline sides hold (``_common``, ``_n_common``) and each side's mean over
    them (``common_opening_*``, ``common_closing_*``). A side cut short (a window not measured, ADR 0216) is
    compared window for window, not its mean against a mean over other windows."""
    rows = df.filter(C("role").is_in([ROLE_OPENING, ROLE_CLOSING]) & is_measured(df)).with_columns(
        window_index_expr(df)
    )
    both = rows.group_by("campaign_id", "_window").agg(C("role").n_unique().alias("_sides")).filter(C("_sides") == 2)
    rows = rows.join(both.select("campaign_id", "_window"), on=["campaign_id", "_window"], how="semi")

    def side_mean(role: str, m: str) -> pl.Expr:
        x = C(m).filter(C("role") == role)
        return pl.when(x.null_count() > 0).then(None).otherwise(x.mean()).alias(f"common_{role.split('_')[0]}_{m}")

    return rows.group_by("campaign_id").agg(
        C("_window").filter(C("role") == ROLE_OPENING).sort().alias("_common"),
        C("_window").filter(C("role") == ROLE_OPENING).len().alias("_n_common"),
        *(side_mean(role, m) for role in (ROLE_OPENING, ROLE_CLOSING) for m in _DRIFT_METRICS),
    )


@check(
    "baseline_drift",
    "campaign",
    "opening vs closing baseline, relative: mJ per committed token; without an energy meter, "
    "seconds per committed token (window / committed tokens, the time factor of energy per token)",
)
def baseline_drift(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    # Every opening window carries its campaign's side means (ADR 0080): one row per campaign.
    base = (
        df.filter(C("role") == ROLE_OPENING)
        .select(
            "campaign_id",
            "opening_cell_name",
            "closing_cell_name",
            "opening_mj_per_committed_token",
            "closing_mj_per_committed_token",
            "opening_s_per_committed_token",
            "closing_s_per_committed_token",
            "opening_cell_names",
            "closing_cell_names",
            "opening_n",
            "closing_n",
        )
        .unique("campaign_id", keep="first", maintain_order=True)
    )
    points = df.group_by("campaign_id").agg((C("role") == ROLE_POINT).any().alias("has_points"))
    camps = df.select("campaign_id").unique().join(base, on="campaign_id", how="left").join(points, on="campaign_id")
    camps = camps.join(_common_window_sides(df), on="campaign_id", how="left").with_columns(C("_n_common").fill_null(0))
    # Sides with different windows (a closing baseline cut short): compare the windows both hold.
    cut = C("closing_cell_name").is_not_null() & ((C("_n_common") < C("opening_n")) | (C("_n_common") < C("closing_n")))
    camps = camps.with_columns(
        *(
            pl.when(cut).then(C(f"common_{side}_{m}")).otherwise(C(f"{side}_{m}")).alias(f"{side}_{m}")
            for side in ("opening", "closing")
            for m in _DRIFT_METRICS
        )
    )
    energy = C("opening_mj_per_committed_token").is_not_null() & C("closing_mj_per_committed_token").is_not_null()
    any_energy = C("opening_mj_per_committed_token").is_not_null() | C("closing_mj_per_committed_token").is_not_null()
    o = pl.when(energy).then(C("opening_mj_per_committed_token")).otherwise(C("opening_s_per_committed_token"))
    c = pl.when(energy).then(C("closing_mj_per_committed_token")).otherwise(C("closing_s_per_committed_token"))
    drift = (o - c).abs() / ((o + c) / 2)
    metric = (
        pl.when(energy)
        .then(pl.lit("mJ per committed token"))
        .otherwise(pl.lit("meter none: seconds per committed token (window_s / committed_tokens)"))
    )
    no_pair = C("opening_cell_name").is_null() | C("closing_cell_name").is_null()
    mixed = ~energy & any_energy
    # Several windows per side: each side is the mean of its windows (said only then, so one-window text is unchanged).
    windows = (
        pl.when(cut)
        .then(
            pl.format(
                "; window(s) {} only, on both sides: the closing baseline holds {} window(s), the opening {} (the "
                "rest not measured); ratios use the opening baseline alone",
                C("_common").cast(pl.List(pl.String)).list.join(", "),
                C("closing_n"),
                C("opening_n"),
            )
        )
        .when((C("opening_n") > 1) | (C("closing_n") > 1))
        .then(pl.format("; means of {} opening and {} closing windows", C("opening_n"), C("closing_n")))
        .otherwise(pl.lit(""))
    )
    no_common = cut & (C("_n_common") == 0)
    status = (
        pl.when(no_pair | no_common)
        .then(pl.lit(NA))
        .when(mixed | drift.is_null() | (drift > th.baseline_drift_max))
        .then(pl.lit(FAIL))
        .otherwise(pl.lit(PASS))
    )
    detail = (
        pl.when(C("opening_cell_name").is_null())
        .then(pl.lit("no opening baseline"))
        .when(C("closing_cell_name").is_null() & ~C("has_points"))
        .then(
            pl.lit(
                "a baseline sweep point (no speculative arm at this batch size, ADR 0180): no closing baseline, "
                "nothing to bracket; drift not measurable"
            )
        )
        .when(C("closing_cell_name").is_null())
        .then(pl.lit("no closing baseline in this campaign: drift not measurable"))
        .when(no_common)
        .then(pl.lit("no window measured on both baseline sides: drift not measurable"))
        .when(mixed)
        .then(pl.lit("energy measured on one baseline only"))
        .when(drift.is_null())
        .then(pl.format("{}: not recorded on a baseline", metric))
        .otherwise(
            pl.format(
                "{}: opening {}, closing {} ({} % apart){}", metric, _r(o, 5), _r(c, 5), _r(drift * 100, 3), windows
            )
        )
    )
    names = pl.concat_list(
        C("opening_cell_names").fill_null(pl.lit([], pl.List(pl.String))),
        C("closing_cell_names").fill_null(pl.lit([], pl.List(pl.String))),
    )
    return _campaign_rows(
        "baseline_drift",
        camps.with_columns(
            status.alias("status"),
            names.alias("cell_names"),
            drift.alias("value"),
            _lit_f(th.baseline_drift_max).alias("threshold"),
            detail.alias("detail"),
        ),
    )


@check(
    "same_gpu",
    "campaign",
    "every arm of a campaign measured on one GPU (UUID; on a GPU-less host, the host); "
    "a tensor-parallel campaign on one set of GPUs, in any order (ADR 0155)",
)
def same_gpu(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    out = df.group_by("campaign_id").agg(
        C("device_key").drop_nulls().unique().sort().alias("keys"),
        C("device_key").null_count().alias("n_null"),
        pl.len().alias("n"),
        _ordered_names(df, C("pair_cross_gpu") | C("device_key").is_null()).alias("crossed"),
        C("cell_name").sort_by("run_order_index").alias("all_cells"),
    )
    n_keys = C("keys").list.len()
    fail = (n_keys > 1) | ((n_keys == 1) & (C("n_null") > 0))
    status = pl.when(n_keys == 0).then(pl.lit(NA)).when(fail).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))
    on_host = C("keys").list.first().str.starts_with("host:")
    detail = (
        pl.when(n_keys == 0)
        .then(pl.lit("neither GPU UUID nor hostname recorded"))
        .when(fail)
        .then(
            pl.format(
                "arms on {} devices ({}); {} cell(s) without one; paired across devices: {}",
                n_keys,
                C("keys").list.join(", "),
                C("n_null"),
                C("crossed").list.join(", "),
            )
        )
        .when(on_host)
        .then(pl.format("no GPU (CPU run): all {} arms on {}", C("n"), C("keys").list.first()))
        .otherwise(pl.format("all {} arms on {}", C("n"), C("keys").list.first()))
    )
    return _campaign_rows(
        "same_gpu",
        out.with_columns(
            status.alias("status"),
            pl.when(fail).then(C("crossed")).otherwise(C("all_cells")).alias("cell_names"),
            (n_keys + (C("n_null") > 0).cast(pl.UInt32)).alias("value"),
            _lit_f(1).alias("threshold"),
            detail.alias("detail"),
        ),
    )


@check(
    "energy_measured",
    "campaign",
    "an energy meter ran on every arm (meter != none, energy recorded); otherwise energy curves are refused",
)
def energy_measured(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    missing = meter_none | C("energy_j").is_null()
    out = df.group_by("campaign_id").agg(
        missing.sum().alias("value"),
        pl.len().alias("n"),
        _ordered_names(df, missing).alias("missing"),
        C("meter").fill_null("null").unique().sort().alias("meters"),
        C("cell_name").sort_by("run_order_index").alias("all_cells"),
    )
    fail = C("value") > 0
    return _campaign_rows(
        "energy_measured",
        out.with_columns(
            pl.when(fail).then(pl.lit(FAIL)).otherwise(pl.lit(PASS)).alias("status"),
            pl.when(fail).then(C("missing")).otherwise(C("all_cells")).alias("cell_names"),
            _lit_f(0).alias("threshold"),
            pl.when(fail)
            .then(
                pl.format(
                    "energy not measured on {} of {} cells (meter: {}): no energy curve for this campaign",
                    C("value"),
                    C("n"),
                    C("meters").list.join(", "),
                )
            )
            .otherwise(pl.format("meter {} on all {} cells", C("meters").list.join(", "), C("n")))
            .alias("detail"),
        ),
    )


@check(
    "committed_spread",
    "campaign",
    "committed tokens across arms, (max - min) / mean; closed batch: per generation (committed / repeats), "
    "since faster arms repeat more often inside the window",
)
def committed_spread(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    closed = C("workload_kind") == "closed_batch"
    q = pl.when(closed).then(C("committed_tokens") / C("repeats")).otherwise(C("committed_tokens").cast(pl.Float64))
    out = (
        df.with_columns(q.alias("q"))
        .group_by("campaign_id")
        .agg(
            ((C("q").max() - C("q").min()) / C("q").mean()).alias("value"),
            C("q").null_count().alias("n_null"),
            C("q").min().alias("lo"),
            C("q").max().alias("hi"),
            closed.first().alias("closed"),
            (C("workload_kind") == "closed_loop").first().alias("closed_loop"),
            (C("batch_size") * C("output_len")).first().alias("expected"),
            C("cell_name").sort_by("run_order_index").alias("cell_names"),
        )
    )
    fail = (C("n_null") > 0) | (C("value") > th.committed_spread_max)
    what = pl.when(C("closed")).then(pl.lit("committed tokens per generation")).otherwise(pl.lit("committed tokens"))
    detail = (
        pl.when(C("n_null") > 0)
        .then(pl.format("{} not recorded on {} cell(s)", what, C("n_null")))
        .when(C("closed"))
        .then(
            pl.format(
                "{}: {} .. {} across arms (B × output_len = {}), spread {} %",
                what,
                _r(C("lo"), 6),
                _r(C("hi"), 6),
                C("expected"),
                _r(C("value") * 100, 3),
            )
        )
        .otherwise(pl.format("{}: {} .. {} across arms, spread {} %", what, C("lo"), C("hi"), _r(C("value") * 100, 3)))
    )
    # A closed loop fixes the concurrency and lets the work done vary: throughput is its outcome (ADR 0111).
    fixed_concurrency = C("closed_loop").fill_null(False)
    return _campaign_rows(
        "committed_spread",
        out.with_columns(
            pl.when(fixed_concurrency)
            .then(pl.lit(NA))
            .when(fail)
            .then(pl.lit(FAIL))
            .otherwise(pl.lit(PASS))
            .alias("status"),
            pl.when(~fixed_concurrency).then(C("value")).alias("value"),
            _lit_f(th.committed_spread_max).alias("threshold"),
            pl.when(fixed_concurrency)
            .then(
                pl.lit(
                    "closed loop: the concurrency is fixed and the committed tokens are the "
                    "outcome (steady_state and batch_shape compare the arms)"
                )
            )
            .otherwise(detail)
            .alias("detail"),
        ),
    )


@check(
    "batch_shape",
    "campaign",
    "arms ran at the same batch shape: open and closed loop, mean running requests within the threshold of the "
    "baseline mean (an outcome in open loop, the clients' number in closed loop); closed batch, exactly "
    "batch_size requests per generation",
)
def batch_shape(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    closed = C("workload_kind") == "closed_batch"
    expected = (C("repeats") * C("batch_size")).cast(pl.Float64)
    dev_closed = (C("requests_completed") - expected).abs() / expected
    base = C("baseline_mean_running_requests")
    dev_open = (C("mean_running_requests") - base).abs() / base
    dev = pl.when(closed).then(dev_closed).otherwise(dev_open)
    limit = pl.when(closed).then(_lit_f(0.0)).otherwise(_lit_f(th.concurrency_spread_max))
    status = pl.when(dev.is_null() | (dev > limit + 1e-12)).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(closed & dev.is_null())
        .then(pl.format("{}: requests_completed or repeats not recorded", C("cell_name")))
        .when(dev.is_null())
        .then(pl.format("{}: mean running requests not recorded (arm or baseline)", C("cell_name")))
        .when(status == FAIL)
        .then(
            pl.when(closed)
            .then(
                pl.format(
                    "{}: {} requests completed for {} generations of {}",
                    C("cell_name"),
                    C("requests_completed"),
                    C("repeats"),
                    C("batch_size"),
                )
            )
            .otherwise(
                pl.format(
                    "{}: mean running requests {} vs baseline {} ({} % apart)",
                    C("cell_name"),
                    _r(C("mean_running_requests")),
                    _r(base),
                    _r(dev * 100, 3),
                )
            )
        )
    )
    return _reduce_cells(df, "batch_shape", status=status, value=dev, detail=detail, threshold=limit)


@check(
    "preregistration",
    "campaign",
    "records were measured under the config the checks run under (same config hash); flagged, not failed, "
    "because a config edit outside `checks` also changes the hash",
)
def preregistration(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    differs = C("config_hash").ne_missing(pl.lit(config_hash, pl.String))
    out = df.group_by("campaign_id").agg(
        differs.sum().alias("value"),
        _ordered_names(df, differs).alias("differ"),
        C("config_hash").fill_null("not recorded").unique().sort().alias("hashes"),
        C("cell_name").sort_by("run_order_index").alias("all_cells"),
    )
    if config_hash is None:
        status, detail = pl.lit(NA), pl.lit("no config hash given to the checks")
    else:
        status = pl.when(C("value") > 0).then(pl.lit(FLAG)).otherwise(pl.lit(PASS))
        detail = (
            pl.when(C("value") > 0)
            .then(
                pl.format(
                    "records measured under config {} but checked under {}: confirm the `checks` section was not edited after the runs",
                    C("hashes").list.join(", "),
                    pl.lit(config_hash),
                )
            )
            .otherwise(pl.lit(f"records and checks share config {config_hash}"))
        )
    return _campaign_rows(
        "preregistration",
        out.with_columns(
            status.alias("status"),
            pl.when(C("value") > 0).then(C("differ")).otherwise(C("all_cells")).alias("cell_names"),
            _lit_f(0).alias("threshold"),
            detail.alias("detail"),
        ),
    )


# Keys of engine_config that belong to the arm itself, so they differ from the baseline by design.
# ``speculative`` and every ``speculative_*`` key: the scheme under test (method, k, drafter, rates).
# ``max_num_scheduled_tokens``: vLLM sets it only when speculating (max_num_batched_tokens less the
# draft slots, config/vllm.py ``_set_max_num_scheduled_tokens`` in 0.32); a baseline has none.
# Nothing else: async scheduling, model runner, capture sizes, compilation and attention backend are
# engine choices that the scheme happens to trigger, and exactly what made the H200 ratios
# uninterpretable (validation/h200-2026-12/README.md). A campaign that accepts one lists it in
# ``checks.engine_config_may_differ`` before the runs; it is then flagged, not failed.
ENGINE_CONFIG_ARM_KEYS: tuple[str, ...] = ("speculative", "max_num_scheduled_tokens")
ENGINE_CONFIG_ARM_PREFIXES: tuple[str, ...] = ("speculative_",)
ENGINE_CONFIG_LIST_SHOWN = 6  # a long list (capture sizes) is shown as its first items, last item and length


def _arm_key(key: str) -> bool:
    return key in ENGINE_CONFIG_ARM_KEYS or key.startswith(ENGINE_CONFIG_ARM_PREFIXES)


def _show(v: Any) -> str:
    import json

    if v is _ABSENT:
        return "absent"
    if isinstance(v, list) and len(v) > ENGINE_CONFIG_LIST_SHOWN:
        head = ", ".join(json.dumps(x) for x in v[: ENGINE_CONFIG_LIST_SHOWN - 1])
        return f"[{head}, …, {json.dumps(v[-1])}] ({len(v)} items)"
    return json.dumps(v)


_ABSENT = object()


def engine_config_diff(base: Mapping[str, Any], point: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, baseline value, point value) for every non-arm key that differs; a key one side lacks is absent."""
    out = []
    for key in sorted(set(base) | set(point)):
        if _arm_key(key):
            continue
        b, p = base.get(key, _ABSENT), point.get(key, _ABSENT)
        if b != p:
            out.append((key, b, p))
    return out


@check(
    "engine_config_matched",
    "campaign",
    "every arm ran with its opening baseline's effective engine configuration (engine_config), except keys "
    "intrinsic to the arm (speculative_*); a difference listed in engine_config_may_differ is flagged",
)
def engine_config_matched(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    import json

    accepted = set(th.engine_config_may_differ)
    cols = ["campaign_id", "cell_name", "role", "run_order_index", "opening_cell_name", "engine_config"]
    rows = df.select(*cols).sort("campaign_id", "run_order_index", "cell_name").to_dicts()
    by_campaign: dict[str, list[dict]] = {}
    for r in rows:
        by_campaign.setdefault(r["campaign_id"], []).append(r)
    out = []
    for campaign, cells in by_campaign.items():
        names = [c["cell_name"] for c in cells]
        recorded = [c for c in cells if c["engine_config"] is not None]
        if not recorded:
            out.append((campaign, names, NA, None, "no record carries engine_config (measured before it was recorded)"))
            continue
        configs = {c["cell_name"]: json.loads(c["engine_config"]) for c in recorded}
        verdicts: dict[str, list[str]] = {FAIL: [], FLAG: []}
        details: dict[str, list[str]] = {FAIL: [], FLAG: []}
        compared = 0
        for c in cells:
            if c["role"] == ROLE_OPENING or c["opening_cell_name"] is None:
                continue  # the reference itself; an unpaired cell is baseline_present's failure
            compared += 1
            base_name = c["opening_cell_name"]
            if c["cell_name"] not in configs or base_name not in configs:
                missing = [n for n in (base_name, c["cell_name"]) if n not in configs]
                verdicts[FAIL].append(c["cell_name"])
                details[FAIL].append(f"{c['cell_name']}: engine_config not recorded for {', '.join(missing)}")
                continue
            diff = engine_config_diff(configs[base_name], configs[c["cell_name"]])
            if not diff:
                continue
            status = FLAG if all(k in accepted for k, _, _ in diff) else FAIL
            note = " (accepted in advance)"
            parts = [
                f"{k}: {_show(b)} → {_show(p)}" + (note if k in accepted and status == FAIL else "") for k, b, p in diff
            ]
            verdicts[status].append(c["cell_name"])
            details[status].append(f"{c['cell_name']} vs {base_name}: " + ", ".join(parts))
        status = FAIL if verdicts[FAIL] else FLAG if verdicts[FLAG] else PASS
        if not compared:
            out.append((campaign, names, NA, None, "no cell pairs with an opening baseline (see baseline_present)"))
            continue
        if status == PASS:
            out.append(
                (
                    campaign,
                    names,
                    PASS,
                    0.0,
                    f"{len(recorded)} cell(s) with the baseline's engine configuration (arm keys aside)",
                )
            )
            continue
        shown = details[status][:MAX_DETAIL_CELLS]
        more = len(details[status]) - len(shown)
        detail = "; ".join(shown) + (f"; … and {more} more" if more > 0 else "")
        if status == FLAG:
            detail = "differences accepted in advance (checks.engine_config_may_differ): " + detail
        out.append((campaign, verdicts[status], status, float(len(verdicts[status])), detail))
    frame = pl.DataFrame(
        out,
        schema={
            "campaign_id": pl.String,
            "cell_names": pl.List(pl.String),
            "status": pl.String,
            "value": pl.Float64,
            "detail": pl.String,
        },
        orient="row",
    )
    return _campaign_rows("engine_config_matched", frame.with_columns(_lit_f(0).alias("threshold")))


# ----------------------------------------------------------------------------------------------
# spread checks (issue 17): read across the replicates of a configuration, reported per campaign

# Points along L: every identity of a configuration but its acceptance vector (of whatever kind: the
# energy-vs-acceptance figure ranks minimum-variance and geometric vectors on one axis).
SERIES_KEYS: tuple[str, ...] = axes.SERIES_KEYS


def _energy_ratio_summary(df: pl.DataFrame, level: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(point records with configuration columns, their configurations' energy-ratio intervals)."""
    from specjoule.analysis import spread

    points = spread.configurations(spread.point_frame(df))
    summary = spread.summarize(points, spread.SUMMARY_KEYS, spread.SUMMARY_METRICS[:2], level=level)
    return points, summary


def _neighbour_extent(summary: pl.DataFrame) -> pl.DataFrame:
    """Per configuration: how far its interval reaches toward its neighbours along L, over half the gap
    between their ratios (the largest of the two sides); ``neighbour`` names the side that sets it."""
    rows = []
    have = summary.filter(C("energy_ratio_mean").is_not_null())
    for _, series in have.partition_by(list(SERIES_KEYS), as_dict=True, maintain_order=True).items():
        s = series.with_columns(pl.coalesce("configured_L", "realized_L_mean").alias("_L")).sort("_L", "cell_name")
        recs = s.to_dicts()
        for i, r in enumerate(recs):
            worst, name = None, None
            if r["energy_ratio_ci_low"] is not None:
                for j in (i - 1, i + 1):
                    if not 0 <= j < len(recs):
                        continue
                    nb = recs[j]
                    gap = abs(nb["energy_ratio_mean"] - r["energy_ratio_mean"])
                    toward = (
                        r["energy_ratio_ci_high"] - r["energy_ratio_mean"]
                        if nb["energy_ratio_mean"] >= r["energy_ratio_mean"]
                        else r["energy_ratio_mean"] - r["energy_ratio_ci_low"]
                    )
                    value = float("inf") if gap == 0 else toward / (gap / 2)
                    if worst is None or value > worst:
                        worst, name = value, f"{nb['cell_name']} ({nb['energy_ratio_mean']:.4g})"
            rows.append(
                {
                    **{k: r[k] for k in spread_keys()},
                    "extent": worst,
                    "neighbour": name,
                    "n_neighbours": (i > 0) + (i < len(recs) - 1),
                }
            )
    schema = {
        **{k: summary.schema[k] for k in spread_keys()},
        "extent": pl.Float64,
        "neighbour": pl.String,
        "n_neighbours": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def spread_keys() -> tuple[str, ...]:
    from specjoule.analysis.spread import SUMMARY_KEYS

    return SUMMARY_KEYS


@check(
    "interval_width",
    "campaign",
    "flag a point whose energy-ratio interval reaches further toward a neighbour along L than interval_width_max "
    "× half the gap between their ratios: too wide to rank against it (ADR 0081); one replicate unit: not applicable",
)
def interval_width(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    points, summary = _energy_ratio_summary(df, th.interval_level)
    ext = _neighbour_extent(summary)
    keys = list(spread_keys())
    verdict = summary.join(ext, on=keys, how="left", nulls_equal=True)
    per_point = points.select("campaign_id", C("record_cell_name").alias("cell"), *keys).join(
        verdict, on=keys, how="left", nulls_equal=True
    )
    cells = df.select("campaign_id", "cell_name", "run_order_index").join(
        per_point.rename({"cell_name": "point"}),
        left_on=["campaign_id", "cell_name"],
        right_on=["campaign_id", "cell"],
        how="left",
    )
    status = (
        pl.when(C("energy_ratio_ci_low").is_null() | C("extent").is_null())
        .then(pl.lit(NA))
        .when(C("extent") > th.interval_width_max + 1e-12)
        .then(pl.lit(FLAG))
        .otherwise(pl.lit(PASS))
    )
    interval = pl.format(
        "{} [{}, {}] over {} {}(s)",
        _r(C("energy_ratio_mean")),
        _r(C("energy_ratio_ci_low")),
        _r(C("energy_ratio_ci_high")),
        C("energy_ratio_n"),
        C("interval_level"),
    )
    detail = (
        pl.when(C("point").is_null())
        .then(None)  # a baseline: the denominator, not a ranked point
        .when(C("energy_ratio_mean").is_null())
        .then(pl.format("{}: no energy ratio", C("point")))
        .when(C("energy_ratio_ci_low").is_null())
        .then(pl.format("{}: one replicate unit, no interval to judge", C("point")))
        .when(C("extent").is_null())
        .then(pl.format("{}: no neighbour along L", C("point")))
        .when(status == FLAG)
        .then(
            pl.format(
                "{}: ratio {} reaches {}× half the gap toward {}",
                C("point"),
                interval,
                _r(C("extent"), 3),
                C("neighbour"),
            )
        )
    )
    return _reduce_cells(
        cells, "interval_width", status=status, value=C("extent"), detail=detail, threshold=th.interval_width_max
    )


@check(
    "reproduces_reference",
    "campaign",
    "flag a point whose energy ratio shifts from the reference evidence (report.reference_evidence) by more than "
    "reference_shift_max and whose shift interval excludes 0 (ADR 0083); not applicable without a reference",
)
def reproduces_reference(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    if th.reference_evidence is None:
        return _reduce_cells(
            df,
            "reproduces_reference",
            status=pl.lit(NA),
            value=_lit_f(None),
            detail=pl.lit("no report.reference_evidence configured"),
            threshold=th.reference_shift_max,
        )
    from specjoule.analysis import compare_evidence, evidence

    ref = evidence.load(evidence.resolve(th.reference_evidence))
    this = df.with_columns(evidence.measure_key(df))
    # A = the reference, B = this run: the shift is this run's ratio over the reference's, less one.
    table = compare_evidence.compare(ref, this, level=th.interval_level, tolerance=th.reference_shift_max)
    cells = this.join(
        table.select(
            "measure_key",
            "shift",
            "shift_ci_low",
            "shift_ci_high",
            "reproduces",
            "basis",
            "energy_ratio_a",
            "energy_ratio_b",
        ),
        on="measure_key",
        how="left",
    )
    matched = C("basis").is_not_null()
    status = (
        pl.when(~is_point | ~matched | C("reproduces").is_null())
        .then(pl.lit(NA))
        .when(C("reproduces"))
        .then(pl.lit(PASS))
        .otherwise(pl.lit(FLAG))
    )
    shift = pl.format(
        "ratio {} vs reference {} ({} %{})",
        _r(C("energy_ratio_b")),
        _r(C("energy_ratio_a")),
        _r(C("shift") * 100, 3),
        pl.when(C("shift_ci_low").is_not_null())
        .then(pl.format(", interval [{}, {}] %", _r(C("shift_ci_low") * 100, 3), _r(C("shift_ci_high") * 100, 3)))
        .otherwise(pl.lit("")),
    )
    detail = (
        pl.when(~is_point)
        .then(None)  # a baseline: compared through the ratios built on it
        .when(~matched)
        .then(
            pl.format(
                "{}: no cell with the same measured parameters in {}", C("cell_name"), pl.lit(th.reference_evidence)
            )
        )
        .when(status == NA)
        .then(pl.format("{}: not judged: {}", C("cell_name"), C("basis")))
        .when(status == FLAG)
        .then(pl.format("{}: {}; judged by {}", C("cell_name"), shift, C("basis")))
    )
    return _reduce_cells(
        cells,
        "reproduces_reference",
        status=status,
        value=C("shift").abs(),
        detail=detail,
        threshold=th.reference_shift_max,
    )


# ----------------------------------------------------------------------------------------------
# cell-level checks


def accepted_count_variance() -> pl.Expr:
    """Variance of the drafts accepted in one draft under the configured unconditional rates r_i.

    Acceptance is prefix-closed (position i is kept only if every earlier one is), so the count A has
    P(A >= i) = r_i: E[A] = Σ r_i and E[A²] = Σ (2i − 1) r_i, hence Var A = Σ (2i − 1) r_i − (Σ r_i)².
    0 exactly when every rate is 0 or 1 (a deterministic vector).
    """
    rates = C("acceptance_rates")
    second = rates.list.eval((pl.element() * (2 * pl.int_range(pl.len()) + 1)).sum()).list.first()
    return (second - rates.list.sum() ** 2).clip(lower_bound=0.0)


def acceptance_draws() -> pl.Expr:
    """Independent acceptance draws in the window (ADR 0082). vLLM draws a uniform per request and
    position (rejection_sampler.py, synthetic mode): every draft — one request in one round — is its
    own draw, at B > 1 too. SGLang's simulated length is drawn once per verify step for the whole
    batch (spec_utils._sample_simulated_acc_len): its draws are the steps, drafts / B."""
    closed = C("workload_kind") == "closed_batch"
    b_eff = pl.when(closed).then(C("batch_size").cast(pl.Float64)).otherwise(C("mean_running_requests"))
    per_step = C("acceptance_mechanism") == "sglang_simulate_acc_len"
    return pl.when(per_step).then(C("drafts") / b_eff).otherwise(C("drafts").cast(pl.Float64))


@check(
    "acceptance_length",
    "cell",
    "|realized - configured| mean acceptance length, for points with a configured L: a fail needs the gap to exceed "
    "the tolerance and, for a stochastic vector, acceptance_length_z standard errors of realized L (ADR 0082)",
)
def acceptance_length(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    applicable = is_point & C("configured_L").is_not_null()
    dev = (C("realized_L") - C("configured_L")).abs()
    deterministic = C("acceptance_rates").list.eval(pl.element().is_in([0.0, 1.0])).list.all().fill_null(True)
    draws = acceptance_draws()
    se = pl.when(deterministic).then(0.0).otherwise((accepted_count_variance() / draws).sqrt())
    # Synthetic rates act on the tokens proposed; a proposer that drafts fewer than k (vLLM's n-gram, when the
    # match has fewer than k tokens after it) caps L below the configured value: say so, it is the cause.
    short = C("k").is_not_null() & (C("drafts") > 0) & (C("draft_tokens") < C("k") * C("drafts"))
    short_drafts = (
        pl.when(short)
        .then(
            pl.format(
                "; the proposer drafted {} of k = {} tokens per draft", _r(C("draft_tokens") / C("drafts"), 4), C("k")
            )
        )
        .otherwise(pl.lit(""))
    )
    outside_tol = dev > th.acceptance_length_tolerance + 1e-12
    # A deterministic vector has SE 0: the rule reduces to the exact test against the tolerance.
    outside_se = dev > th.acceptance_length_z * se.fill_null(0.0) + 1e-12
    status = (
        pl.when(~applicable)
        .then(pl.lit(NA))
        .when(dev.is_null() | (outside_tol & outside_se))
        .then(pl.lit(FAIL))
        .otherwise(pl.lit(PASS))
    )
    n_draws = (
        pl.when(draws == draws.round(0))
        .then(draws.cast(pl.Int64).cast(pl.String))
        .otherwise(_r(draws, 6).cast(pl.String))
    )
    sampling = pl.format("SE {} from {} draws; {} SE", _r(se, 3), n_draws, _r(dev / se, 3))
    detail = (
        pl.when(~applicable)
        .then(pl.lit("no configured acceptance length (baseline or model acceptance)"))
        .when(dev.is_null())
        .then(pl.format("{}: realized L not measured (no drafts)", C("cell_name")))
        .when((status == FAIL) & deterministic)
        .then(
            pl.format(
                "{}: realized L {} vs configured {}{}",
                C("cell_name"),
                _r(C("realized_L"), 5),
                _r(C("configured_L"), 5),
                short_drafts,
            )
        )
        .when(status == FAIL)
        .then(
            pl.format(
                "{}: realized L {} vs configured {} ({}, beyond {}){}",
                C("cell_name"),
                _r(C("realized_L"), 5),
                _r(C("configured_L"), 5),
                sampling,
                pl.lit(th.acceptance_length_z),
                short_drafts,
            )
        )
        .when(~deterministic)
        .then(
            pl.format(
                "{}: realized L {} vs configured {} ({}: within the tolerance or {} SE)",
                C("cell_name"),
                _r(C("realized_L"), 5),
                _r(C("configured_L"), 5),
                sampling,
                pl.lit(th.acceptance_length_z),
            )
        )
    )
    return _reduce_cells(
        df,
        "acceptance_length",
        status=status,
        value=pl.when(applicable).then(dev),
        detail=detail,
        threshold=th.acceptance_length_tolerance,
    )


@check(
    "spec_counters",
    "cell",
    "speculation counters are consistent: points record drafts, draft tokens <= k × drafts, "
    "accepted <= draft tokens, per-position counts sum to accepted; baselines never draft",
)
def spec_counters(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    drafts, dtok, acc = C("drafts"), C("draft_tokens"), C("accepted_tokens")
    pos_sum = C("accepted_per_position").list.sum()
    base_drafted = is_baseline & ((drafts.fill_null(0) > 0) | (dtok.fill_null(0) > 0) | (acc.fill_null(0) > 0))
    missing = is_point & (drafts.is_null() | dtok.is_null() | acc.is_null())
    too_many = is_point & C("k").is_not_null() & (dtok > C("k") * drafts)
    over_acc = is_point & (acc > dtok)
    pos_bad = is_point & (C("accepted_per_position").list.len() > 0) & pos_sum.ne_missing(acc)
    bad = base_drafted | missing | too_many.fill_null(False) | over_acc.fill_null(False) | pos_bad.fill_null(False)
    status = pl.when(bad).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(base_drafted)
        .then(pl.format("{}: baseline shows speculation (drafts {}, draft tokens {})", C("cell_name"), drafts, dtok))
        .when(missing)
        .then(pl.format("{}: drafts / draft_tokens / accepted_tokens not recorded", C("cell_name")))
        .when(too_many)
        .then(pl.format("{}: {} draft tokens in {} drafts exceeds k = {}", C("cell_name"), dtok, drafts, C("k")))
        .when(over_acc)
        .then(pl.format("{}: {} accepted > {} drafted", C("cell_name"), acc, dtok))
        .when(pos_bad)
        .then(pl.format("{}: accepted per position sums to {}, accepted tokens {}", C("cell_name"), pos_sum, acc))
    )
    return _reduce_cells(df, "spec_counters", status=status, value=bad.cast(pl.Float64), detail=detail, threshold=0.0)


@check(
    "drafts_proposed",
    "cell",
    "flag a speculative point whose drafter proposed nothing: it measured drafter overhead, not speculation",
)
def drafts_proposed(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    status = (
        pl.when(~is_point | C("drafts").is_null())
        .then(pl.lit(NA))
        .when(C("drafts") == 0)
        .then(pl.lit(FLAG))
        .otherwise(pl.lit(PASS))
    )
    detail = (
        pl.when(~is_point)
        .then(pl.lit("baselines do not draft"))
        .when(C("drafts").is_null())
        .then(pl.lit("drafts not recorded (see spec_counters)"))
        .when(C("drafts") == 0)
        .then(pl.format("{}: {} proposed no drafts in the window", C("cell_name"), C("method")))
    )
    return _reduce_cells(
        df, "drafts_proposed", status=status, value=C("drafts"), detail=detail, threshold=0.0, worst="min"
    )


@check("window_length", "cell", "the measurement window is recorded and at least min_window_s long")
def window_length(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    w = C("window_s")
    status = pl.when(w.is_null() | (w < th.min_window_s)).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(w.is_null())
        .then(pl.format("{}: window_s not recorded", C("cell_name")))
        .when(status == FAIL)
        .then(pl.format("{}: window {} s", C("cell_name"), _r(w)))
    )
    return _reduce_cells(
        df, "window_length", status=status, value=w, detail=detail, threshold=th.min_window_s, worst="min"
    )


@check(
    "energy_counter_advance",
    "cell",
    "with a meter: energy > 0 and the energy counter advanced at least min_energy_updates times in the window",
)
def energy_counter_advance(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    u, e = C("energy_counter_updates"), C("energy_j")
    bad = u.is_null() | e.is_null() | (e <= 0) | (u < th.min_energy_updates)
    status = pl.when(meter_none).then(pl.lit(NA)).when(bad).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(meter_none)
        .then(pl.lit("meter none: no energy counter"))
        .when(bad)
        .then(pl.format("{}: energy {} J, {} counter updates in {} s", C("cell_name"), _r(e), u, _r(C("window_s"))))
    )
    return _reduce_cells(
        df,
        "energy_counter_advance",
        status=status,
        value=pl.when(~meter_none).then(u),
        detail=detail,
        threshold=float(th.min_energy_updates),
        worst="min",
    )


@check(
    "gpu_energy_balance",
    "cell",
    "with a meter: one energy reading per GPU the cell held (tensor_parallel_size; else fail), and flag "
    "(not fail) a spread (max - min) / mean of the per-GPU energies above gpu_energy_imbalance_max: the ranks do the same work, so a wide spread is a GPU the engine left idle, "
    "another process, or a throttled board (ADR 0156)",
)
def gpu_energy_balance(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    per = C("energy_j_per_gpu")
    n = per.list.len()
    # Records before issue 23 have no tensor_parallel_size (they ran on one GPU): nothing to count against.
    tp = C("tensor_parallel_size") if "tensor_parallel_size" in df.columns else pl.lit(None, pl.Int64)
    spread = (per.list.max() - per.list.min()) / per.list.mean()
    miscount = per.is_null() | (n != tp) | C("energy_j").is_null()
    # One GPU passes on its reading alone (its energy is the cell's); the spread only says something at TP > 1.
    status = (
        pl.when(meter_none | tp.is_null())
        .then(pl.lit(NA))
        .when(miscount)
        .then(pl.lit(FAIL))
        .when(spread > th.gpu_energy_imbalance_max)
        .then(pl.lit(FLAG))
        .otherwise(pl.lit(PASS))
    )
    detail = (
        pl.when(meter_none)
        .then(pl.lit("meter none: no energy counter"))
        .when(tp.is_null())
        .then(pl.lit("tensor_parallel_size not recorded (a record before issue 23, measured on one GPU)"))
        .when(per.is_null() | C("energy_j").is_null())
        .then(pl.format("{}: per-GPU energy not recorded on a cell of tensor_parallel_size {}", C("cell_name"), tp))
        .when(n != tp)
        .then(
            pl.format(
                "{}: {} GPU(s) metered, tensor_parallel_size {}: {}",
                C("cell_name"),
                n,
                tp,
                pl.when(n > tp)
                .then(pl.lit("energy includes a GPU outside the cell"))
                .otherwise(pl.lit("energy misses a rank")),
            )
        )
        .when(status == FLAG)
        .then(
            pl.format(
                "{}: per-GPU energy {} J, spread {} % of their mean",
                C("cell_name"),
                per.list.eval(pl.element().round_sig_figs(4)).cast(pl.List(pl.String)).list.join(" / "),
                _r(spread * 100, 3),
            )
        )
    )
    return _reduce_cells(
        df,
        "gpu_energy_balance",
        status=status,
        value=pl.when(status != NA).then(spread),
        detail=detail,
        threshold=th.gpu_energy_imbalance_max,
    )


@check("power_range", "cell", "with a meter: mean power within [idle - slack, power limit + slack]")
def power_range(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    p, idle, limit = C("mean_power_w"), C("idle_power_w"), C("power_limit_w")
    low = idle - th.power_slack_w
    high = limit + th.power_slack_w
    missing = p.is_null() | limit.is_null()
    out_of = (p > high) | (idle.is_not_null() & (p < low))
    status = pl.when(meter_none).then(pl.lit(NA)).when(missing | out_of).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(meter_none)
        .then(pl.lit("meter none: no power reading"))
        .when(missing)
        .then(pl.format("{}: mean power {} W, power limit {} W (not recorded)", C("cell_name"), _r(p), _r(limit)))
        .when(out_of)
        .then(
            pl.format(
                "{}: mean power {} W outside [{}, {}] W (idle {} W, limit {} W, slack {} W)",
                C("cell_name"),
                _r(p),
                _r(low),
                _r(high),
                _r(idle),
                _r(limit),
                pl.lit(th.power_slack_w),
            )
        )
    )
    return _reduce_cells(
        df, "power_range", status=status, value=pl.when(~meter_none).then(p), detail=detail, threshold=th.power_slack_w
    )


@check(
    "power_regime",
    "cell",
    "flag (not fail) mean power below idle × idle_regime_ratio: the step is CPU- or launch-bound, not GPU-bound",
)
def power_regime(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    ratio = C("mean_power_w") / C("idle_power_w")
    na = meter_none | ratio.is_null()
    status = pl.when(na).then(pl.lit(NA)).when(ratio < th.idle_regime_ratio).then(pl.lit(FLAG)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(meter_none)
        .then(pl.lit("meter none: no power reading"))
        .when(na)
        .then(pl.lit("idle power not measured (protocol.idle_s = 0?)"))
        .when(status == FLAG)
        .then(
            pl.format(
                "{}: mean power {} W is {}× idle ({} W): CPU- or launch-bound step",
                C("cell_name"),
                _r(C("mean_power_w")),
                _r(ratio, 3),
                _r(C("idle_power_w")),
            )
        )
    )
    return _reduce_cells(
        df,
        "power_regime",
        status=status,
        value=pl.when(~na).then(ratio),
        detail=detail,
        threshold=th.idle_regime_ratio,
        worst="min",
    )


@check("temperature", "cell", "with a meter: maximum GPU temperature in the window at most max_temperature_c")
def temperature(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    t = C("max_temperature_c")
    return _telemetry(
        df,
        "temperature",
        "max_temperature_c",
        t > th.max_temperature_c,
        pl.format("{}: {} °C", C("cell_name"), _r(t)),
        th.max_temperature_c,
    )


@check(
    "throttle_reasons",
    "cell",
    "with a meter: no forbidden NVML clock-event reason (forbidden_throttle_mask) seen in the window",
)
def throttle_reasons(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    hit = C("throttle_reasons_mask").fill_null(0) & th.forbidden_throttle_mask
    return _telemetry(
        df,
        "throttle_reasons",
        "throttle_reasons_mask",
        hit != 0,
        pl.format(
            "{}: clock-event reasons mask {} has forbidden bits {} (forbidden mask {})",
            C("cell_name"),
            C("throttle_reasons_mask"),
            hit,
            pl.lit(th.forbidden_throttle_mask),
        ),
        float(th.forbidden_throttle_mask),
        value=hit.cast(pl.Float64),
    )


@check("other_gpu_processes", "cell", "no compute process but ours on the GPU(s) during the cell")
def other_gpu_processes(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    n = C("other_gpu_processes")
    return _telemetry(
        df,
        "other_gpu_processes",
        "other_gpu_processes",
        n > 0,
        pl.format("{}: {} other process(es) on the GPU", C("cell_name"), n),
        0.0,
    )


@check("failed_requests", "cell", "failed requests in the window at most max_failed_requests")
def failed_requests(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    f = C("requests_failed")
    status = pl.when(f.is_null() | (f > th.max_failed_requests)).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(f.is_null())
        .then(pl.format("{}: requests_failed not recorded", C("cell_name")))
        .when(status == FAIL)
        .then(pl.format("{}: {} failed request(s)", C("cell_name"), f))
    )
    return _reduce_cells(
        df, "failed_requests", status=status, value=f, detail=detail, threshold=float(th.max_failed_requests)
    )


LOOP_KINDS = ("open_loop", "closed_loop")
is_loop = C("workload_kind").is_in(list(LOOP_KINDS))
# Loop records measured before the load generator recorded what it did (ADR 0110) carry none of its columns.
before_loadgen = C("realized_request_rate").is_null() & C("requests_sent").is_null()


@check(
    "steady_state",
    "cell",
    "loops ran in a steady state, detected, not assumed: closed loop, the running-requests reading of every "
    "quarter of the window within steady_state_band of the concurrency; open loop, the requests in flight grew "
    "by at most max_backlog_growth of the requests sent in the window (else the server does not sustain the "
    "rate); closed batches are fixed by construction (batch_shape)",
)
def steady_state(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    kind = C("workload_kind")
    n = C("concurrency").cast(pl.Float64)
    segs = C("running_requests_segments")
    quarters = segs.list.len().fill_null(0)
    read = segs.list.drop_nulls().list.len().fill_null(0)
    dev_closed = pl.max_horizontal((segs.list.max() - n).abs(), (segs.list.min() - n).abs()) / n
    growth = (C("inflight_at_end") - C("inflight_at_start")).cast(pl.Float64) / C("requests_sent")
    closed_loop, open_loop = kind == "closed_loop", kind == "open_loop"
    value = pl.when(closed_loop).then(dev_closed).when(open_loop).then(growth)
    threshold = (
        pl.when(closed_loop).then(_lit_f(th.steady_state_band)).when(open_loop).then(_lit_f(th.max_backlog_growth))
    )
    missing_closed = closed_loop & ((quarters == 0) | (read < quarters))
    missing_open = open_loop & (C("requests_sent").fill_null(0) == 0)
    na = ~is_loop | (open_loop & before_loadgen)
    bad = missing_closed | missing_open | (value > threshold + 1e-12).fill_null(False)
    status = pl.when(na).then(pl.lit(NA)).when(bad).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))
    waiting = C("waiting_requests_mean").fill_null(0.0)
    cause_closed = (
        pl.when(waiting >= 0.5)
        .then(
            pl.format(
                "the engine kept {} request(s) waiting on average: it ran fewer than "
                "{} at once (KV cache or max_num_seqs)",
                _r(waiting, 3),
                C("concurrency"),
            )
        )
        .when(C("mean_inflight") < n * (1 - th.steady_state_band))
        .then(
            pl.format(
                "the clients kept {} in flight on average, not {} (send lag p99 {} s)",
                _r(C("mean_inflight"), 3),
                C("concurrency"),
                _r(C("send_lag_p99_s"), 3),
            )
        )
        .when(C("mean_running_requests") < n * (1 - th.steady_state_band))
        .then(
            pl.format(
                "the clients kept {} in flight and the engine queued none, but it ran {} on average: the "
                "requests spent the rest in the server's front end (HTTP, tokenization, streaming)",
                _r(C("mean_inflight"), 3),
                _r(C("mean_running_requests"), 3),
            )
        )
        .otherwise(pl.lit("the running requests moved through the window"))
    )
    detail = (
        pl.when(~is_loop)
        .then(pl.lit("closed batch: the batch shape is fixed by construction (batch_shape)"))
        .when(open_loop & before_loadgen)
        .then(pl.lit("open-loop record from before the load generator recorded requests in flight (ADR 0110)"))
        .when(missing_closed)
        .then(
            pl.format(
                "{}: running requests read in {} of {} quarters of the window: steady state not shown",
                C("cell_name"),
                read,
                pl.lit(4),
            )
        )
        .when(missing_open)
        .then(pl.format("{}: no request sent inside the window", C("cell_name")))
        .when(closed_loop & bad)
        .then(
            pl.format(
                "{}: running requests per quarter {} .. {} vs concurrency {}: {}",
                C("cell_name"),
                _r(segs.list.min(), 3),
                _r(segs.list.max(), 3),
                C("concurrency"),
                cause_closed,
            )
        )
        .when(open_loop & bad)
        .then(
            pl.format(
                "{}: requests in flight grew from {} to {} over the window ({} sent): the server does not sustain "
                "{} requests/s (mean running {}, mean waiting {})",
                C("cell_name"),
                C("inflight_at_start"),
                C("inflight_at_end"),
                C("requests_sent"),
                _r(C("request_rate"), 4),
                _r(C("mean_running_requests"), 3),
                _r(waiting, 3),
            )
        )
    )
    return _reduce_cells(df, "steady_state", status=status, value=value, detail=detail, threshold=threshold)


@check(
    "send_lag",
    "cell",
    "loops: the 99th percentile of the send lag in the window (send time less due time: the arrival in open loop, "
    "the client's previous completion in closed loop) at most max_send_lag_s; else the client, not the server, "
    "set the load",
)
def send_lag(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    lag = C("send_lag_p99_s")
    na = ~is_loop | before_loadgen | (C("requests_sent").fill_null(0) == 0)
    bad = lag.is_null() | (lag > th.max_send_lag_s)
    status = pl.when(na).then(pl.lit(NA)).when(bad).then(pl.lit(FAIL)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(~is_loop)
        .then(pl.lit("closed batch: every request is submitted at once"))
        .when(before_loadgen)
        .then(pl.lit("loop record from before the send lag was recorded (ADR 0110)"))
        .when(na)
        .then(pl.lit("no request sent inside the window (see steady_state)"))
        .when(lag.is_null())
        .then(pl.format("{}: send lag not recorded", C("cell_name")))
        .when(bad)
        .then(
            pl.format(
                "{}: send lag p99 {} s, max {} s over {} requests sent in the window",
                C("cell_name"),
                _r(lag, 3),
                _r(C("send_lag_max_s"), 3),
                C("requests_sent"),
            )
        )
    )
    return _reduce_cells(
        df, "send_lag", status=status, value=pl.when(~na).then(lag), detail=detail, threshold=th.max_send_lag_s
    )


@check(
    "latency_reliable",
    "cell",
    "flag (not fail) a cell whose streamed per-token times collapsed at a starved client: its time-between-tokens "
    "columns are null and latency_unreliable_reason says why (ADR 0110)",
)
def latency_reliable(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    reason = C("latency_unreliable_reason")
    na = reason.is_null() & C("starved_requests").is_null()
    status = pl.when(reason.is_not_null()).then(pl.lit(FLAG)).when(na).then(pl.lit(NA)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(reason.is_not_null())
        .then(pl.format("{}: {}", C("cell_name"), reason))
        .when(na)
        .then(pl.lit("latency not streamed at a client, or recorded before starvation was detected"))
    )
    return _reduce_cells(
        df, "latency_reliable", status=status, value=C("starved_requests"), detail=detail, threshold=None
    )


NO_DRIFT_MAX = "no window_drift_max pre-registered"


@check(
    "window_drift",
    "cell",
    "flag (not fail) a cell whose GPU activity moved within its window: |window_activity_drift| (last third less "
    "first third of SM activity, else NVML utilization, over the window mean) above window_drift_max (ADR 0227); "
    "not applicable unless window_drift_max is pre-registered",
)
def window_drift(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    if th.window_drift_max is None:
        return _reduce_cells(
            df, "window_drift", status=pl.lit(NA), value=_lit_f(None), detail=pl.lit(NO_DRIFT_MAX), threshold=None
        )
    from specjoule.analysis import window_activity as wa

    df = wa.with_null_activity(df)  # records.parquet written before the columns existed
    drift, signal, n = C("window_activity_drift"), C("window_activity_signal"), C("window_activity_samples")
    bad = drift.abs() > th.window_drift_max
    status = pl.when(drift.is_null()).then(pl.lit(NA)).when(bad).then(pl.lit(FLAG)).otherwise(pl.lit(PASS))
    detail = (
        pl.when(signal.is_null())
        .then(pl.lit("no in-window timeline samples (no timeline beside the record, or meter none)"))
        .when(n < wa.MIN_SAMPLES)
        .then(pl.format("fewer than {} in-window samples of {}: no drift", pl.lit(wa.MIN_SAMPLES), signal))
        .when(drift.is_null())
        .then(
            pl.format(
                "{} below {} % over the window: an idle GPU has no relative drift",
                signal,
                pl.lit(f"{wa.MIN_MEAN_PCT:g}"),
            )
        )
        .when(bad)
        .then(
            pl.format(
                "{}: {} over the window's thirds {} / {} / {} %, drift {} of the window mean {} %",
                C("cell_name"),
                signal,
                _r(C("window_activity_first_third"), 3),
                _r(C("window_activity_middle_third"), 3),
                _r(C("window_activity_last_third"), 3),
                _r(drift, 3),
                _r(C("window_activity_mean"), 3),
            )
        )
    )
    return _reduce_cells(
        df, "window_drift", status=status, value=drift.abs(), detail=detail, threshold=th.window_drift_max
    )


# ----------------------------------------------------------------------------------------------


@check(
    "model_residual",
    "cell",
    "measured mJ per committed token within model_residual_max (relative) of the roofline model's prediction "
    "from the campaign GPU's baselines (ADR 0102); flagged, not failed: a miss is a broken measurement or an "
    "effect the model leaves out, such as a host-bound draft loop",
)
def model_residual(df: pl.DataFrame, th: Thresholds, config_hash: str | None) -> pl.DataFrame:
    from specjoule.analysis import roofline  # the logic lives there; this is its registry entry

    df, status, value, detail = roofline.residual_check_exprs(df, th.model_residual_max, PASS, FLAG, NA)
    return _reduce_cells(
        df, "model_residual", status=status, value=value, detail=detail, threshold=th.model_residual_max
    )


def run_checks(
    records: pl.DataFrame, thresholds: Thresholds, config_hash: str | None = None, only: list[str] | None = None
) -> pl.DataFrame:
    """Run every registered check (or ``only`` those) over aggregated records."""
    names = list(CHECKS) if only is None else only
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise AnalysisError(f"unknown check(s): {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    # Unsupported records (the engine refused the cell) measured nothing: nothing to check (ADR 0080).
    records = records.filter(is_measured(records))
    if records.height == 0:
        return pl.DataFrame(schema=CHECK_SCHEMA)
    parts = []
    for name in names:
        part = CHECKS[name].fn(records, thresholds, config_hash)
        parts.append(part.select(*CHECK_SCHEMA.names()).cast(dict(CHECK_SCHEMA)))  # type: ignore[arg-type]
    order = {n: i for i, n in enumerate(names)}
    out = pl.concat(parts)
    return out.sort(
        C("status").replace_strict(STATUS_RANK, return_dtype=pl.Int8),
        C("check").replace_strict(order, return_dtype=pl.Int32),
        "campaign_id",
        descending=[True, False, False],
    )


def failures(checks: pl.DataFrame, *, include_energy: bool = False) -> pl.DataFrame:
    out = checks.filter(C("status") == FAIL)
    return out if include_energy else out.filter(C("check") != ENERGY_CHECK)


# ----------------------------------------------------------------------------------------------
# checks.md

MD_FULL_ROWS = 300  # beyond this, pass / not_applicable rows are summarised per check


def _fmt(v: float | None) -> str:
    if v is None:
        return ""
    return f"{v:.4g}"


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(checks: pl.DataFrame, thresholds: Thresholds, config_hash: str | None) -> str:
    """One table, failures first, then flags, passes and not-applicable rows."""
    counts = {s: checks.filter(C("status") == s).height for s in STATUSES}
    n_campaigns = checks["campaign_id"].n_unique() if checks.height else 0
    lines = [
        "# Pre-registered checks",
        "",
        f"Config hash `{config_hash}`; {n_campaigns} campaign(s); "
        + ", ".join(f"{counts[s]} {s}" for s in STATUSES)
        + ".",
        "",
        "Thresholds (config `checks`, fixed before the runs): "
        + ", ".join(f"`{k}` = {v}" for k, v in thresholds.as_dict().items())
        + ".",
        "",
        "A `fail` refuses the campaign's curves (except `energy_measured`, which refuses only the energy columns); "
        "a `flag` is carried onto the curve rows it concerns.",
        "",
        "| status | check | campaign | cells | value | threshold | detail |",
        "|---|---|---|---|---|---|---|",
    ]
    loud = checks.filter(C("status").is_in([FAIL, FLAG]))
    quiet = checks.filter(C("status").is_in([PASS, NA]))
    rows = list(loud.iter_rows(named=True))
    if checks.height <= MD_FULL_ROWS:
        rows += list(quiet.iter_rows(named=True))
        summary_rows: list[dict] = []
    else:
        summary_rows = (
            quiet.group_by("status", "check", maintain_order=True)
            .agg(
                pl.len().alias("n"), C("value").min().alias("lo"), C("value").max().alias("hi"), C("threshold").first()
            )
            .iter_rows(named=True)
        )
    for r in rows:
        cells = ", ".join(r["cell_names"] or [])
        lines.append(
            f"| {r['status']} | {r['check']} | {_cell(r['campaign_id'])} | {_cell(cells)} | {_fmt(r['value'])} "
            f"| {_fmt(r['threshold'])} | {_cell(r['detail'] or '')} |"
        )
    for r in summary_rows:
        values = f"; values {_fmt(r['lo'])} .. {_fmt(r['hi'])}" if r["lo"] is not None else ""
        lines.append(
            f"| {r['status']} | {r['check']} | ({r['n']} campaigns) | | | {_fmt(r['threshold'])} "
            f"| summarised: {r['n']} campaign(s) {r['status']}{values} |"
        )
    return "\n".join(lines) + "\n"
