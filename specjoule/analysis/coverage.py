"""Coverage: the scheme × family × engine matrix, derived from committed evidence and shipped configs (ADR 0196).

One row per (target_family, target_model, engine, scheme); an SGLang arm that commits the drafted tokens instead of
SGLang's fixed token is a scheme of its own, ``<method> (real-draft-token)`` (ADR 0243, 0244: the modes are two
configurations). Its status comes from two places only:

- the evidence's records (``evidence.load``) and each run's committed verdicts (``<run>/checks.parquet``):
  ``measured``; ``measured, check failed: <check>`` when every measured cell of the row is named by a failed
  check (its own, or one on a baseline it is paired with); ``unsupported`` with the engine's reason;
- the plan of every shipped config (``config/*.yaml``, ``validation/**/config/*.yaml``), without a GPU:
  ``not run`` (planned, absent from the evidence) with the configs that would measure it, or ``unsupported
  (plan)`` with the reason the plan already knows;
- the attempt markers committed with the evidence (``**/.specjoule/attempts/<campaign>/<cell>.<id>``, ADR 0197):
  ``not run, an attempt failed`` where a cell of the row's campaign started and wrote no record, and no record
  of that cell came later (a start measured afterwards stops no arm planned since: ADR 0196). The note lists
  the attempts latest first, each with how it ended as far as the committed files say (ADR 0222): the root cause
  the runner noted in the marker; else the one its committed log names where the runner logged the cell's failure;
  else "no error recorded" (a cut attempt, one still running when the evidence was collected, or a marker from
  before ADR 0197).

Ratios are mJ per committed token over the run's paired baseline, at the smallest and largest configured L
measured at B = 1 and B = 32, each with its n (windows), runs and boards, over points measured with CUDA graphs on
(the serving setting): a graphs-off point is the capture-bias experiment (its report's ``cuda_graphs`` figure), and
without graphs a B = 1 baseline can be host-bound (2026-12-04: a 14.5 x longer step), so its ratio would widen a
range it does not belong to. The row's status and its ``graphs_off_points`` count still show it. Engine start is the median
``engine_start_s`` of distinct engine instances per family and engine, cold and warm compile cache apart.

Evidence of two GPU classes (an H100 folder beside the H200 one, ADR 0241) gives one matrix per class: a ratio's
range, its board count and an engine start are never pooled across classes (``board_class_matrices``). A record
without a GPU name (``unsupported``: no engine ran) goes with its run's class, or into every matrix when its run
has none; an attempt marker goes with its evidence folder's class, or into every matrix when the folder holds
several or none.

    python -m specjoule.analysis.coverage validation/h200-2026-12 [--format md] [--out coverage.parquet]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import logging
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import polars as pl

from specjoule import axes, logtext, models, runner
from specjoule import schemes as scheme_registry
from specjoule.analysis import AnalysisError, evidence
from specjoule.records import STATUS_MEASURED, STATUS_UNSUPPORTED

C = pl.col
REPO_ROOT = Path(__file__).resolve().parents[2]
ROW_KEY = ("target_family", "target_model", "engine", "method")
RATIO_BATCHES = (1, 32)
L_ENDS = ("min", "max")
SHIPPED_CONFIG_GLOBS = ("config/*.yaml", "validation/**/config/*.yaml")
UNKNOWN_FAMILY = "?"
SGLANG_TOKEN_MODE_KEY = "speculative_simulate_acc_token_mode"  # in an SGLang record's engine_config (ADR 0243)
# A replicate window's cell is ``<name>--w<w>`` (CONTEXT: replicates); checks name the cell it repeats.
_WINDOW_SUFFIX = re.compile(r"--w\d+$")

MEASURED = STATUS_MEASURED  # the record's own status values (null in older records = measured)
UNSUPPORTED = STATUS_UNSUPPORTED
UNSUPPORTED_PLAN = "unsupported (plan)"
NOT_RUN = "not run"
ATTEMPT_FAILED = "not run, an attempt failed"
CHECK_FAILED = "measured, check failed: "


# -- attention family: the runner's own rule ------------------------------------------------------------


def family_of(target_model: str | None) -> str:
    """The target's attention family as the runner records it (``runner.model_columns``: ``models.local_shape``
    of the target, ``shape.family``); ``?`` for a hub id or a model this checkout cannot read."""
    if not target_model:
        return UNKNOWN_FAMILY
    try:
        shape = models.local_shape(target_model)
    except (models.ModelShapeError, OSError):
        return UNKNOWN_FAMILY
    return shape.family if shape is not None else UNKNOWN_FAMILY


# -- evidence: records and their committed verdicts ---------------------------------------------------------


def failed_checks(run: str | Path) -> pl.DataFrame:
    """``(campaign_id, cell_name, check)`` for every cell a failed check of ``<run>/checks.parquet`` names."""
    path = Path(run) / "checks.parquet"
    empty = pl.DataFrame(schema={"campaign_id": pl.String, "cell_name": pl.String, "check": pl.String})
    if not path.exists():
        return empty
    checks = pl.read_parquet(path, columns=["check", "campaign_id", "cell_names", "status"])
    fails = checks.filter(C("status") == "fail").explode("cell_names").drop_nulls("cell_names")
    if not fails.height:
        return empty
    return fails.select("campaign_id", C("cell_names").alias("cell_name"), "check").unique()


def _base_name(name: str | None) -> str | None:
    return _WINDOW_SUFFIX.sub("", name) if name else name


def mark_failed_checks(records: pl.DataFrame) -> pl.DataFrame:
    """Records with ``run`` (the folder above ``cells``) and ``check_failed`` (sorted names of the failed checks
    that name the cell or a baseline it is paired with; empty when none)."""
    records = records.with_columns(C("record_path").map_elements(evidence.run_of, return_dtype=pl.String).alias("run"))
    failed: dict[tuple[str, str, str], set[str]] = {}
    for run in records["run"].unique().to_list():
        for row in failed_checks(run).iter_rows(named=True):
            failed.setdefault((run, row["campaign_id"], row["cell_name"]), set()).add(row["check"])
    out = []
    for r in records.select("run", "campaign_id", "cell_name", "opening_cell_names", "closing_cell_names").iter_rows(
        named=True
    ):
        names = {r["cell_name"], _base_name(r["cell_name"])}
        names |= set(r["opening_cell_names"] or []) | set(r["closing_cell_names"] or [])
        names |= {_base_name(n) for n in names}
        hit: set[str] = set()
        for n in names:
            hit |= failed.get((r["run"], r["campaign_id"], n), set())
        out.append(sorted(hit))
    return records.with_columns(pl.Series("check_failed", out, dtype=pl.List(pl.String)))


def load_evidence(sources: Sequence[str | Path]) -> pl.DataFrame:
    """Every record of the sources, paired per run, with ``run``, ``check_failed``, a filled ``target_family``
    (older records predate the column: the runner's rule applied to their target) and ``ratio``."""
    records = mark_failed_checks(evidence.load_many(sources))
    families = {m: family_of(m) for m in records["target_model"].unique().to_list()}
    filled = C("target_model").replace_strict(families, default=UNKNOWN_FAMILY, return_dtype=pl.String)
    # the token mode the engine itself reported (ADR 0243); absent where the config left SGLang its default
    mode = C("engine_config").str.json_path_match(f"$.{SGLANG_TOKEN_MODE_KEY}")
    return records.with_columns(
        pl.coalesce(C("target_family"), filled).alias("target_family"),
        C("status").fill_null(MEASURED).alias("status"),
        (C("mj_per_committed_token") / C("baseline_mj_per_committed_token")).alias("ratio"),
        method_label(C("method"), C("engine"), mode).alias("method"),
    )


def method_label(method: pl.Expr, engine: pl.Expr, token_mode: pl.Expr) -> pl.Expr:
    """A row's scheme: the method, and for SGLang arms that commit the drafted tokens, the token mode beside it
    (``eagle3 (real-draft-token)``). SGLang's default, ``fixed``, can make an MoE round read fewer experts (ADR 0244),
    so the two modes are two configurations, never one range; vLLM has only the drafted tokens (no label)."""
    rt = (engine == "sglang") & (token_mode == scheme_registry.REAL_DRAFT_TOKEN)
    return pl.when(rt).then(pl.format("{} ({})", method, token_mode)).otherwise(method)


# -- the plan of the shipped configs ------------------------------------------------------------------------


def shipped_configs(root: Path = REPO_ROOT) -> list[str]:
    """The shipped configs a not-run row may name, relative to ``root``."""
    found: list[str] = []
    for pattern in SHIPPED_CONFIG_GLOBS:
        found += sorted(str(Path(p).relative_to(root)) for p in glob.glob(str(root / pattern), recursive=True))
    return [p for p in found if not p.endswith("schema.yaml")]


def planned_cells(configs: Iterable[str], root: Path = REPO_ROOT) -> pl.DataFrame:
    """One row per speculative cell the configs plan: the row key, device, the plan's unsupported reason, config."""
    from specjoule import cells, config

    rows = []
    config_log = logging.getLogger("specjoule.config")
    level = config_log.level
    config_log.setLevel(logging.ERROR)  # paper-grade notes are for a run's author, not this table
    try:
        for path in configs:
            cfg = config.load(root / path)
            for c in cells.build(cfg).cells:
                if c.role != axes.ROLE_POINT:
                    continue
                target = c.setup.engine.target.model
                rows.append(
                    {
                        "target_model": target,
                        "engine": c.engine,
                        "method": c.method,
                        "device": c.device,
                        "plan_reason": c.unsupported_reason,
                        "config": path,
                        "campaign_id": c.campaign_id,
                        "cell_name": c.name,
                        "token_mode": c.setup.scheme.options.get(scheme_registry.SIMULATE_TOKEN_OPTION),
                    }
                )
    finally:
        config_log.setLevel(level)
    columns = ("target_model", "engine", "method", "device", "plan_reason", "config", "campaign_id", "cell_name")
    schema = dict.fromkeys((*columns, "token_mode"), pl.String)
    plan = pl.DataFrame(rows, schema=schema)
    families = {m: family_of(m) for m in plan["target_model"].unique().to_list()}
    return plan.with_columns(
        C("target_model").replace_strict(families, return_dtype=pl.String).alias("target_family"),
        method_label(C("method"), C("engine"), C("token_mode")).alias("method"),
    ).drop("token_mode")


# -- attempts that wrote no record ---------------------------------------------------------------------------

#: A marker without ``failed_at``/``error``: the runner noted no failure. Either the attempt was cut (the machine or
#: the budget ended, the process was killed), or it was still running when the evidence was collected, or its runner
#: predates ADR 0197 and noted nothing. The marker alone does not tell which (ADR 0222).
NO_CAUSE = "no error recorded"
ATTEMPT_COLUMNS: dict[str, type[pl.DataType]] = {
    "campaign_id": pl.String,
    "cell_name": pl.String,
    "cell_id": pl.String,
    "cause": pl.String,  # the marker's root cause (or its error's first line), else NO_CAUSE
    "errored": pl.Boolean,  # the marker says the runner caught an error (ADR 0197)
    "started": pl.Float64,  # the marker's start, seconds since the epoch (null: not noted)
    "where": pl.String,  # the folder that holds the marker's .specjoule, relative to the evidence source
    "log": pl.String,  # the committed engine log of this attempt, found by cell name and time (null: none)
    "log_error": pl.String,  # the root cause in that log, when the runner logged the cell's failure there
    "log_end": pl.Float64,  # the last timestamped line of that log (the runner's or, after it, vLLM's)
}
# The runner's log lines (runner.LOG_FORMAT): local time, which on the H200 machines is UTC; a log whose lines do not
# bracket the marker's start under that reading is not taken as the attempt's log.
_LOG_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?) ")
_RUNNER_FAILED = "specjoule.runner: cell: failed"  # runner.run's own line when a cell fails (any error)
LOG_SLACK_S = 5.0


def _log_time(line: str) -> float | None:
    m = _LOG_TIME.match(line)
    if not m:
        return None
    return datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.UTC).timestamp()


# vLLM's own lines in the same log ("(EngineCore pid=…) INFO 12-04 09:42:31 [file.py:81] …") carry no year: an engine
# still starting when the log stops writes only these, so without them the log seems to stop at the runner's last line.
_VLLM_LOG_TIME = re.compile(r"(?:^|\) )(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2}-\d{2} \d{2}:\d{2}:\d{2}) \[")


def _vllm_log_time(line: str, year: int) -> float | None:
    """A vLLM line's time, read in the year of the runner line before it (the same UTC clock)."""
    m = _VLLM_LOG_TIME.search(line)
    if not m:
        return None
    when = datetime.datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S")
    return when.replace(tzinfo=datetime.UTC).timestamp()


def _log_end(lines: list[str], stamped: list[tuple[float, int]]) -> float:
    """The last time a log says anything: its last runner line, or a later vLLM line after it."""
    last, at = stamped[-1]
    year = datetime.datetime.fromtimestamp(last, datetime.UTC).year
    engine = [t for line in lines[at + 1 :] if (t := _vllm_log_time(line, year)) is not None]
    return max([last, *engine])


def _logs_under(folder: Path, cache: dict[Path, list[str]]) -> dict[Path, list[str]]:
    for path in sorted(folder.rglob("*.log*")):
        if path not in cache and path.is_file() and path.name.endswith((".log", ".log.gz")):
            cache[path] = logtext.read_log(path).splitlines()
    return {p: lines for p, lines in cache.items() if folder in p.parents}


def attempt_log(
    folder: Path, campaign: str, cell: str, started: float | None, cache: dict[Path, list[str]]
) -> tuple[Path, str | None, float] | None:
    """The committed log of the attempt that ``started`` then (a log under ``folder`` that names the cell and whose
    timestamped lines bracket the start): its path, the root cause it names when the runner logged the cell's
    failure after the start (else None), and its last timestamp. None when no log fits."""
    if started is None:
        return None
    name = f"{campaign}/{cell}"
    for path, lines in _logs_under(folder, cache).items():
        if not any(name in line for line in lines):
            continue
        stamped = [(t, i) for i, line in enumerate(lines) if (t := _log_time(line)) is not None]
        if not stamped or not (stamped[0][0] - LOG_SLACK_S <= started <= stamped[-1][0] + LOG_SLACK_S):
            continue
        after = lines[next((i for t, i in stamped if t >= started - LOG_SLACK_S), len(lines)) :]
        failed = any(_RUNNER_FAILED in line for line in after)
        return path, (runner.root_cause(runner.exception_lines(after)) if failed else None), _log_end(lines, stamped)
    return None


def failed_attempts(sources: Sequence[str | Path]) -> pl.DataFrame:
    """One row per attempt marker under the sources: a cell that started and wrote no record (the runner removes
    a marker once the record is written), with what the marker and, where the marker notes no error, the
    attempt's committed log say about how it ended (ATTEMPT_COLUMNS)."""
    rows = []
    logs: dict[Path, list[str]] = {}
    seen: set[Path] = set()
    for source in sources:
        root = Path(source)
        for marker in sorted(root.glob("**/.specjoule/attempts/*/*") if root.is_dir() else []):
            if marker.name.startswith(".") or not marker.is_file() or marker.resolve() in seen:
                continue  # an atomic write's temporary file; a marker seen through a linked folder
            seen.add(marker.resolve())
            cell_name, _, cell_id = marker.name.rpartition(".")
            try:
                noted = json.loads(marker.read_text())
            except (OSError, ValueError):
                noted = {}
            noted = noted if isinstance(noted, dict) else {}
            cause = noted.get("root_cause") or noted.get("error")
            # an error's text may carry the worker's whole traceback: its first line names the failure
            cause = cause.splitlines()[0] if isinstance(cause, str) and cause.strip() else None
            errored = bool(cause or noted.get("failed_at"))
            started = noted.get("started") if isinstance(noted.get("started"), (int, float)) else None
            holder = marker.parents[2].parent  # <holder>/.specjoule/attempts/<campaign>/<marker>
            # Its log lies beside the marker or in a run folder next to it (a session's cut-by-budget/ beside
            # results/), never outside the evidence named
            search = holder.parent if root in holder.parent.parents or holder.parent == root else holder
            found = None if errored else attempt_log(search, marker.parent.name, cell_name, started, logs)
            rows.append(
                {
                    "campaign_id": marker.parent.name,
                    "cell_name": cell_name,
                    "cell_id": cell_id,
                    "cause": cause or ("error recorded without its text" if errored else NO_CAUSE),
                    "errored": errored,
                    "started": started,
                    "where": str(holder.relative_to(root)) if holder != root else root.name,
                    "log": str(found[0].relative_to(root)) if found else None,
                    "log_error": found[1] if found else None,
                    "log_end": found[2] if found else None,
                }
            )
    return pl.DataFrame(rows, schema=ATTEMPT_COLUMNS)


def _utc(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def attempt_outcome(a: dict) -> str:
    """How one attempt ended, as far as the committed files say: the error the marker noted; else the error its log
    names; else "no error recorded", with how long after the start its log stops where a log was found."""
    if a["errored"]:
        return a["cause"]
    if a["log_error"]:
        return f"{a['log_error']} (in its log; the marker notes no error)"
    if a["log"]:
        stops_after_s = max(a["log_end"] - a["started"], 0.0)
        return f"{NO_CAUSE} (nor in its log, which stops {stops_after_s:.0f} s after this start)"
    return NO_CAUSE


def attempts_text(attempts: pl.DataFrame) -> str:
    """A not-run row's attempts, latest first, each ``<cell>: <how it ended>``; with several, a count of those that
    ended with an error and those with none recorded, and each attempt's start and folder."""
    rows = sorted(attempts.iter_rows(named=True), key=lambda a: (-(a["started"] or 0.0), a["where"], a["cell_name"]))
    if len(rows) == 1:
        return f"{rows[0]['cell_name']}: {attempt_outcome(rows[0])}"
    errors = sum(1 for a in rows if a["errored"] or a["log_error"])
    head = f"{len(rows)} attempts, latest first; {errors} ended with an error, {len(rows) - errors} with {NO_CAUSE}: "
    entries = []
    for a in rows:
        when = _utc(a["started"]) if a["started"] is not None else "start not noted"
        entries.append(f"{a['cell_name']}: {attempt_outcome(a)} [{when}, {a['where']}]")
    return head + " | ".join(entries)


# -- the matrix ----------------------------------------------------------------------------------------------


def _num(x: float) -> str:
    return f"{x:.3g}"


def ratio_slot(points: pl.DataFrame) -> dict:
    """The ratio of one (row, B, L): mean over windows; spread over runs when several, else over windows."""
    per_run = points.group_by("run").agg(C("ratio").mean())["ratio"]
    n, runs, boards = points.height, per_run.len(), points["gpu_uuid"].n_unique()
    spread = per_run if runs > 1 else points["ratio"]
    lo, hi, mean = float(spread.min()), float(spread.max()), float(points["ratio"].mean())  # type: ignore[arg-type]
    if runs > 1:
        text = f"{_num(lo)}–{_num(hi)} (n={n}, {runs} runs, {boards} board{'s' if boards > 1 else ''})"
    elif n > 1:
        text = f"{_num(mean)} [{_num(lo)}–{_num(hi)}] (n={n}{f', {boards} boards' if boards > 1 else ''})"
    else:
        text = f"{_num(mean)} (n=1)"
    return {"ratio": mean, "ratio_lo": lo, "ratio_hi": hi, "n": n, "runs": runs, "boards": boards, "text": text}


def ratio_columns(clean: pl.DataFrame) -> dict:
    """Numeric and text ratio columns of one row at B = 1 and 32, L = min and max, from its clean points."""
    out: dict = {}
    for b in RATIO_BATCHES:
        at_b = clean.filter((C("batch_size") == b) & C("ratio").is_not_null() & C("configured_L").is_not_null())
        ls = sorted(set(at_b["configured_L"].to_list()))
        texts = []
        for end in L_ENDS:
            prefix = f"b{b}_l{end}"
            if not ls:
                out.update(
                    {f"{prefix}_{k}": None for k in ("L", "ratio", "ratio_lo", "ratio_hi", "n", "runs", "boards")}
                )
                continue
            L = ls[0] if end == "min" else ls[-1]
            slot = ratio_slot(at_b.filter(C("configured_L") == L))
            out.update({f"{prefix}_L": L, **{f"{prefix}_{k}": v for k, v in slot.items() if k != "text"}})
            if end == "min" or len(ls) > 1:
                texts.append(f"L={L:g}: {slot['text']}")
        out[f"ratio_b{b}"] = " · ".join(texts)
    return out


def engine_starts(records: pl.DataFrame) -> pl.DataFrame:
    """Median engine start per (family, engine) over distinct engine instances, cold / warm / unrecorded cache."""
    starts = (
        records.filter(C("engine_start_s").is_not_null())
        .unique(subset=["run", "engine_instance", "engine_start_s"])
        .with_columns(
            pl.when(C("compile_cache_warm").is_null())
            .then(pl.lit("unrecorded"))
            .when(C("compile_cache_warm"))
            .then(pl.lit("warm"))
            .otherwise(pl.lit("cold"))
            .alias("cache")
        )
    )
    agg = starts.group_by("target_family", "engine", "cache").agg(
        C("engine_start_s").median().alias("median_s"), pl.len().alias("n")
    )
    rows = []
    for (family, engine), part in agg.group_by("target_family", "engine"):
        by = {r["cache"]: r for r in part.iter_rows(named=True)}
        row = {"target_family": family, "engine": engine}
        texts = []
        for cache in ("cold", "warm", "unrecorded"):
            r = by.get(cache)
            row[f"start_{cache}_s"] = r["median_s"] if r else None
            row[f"start_{cache}_n"] = r["n"] if r else 0
            if r:
                texts.append(f"{cache} {r['median_s']:.0f} s (n={r['n']})")
        row["engine_start"] = " · ".join(texts)
        rows.append(row)
    schema: dict[str, type[pl.DataType]] = {"target_family": pl.String, "engine": pl.String}
    for cache in ("cold", "warm", "unrecorded"):
        schema |= {f"start_{cache}_s": pl.Float64, f"start_{cache}_n": pl.Int64}
    return pl.DataFrame(rows, schema={**schema, "engine_start": pl.String})


def _values(series: pl.Series) -> str:
    # Formatted before deduplication: a geometric vector's L is 3 up to float rounding, and reads as 3.
    return ",".join(dict.fromkeys(f"{v:g}" for v in sorted(series.drop_nulls().to_list())))


def run_label(run: str) -> str:
    """A run as a closing note names it: the two folders above its ``results``."""
    parts = Path(run).parts
    parts = parts[:-1] if parts and parts[-1] == "results" else parts
    return "/".join(parts[-2:])


def evidence_row(part: pl.DataFrame) -> dict:
    """Status, measured B and L, ratios and reasons of one row's records (points only)."""
    measured = part.filter(C("status") == MEASURED)
    clean = measured.filter(C("check_failed").list.len() == 0)
    failed = measured.filter(C("check_failed").list.len() > 0)
    reasons = sorted(set(part.filter(C("status") == UNSUPPORTED)["unsupported_reason"].drop_nulls().to_list()))
    failed_checks = sorted({c for cs in failed["check_failed"].to_list() for c in cs})
    if clean.height:
        status = MEASURED
    elif failed.height:
        status = CHECK_FAILED + ", ".join(failed_checks)
    else:
        status = UNSUPPORTED
    # One entry per run: a run's failed checks usually name the same cells, so they read as one list.
    failed_text = "; ".join(
        f"{run_label(run)}: {', '.join(sorted({c for cs in f['check_failed'].to_list() for c in cs}))} "
        f"at B={_values(f['batch_size'])} L={_values(f['configured_L'])}"
        for (run,), f in sorted(failed.partition_by("run", as_dict=True).items())
    )
    return {
        "status": status,
        "B": _values(clean["batch_size"]),
        "L": _values(clean["configured_L"]),
        "reason": " | ".join(reasons) or None,
        "check_failed": failed_text or None,
        "runs": measured["run"].n_unique() if measured.height else 0,
        "graphs_off_points": clean.filter(C("cuda_graphs").eq(False)).height,
        **ratio_columns(clean.filter(C("cuda_graphs").ne(False) | C("cuda_graphs").is_null())),
    }


def superseded_attempts_dropped(attempts: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    """The attempts no later record of the same campaign and cell answers (``started`` in epoch seconds against the
    record's ``window_start``): a start that failed and was measured afterwards stops no arm planned since."""
    if not attempts.height or not records.height or "window_start" not in records.columns:
        return attempts
    measured = records.group_by("campaign_id", "cell_name").agg(
        C("window_start").max().dt.epoch("us").truediv(1e6).alias("_measured_at")
    )
    joined = attempts.join(measured, on=["campaign_id", "cell_name"], how="left")
    keep = C("_measured_at").is_null() | C("started").is_null() | (C("_measured_at") <= C("started"))
    return joined.filter(keep).drop("_measured_at")


def _planned_unsupported(part: pl.DataFrame) -> list[tuple[str, str]]:
    """(reason, "planned unsupported under CONFIGS: reason") for each plan-time reason of these planned cells, in
    plan order, each with the configs that give it."""
    grouped = part.group_by("plan_reason", maintain_order=True).agg(C("config").unique().sort())
    return [(reason, f"planned unsupported under {', '.join(cfgs)}: {reason}") for reason, cfgs in grouped.rows()]


def matrix(
    records: pl.DataFrame, plan: pl.DataFrame | None = None, attempts: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The coverage matrix: one row per ROW_KEY from the evidence's speculative records, then the planned rows
    the evidence lacks (``not run`` / ``unsupported (plan)``), each with its family/engine's engine start."""
    points = records.filter(C("role") == axes.ROLE_POINT)
    rows = [
        {**dict(zip(ROW_KEY, key)), **evidence_row(part), "configs": None}
        for key, part in points.group_by(list(ROW_KEY), maintain_order=True)
    ]
    if plan is not None and plan.height:
        devices = records["device"].drop_nulls().unique().to_list()
        planned = plan.filter(C("device").is_in(devices)) if devices else plan
        # Records that say unsupported under one configuration (e.g. an attention backend the engine refuses for
        # the target) do not settle a row another shipped config plans as supported: it reads from the plan,
        # with the recorded reason beside it.
        supported_somewhere = {tuple(k) for k in planned.filter(C("plan_reason").is_null()).select(ROW_KEY).rows()}
        recorded_unsupported = {
            key: r["reason"] or ""
            for r in rows
            if r["status"] == UNSUPPORTED and (key := tuple(r[k] for k in ROW_KEY)) in supported_somewhere
        }
        rows = [r for r in rows if tuple(r[k] for k in ROW_KEY) not in recorded_unsupported]
        # A row the evidence settles as unsupported names the other reasons the shipped configs plan for it (another
        # backend may fail for another reason): the recorded one alone would read as if that other config could run.
        unsupported_elsewhere = planned.filter(C("plan_reason").is_not_null())
        for r in rows:
            if r["status"] != UNSUPPORTED:
                continue
            key = tuple(r[k] for k in ROW_KEY)
            part = unsupported_elsewhere.filter(pl.all_horizontal(C(k) == v for k, v in zip(ROW_KEY, key)))
            for reason, extra in _planned_unsupported(part):
                if reason not in (r["reason"] or ""):
                    r["reason"] = f"{r['reason']} | {extra}" if r["reason"] else extra
        seen = {tuple(r[k] for k in ROW_KEY) for r in rows}
        # An attempt whose cell was measured later (a record of the same campaign and cell whose window started
        # after the attempt) stops nothing: a baseline that failed before its campaign was measured does not make a
        # newly planned arm of it read as failed. The row's note still lists it beside any attempt that counts.
        live = superseded_attempts_dropped(attempts, records) if attempts is not None else None
        # The plan lists every point of a campaign; a marker of another cell of it is one of its baselines when its
        # name says so. Two configs can share a campaign (a scheme pre-registered later for the same shape): an arm
        # that only a config outside this plan names is that arm's own attempt, not a baseline's (2026-12-04c).
        points_of = planned.group_by("campaign_id").agg(C("cell_name")).rows_by_key("campaign_id", unique=True)
        for key, part in planned.group_by(list(ROW_KEY), maintain_order=True):
            if tuple(key) in seen:
                continue
            all_unsupported = part["plan_reason"].null_count() == 0
            # A row every config plans unsupported keeps their bare reasons and every config; a row one config can
            # run names only the configs that can, and another config's plan-time reason (its pair has no drafter
            # for the scheme, say) is said to be that config's, or the row reads as if it could not run at all
            # (SGLang EAGLE3 on Qwen3.6, 2026-12-04d).
            if all_unsupported:
                reasons = sorted(set(part["plan_reason"].to_list()))
                configs = sorted(set(part["config"].to_list()))
            else:
                reasons = [extra for _, extra in _planned_unsupported(part.filter(C("plan_reason").is_not_null()))]
                configs = sorted(set(part.filter(C("plan_reason").is_null())["config"].to_list()))
            campaigns = part["campaign_id"].unique().to_list()
            campaign_points = {n for c in campaigns for n in points_of[c][0]}
            # a campaign's failed baseline stops every arm of it; an arm's failed start is that arm's row only
            of_row = C("campaign_id").is_in(campaigns) & (
                C("cell_name").is_in(part["cell_name"].to_list())
                | (~C("cell_name").is_in(list(campaign_points)) & C("cell_name").str.contains(axes.BASELINE_CELL_NAME))
            )
            failed = attempts.filter(of_row) if attempts is not None and not all_unsupported else None
            counted = live.filter(of_row) if live is not None and not all_unsupported else None
            if failed is not None and counted is not None and counted.height:
                status = ATTEMPT_FAILED
                reasons = [attempts_text(failed)]
            else:
                status = UNSUPPORTED_PLAN if all_unsupported else NOT_RUN
            if tuple(key) in recorded_unsupported:
                reasons.append(f"recorded unsupported under another configuration: {recorded_unsupported[tuple(key)]}")
            rows.append(
                {
                    **dict(zip(ROW_KEY, key)),
                    "status": status,
                    "reason": " | ".join(reasons) or None,
                    "configs": ", ".join(configs),
                    **ratio_columns(points.clear()),
                }
            )
    table = pl.DataFrame(rows, infer_schema_length=None)
    starts = engine_starts(records)
    return table.join(starts, on=["target_family", "engine"], how="left").sort(list(ROW_KEY))


def board_class_matrices(
    records: pl.DataFrame, plan: pl.DataFrame | None, sources: Sequence[Path]
) -> list[tuple[str | None, pl.DataFrame]]:
    """One (class, matrix) per GPU class of the records, in name order; a single (class, matrix) when the records
    hold one class or none. Each matrix reads that class's records, the class-less records of its runs or of runs
    without a class, and the attempts of the sources that hold that class alone or no class (module docstring)."""
    # a record's GPU class: its first GPU's name as NVML gives it (gpu_names), null where no engine ran
    records = records.with_columns(C("gpu_names").list.first().alias("_class"))
    run_class = records.filter(C("_class").is_not_null()).group_by("run").agg(C("_class").unique())
    mixed = run_class.filter(C("_class").list.len() > 1)
    if mixed.height:
        raise AnalysisError(
            f"run {mixed['run'][0]} holds records of several GPU classes: {mixed['_class'][0].to_list()}"
        )
    of_run = dict(zip(run_class["run"], run_class["_class"].list.first()))
    records = records.with_columns(
        pl.coalesce(C("_class"), C("run").replace_strict(of_run, default=None)).alias("_class")
    )
    classes = sorted(records["_class"].drop_nulls().unique().to_list())
    if len(classes) <= 1:
        return [(classes[0] if classes else None, matrix(records.drop("_class"), plan, failed_attempts(sources)))]

    def source_classes(source: Path) -> set[str]:
        inside = (C("run") == str(source)) | C("run").str.starts_with(str(source).rstrip("/") + "/")
        return set(records.filter(inside)["_class"].drop_nulls().to_list())

    held_by = {source: source_classes(source) for source in sources}
    out = []
    for name in classes:
        part = records.filter((C("_class") == name) | C("_class").is_null()).drop("_class")
        own = [source for source, held in held_by.items() if held <= {name}]
        out.append((name, matrix(part, plan, failed_attempts(own)).with_columns(pl.lit(name).alias("board_class"))))
    return out


# -- output ----------------------------------------------------------------------------------------------

DISPLAY: tuple[tuple[str, str], ...] = (
    ("target_family", "family"),
    ("target", "target"),
    ("engine", "engine"),
    ("method", "scheme"),
    ("status", "status"),
    ("B", "B"),
    ("L", "L"),
    ("ratio_b1", "ratio B=1"),
    ("ratio_b32", "ratio B=32"),
    ("engine_start", "engine start (median)"),
    ("note", "reason / config / failed check"),
)


def display_frame(table: pl.DataFrame) -> pl.DataFrame:
    note = pl.concat_str(
        [
            C("reason"),
            pl.when(C("configs").is_not_null()).then(pl.lit("config: ") + C("configs")),
            pl.when(C("check_failed").is_not_null()).then(pl.lit("check failed: ") + C("check_failed")),
        ],
        separator="; ",
        ignore_nulls=True,
    )
    target = C("target_model").map_elements(lambda m: Path(m).name, return_dtype=pl.String)
    shown = table.with_columns(target.alias("target"), note.alias("note"))
    return shown.select([C(c).cast(pl.String).fill_null("").alias(h) for c, h in DISPLAY])


def markdown(table: pl.DataFrame) -> str:
    shown = display_frame(table)
    lines = ["| " + " | ".join(shown.columns) + " |", "|" + "---|" * len(shown.columns)]
    for row in shown.iter_rows():
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def readable(table: pl.DataFrame) -> str:
    """One block per row: a wide matrix does not fit a terminal, its rows do."""
    shown = display_frame(table)
    blocks = []
    for row in shown.iter_rows(named=True):
        head = f"{row['family']} · {row['target']} · {row['engine']} · {row['scheme']}: {row['status']}"
        body = [
            f"    {k}: {v}" for k, v in row.items() if k not in ("family", "target", "engine", "scheme", "status") and v
        ]
        blocks.append("\n".join([head, *body]))
    return "\n".join(blocks)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specjoule.analysis.coverage", description=__doc__.split("\n\n")[0])
    ap.add_argument("evidence", nargs="+", help="evidence folders or record files (e.g. validation/h200-2026-12)")
    ap.add_argument(
        "--config",
        action="append",
        dest="configs",
        help="config whose plan gives the not-run rows (repeatable; default: every shipped config)",
    )
    ap.add_argument("--format", choices=("text", "md"), default="text")
    ap.add_argument("--out", help="write the matrix as Parquet here")
    args = ap.parse_args(argv)
    try:
        records = load_evidence([evidence.resolve(s) for s in args.evidence])
    except Exception as exc:  # AnalysisError and unreadable Parquet alike: one line, not a traceback
        print(f"coverage: {exc}", file=sys.stderr)
        return 2
    configs = args.configs if args.configs is not None else shipped_configs()
    sources = [evidence.resolve(s) for s in args.evidence]
    plan = planned_cells(configs, root=Path.cwd() if args.configs else REPO_ROOT)
    try:
        tables = board_class_matrices(records, plan, sources)
    except AnalysisError as exc:
        print(f"coverage: {exc}", file=sys.stderr)
        return 2
    blocks = []
    for name, table in tables:
        text = markdown(table) if args.format == "md" else readable(table)
        heading = (f"### {name}\n\n" if args.format == "md" else f"== {name} ==\n") if len(tables) > 1 else ""
        blocks.append(heading + text)
    print("\n\n".join(blocks))
    if args.out:
        pl.concat([t for _, t in tables], how="diagonal_relaxed").write_parquet(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
