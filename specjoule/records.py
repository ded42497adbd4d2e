"""The cell record: one row per measured cell, defined once here.

Versioned: readers refuse a record whose ``record_version`` they do not know. Energy columns are
null (never 0, never NaN) when ``meter == "none"``. Records are written atomically — a temp file in
the same directory, fsync, rename — so a reader sees a whole record or none.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

RECORD_VERSION = 1

_f64, _i64, _str, _bool = pa.float64(), pa.int64(), pa.string(), pa.bool_()
_ts = pa.timestamp("us", tz="UTC")

RECORD_FIELDS: list[tuple[str, pa.DataType, str]] = [
    # identity
    ("record_version", pa.int32(), "schema version of this record"),
    ("cell_id", _str, "content hash of every measurement-relevant parameter"),
    ("campaign_id", _str, "cells compared on one GPU"),
    ("cell_name", _str, "readable name, unique in its campaign"),
    ("role", _str, "opening_baseline | point | closing_baseline"),
    ("run_order_index", _i64, "position in the campaign's run order"),
    ("run_order_seed", _i64, "seed the order was shuffled under"),
    ("config_hash", _str, "hash of the validated config, checks included"),
    ("git_commit", _str, "commit of the pipeline that measured"),
    ("version_param", _i64, "config `version`, bumped for intentional re-runs"),
    ("engine", _str, "vllm | sglang"),
    ("model_pair", _str, ""),
    ("target_model", _str, ""),
    (
        "draft_model",
        _str,
        "the model that drafts: the scheme's drafter (eagle3, dflash, dspark, an mtp assistant; "
        "from wave 2) or the pair's draft model",
    ),
    ("scheme", _str, "scheme name from config"),
    ("method", _str, "baseline | ngram | draft_model | eagle3 | mtp | dflash | dspark"),
    ("k", _i64, "draft tokens per round"),
    ("synthetic", _bool, "acceptance decided by a synthetic mechanism"),
    ("acceptance_mechanism", _str, "model | vllm_synthetic_rates | sglang_simulate_acc_len | none"),
    ("acceptance_name", _str, ""),
    ("acceptance_kind", _str, "minvar | geometric | rates"),
    ("acceptance_rates", pa.list_(_f64), "unconditional per-position rates"),
    ("configured_L", _f64, "1 + sum(rates)"),
    ("batch_size", _i64, "closed batch B; loops: max running requests"),
    ("corpus", _str, ""),
    ("corpus_pool_hash", _str, "content hash of the prompt pool"),
    ("seed", _i64, ""),
    ("cuda_graphs", _bool, ""),
    ("workload", _str, ""),
    ("workload_kind", _str, "closed_batch | open_loop | closed_loop"),
    ("prompt_len", _i64, "tokens"),
    ("output_len", _i64, "tokens"),
    ("request_rate", _f64, "open loop requests/s"),
    ("device", _str, "cpu | cuda"),
    ("prefix_caching", _bool, ""),
    ("concurrency", _i64, "closed loop: clients, each sending its next request when its last completes"),
    # environment
    ("engine_version", _str, ""),
    ("torch_version", _str, ""),
    ("cuda_version", _str, ""),
    ("driver_version", _str, ""),
    ("gpu_names", pa.list_(_str), ""),
    ("gpu_uuids", pa.list_(_str), ""),
    ("gpu_uuid", _str, "GPU UUIDs joined with ','"),
    ("power_limit_w", _f64, "enforced power limit, summed over GPUs"),
    ("hostname", _str, ""),
    ("slurm_job_id", _str, ""),
    ("cuda_visible_devices", _str, ""),
    ("python_version", _str, ""),
    ("engine_start_s", _f64, "engine construction to ready"),
    ("engine_instance", _str, "one id per engine launch: cells with equal ids shared one engine"),
    ("engine_shared_cells", _i64, "cells measured on this engine launch (1 = dedicated engine)"),
    (
        "device_held_s",
        _f64,
        "seconds from taking this job's device lease to this record (monotonic): idle "
        "measurement, prompts, engine start and every cell so far; a job's last record is "
        "its device time less the engine teardown (ADR 0038)",
    ),
    (
        "engine_config",
        _str,
        "effective engine configuration read from the built engine (JSON object, sorted keys; "
        "ADR 0029); null when the adapter could not read it",
    ),
    ("async_scheduling", _bool, "engine_config.async_scheduling as the engine resolved it; null when unknown"),
    (
        "cuda_graph_sizes",
        _i64,
        "number of CUDA graph capture sizes (engine_config.cudagraph_capture_sizes); null when unknown",
    ),
    # window
    ("window_start", _ts, "wall clock"),
    ("window_end", _ts, "wall clock"),
    ("window_start_monotonic", _f64, "time.monotonic() at window start"),
    ("window_end_monotonic", _f64, ""),
    ("window_s", _f64, "energy window length"),
    ("warmup_s", _f64, "unsampled warm-up used"),
    ("cooldown_s", _f64, "cooldown used"),
    ("repeats", _i64, "closed batch: generations inside the window"),
    # loop workloads: what the load generator did (ADR 0110-0112); null for closed batches
    (
        "arrival_schedule",
        _str,
        "open loop: independent (gaps drawn until the horizon, the count random) | scaled "
        "(N gaps scaled so that N arrivals take N / rate, as vllm bench serve)",
    ),
    ("burstiness", _f64, "open loop: gamma shape of the gaps between arrivals (1 = Poisson)"),
    ("requests_sent", _i64, "requests the client sent inside the window"),
    ("realized_request_rate", _f64, "requests_sent / window_s: the arrival rate the window actually got"),
    (
        "send_lag_p50_s",
        _f64,
        "send time minus due time over the requests sent in the window, nearest-rank: due = "
        "the arrival (open loop), the client's previous completion (closed loop)",
    ),
    ("send_lag_p99_s", _f64, ""),
    ("send_lag_max_s", _f64, ""),
    ("inflight_at_start", _i64, "requests in flight at the client at the window's start"),
    ("inflight_at_end", _i64, "requests in flight at the client at the window's end"),
    ("mean_inflight", _f64, "time-average of the requests in flight at the client over the window (exact)"),
    ("snapshot_start_s", _f64, "seconds the /metrics read after the window's start took"),
    ("snapshot_end_s", _f64, "seconds the /metrics read after the window's end took"),
    (
        "edge_committed_tokens",
        _i64,
        "committed tokens between the snapshots bracketing the two edges: the "
        "counters at the marks are within this of the exact ones (ADR 0110)",
    ),
    ("metrics_polls", _i64, "/metrics reads from the loop's start to its end (sampler and edges)"),
    ("metrics_poll_mean_s", _f64, "mean seconds per /metrics read (its cost to the server, ADR 0110)"),
    # energy
    ("meter", _str, "nvml | none"),
    ("energy_j", _f64, "NVML total-energy delta over the window, summed over GPUs; null if meter none"),
    ("energy_j_per_gpu", pa.list_(_f64), ""),
    ("mean_power_w", _f64, "energy_j / window_s"),
    ("idle_power_w", _f64, "measured before the engine started"),
    ("energy_counter_updates", _i64, "distinct energy-counter values seen in the window"),
    ("timeline_samples", _i64, ""),
    ("timeline_hz", _f64, "achieved sampling rate"),
    ("power_min_w", _f64, ""),
    ("power_max_w", _f64, ""),
    ("max_temperature_c", _f64, ""),
    (
        "mean_temperature_c",
        _f64,
        "mean of the window's GPU temperature samples, °C, every GPU's (null without a GPU meter, and in records "
        "before 2026-12-07h): the window's thermal state where max_temperature_c is its peak (ADR 0083 addendum 4)",
    ),
    ("throttle_reasons_mask", _i64, "OR of NVML clock-event reasons seen in the window"),
    ("other_gpu_processes", _i64, "compute processes on the GPU(s) not ours"),
    # engine counters (window deltas)
    ("committed_tokens", _i64, "generated tokens committed"),
    ("prompt_tokens", _i64, ""),
    (
        "requests_completed",
        _i64,
        "requests the engine finished (request_success delta); loops: taken at the snapshots "
        "bracketing the edges, within edge_requests_completed of the exact count (ADR 0110, 0226)",
    ),
    ("requests_failed", _i64, ""),
    ("drafts", _i64, "speculation rounds"),
    ("draft_tokens", _i64, ""),
    ("accepted_tokens", _i64, ""),
    ("accepted_per_position", pa.list_(_i64), ""),
    ("mean_running_requests", _f64, "concurrency sampled in the window"),
    ("max_running_requests", _f64, ""),
    (
        "running_requests_segments",
        pa.list_(_f64),
        "loops: mean running-requests reading in each quarter of the "
        "window (null where none fell): the steady_state check",
    ),
    ("waiting_requests_mean", _f64, "loops: mean of the engine's waiting-requests gauge in the window"),
    # latency (seconds)
    ("ttft_mean_s", _f64, ""),
    ("ttft_p50_s", _f64, ""),
    ("ttft_p99_s", _f64, ""),
    ("tpot_mean_s", _f64, "time between tokens"),
    ("tpot_p50_s", _f64, ""),
    ("tpot_p99_s", _f64, ""),
    (
        "latency_source",
        _str,
        "request_metrics (vLLM, per request) | request_timestamps (SGLang meta_info stamps, "
        "per request) | client_stream (HTTP client, per request) | engine_histogram (bucketed)",
    ),
    ("starved_requests", _i64, "client_stream: requests whose stream reached the client in bursts (ADR 0110)"),
    (
        "latency_unreliable_reason",
        _str,
        "why the time-between-tokens columns are null (client starved); null when they are measured",
    ),
    # derived on the spot
    ("mj_per_committed_token", _f64, "null when energy is not measured"),
    ("realized_L", _f64, "1 + accepted / drafts"),
    ("accepted_per_verification", _f64, "accepted / drafts"),
    ("tokens_per_s", _f64, "committed tokens / window"),
    (
        "round_time_ms",
        _f64,
        "window per engine step that committed tokens: 1000 × window_s × B_eff / (committed − "
        "accepted); B_eff = batch_size (closed batch) or mean_running_requests (open loop); "
        "a baseline decode step or a speculation round alike (ADR 0029)",
    ),
    # wave 2 (appended: older records read back with these null)
    (
        "status",
        _str,
        "measured | unsupported (null in records before wave 2 = measured); an unsupported record has "
        "identity and environment columns only (ADR 0063)",
    ),
    ("unsupported_reason", _str, "why the engine cannot run this cell, in the engine's own words where it gave them"),
    ("window_index", _i64, "0-based replicate window on one warm engine (null before wave 2 = 0; ADR 0064)"),
    ("engine_replicate", _i64, "0-based replicate of the campaign on fresh engine starts (null before wave 2 = 0)"),
    ("target_architecture", _str, "architectures[0] of the target's config.json (null for a hub id not resolved)"),
    ("target_family", _str, "attention family of the target: gqa | gqa_sliding | mla | gated_deltanet | mha | other"),
    ("target_moe", _bool, "the target routes tokens to experts"),
    ("draft_architecture", _str, "architectures[0] of the drafter's (or the pair's draft model's) config.json"),
    ("verify_width", _f64, "tokens verified per request per verify pass, measured: 1 + draft_tokens / drafts"),
    ("drafted_per_committed", _f64, "draft tokens proposed per committed token: draft_tokens / committed_tokens"),
    (
        "draft_passes_per_round",
        _f64,
        "drafter forward passes per speculation round, by scheme: draft_model and heads "
        "k, block drafters 1, host n-gram 0 (specjoule.schemes)",
    ),
    ("host_cpu_model", _str, "CPU model of the host that drove the engine (/proc/cpuinfo)"),
    ("host_cpu_count", _i64, "CPUs usable by the cell process"),
    ("host_load_1m", _f64, "1-minute load average at the window's end"),
    (
        "host_cpu_signature",
        _str,
        "vendor, family/model/stepping, microcode and cache size of the host CPU (/proc/cpuinfo; null before "
        "2026-12-07): tells hosts apart whose host_cpu_model is a generic name (ADR 0254)",
    ),
    (
        "host_speed_mops",
        _f64,
        "millions of iterations per second of a fixed one-core Python probe, best of 5, run after the window "
        "(specjoule.env.host_speed; null before 2026-12-07): the host's speed, beside host_load_1m (ADR 0254)",
    ),
    ("gpu_busy_fraction", _f64, "mean NVML GPU utilization in the window / 100 (null without a GPU meter)"),
    # hardware counters over the window (issue 18, ADR 0101): NVML GPM on Hopper and later, read at the
    # window edges; null with counters_reason where the GPU, driver or VM does not give them (never 0)
    (
        "counters_source",
        _str,
        "gpm (NVML GPU performance monitoring) | utilization (nvmlDeviceGetUtilizationRates only) | none (no meter)",
    ),
    ("counters_reason", _str, "why the GPM columns are null (the NVML error in its own words); null when measured"),
    (
        "dram_bw_util_pct",
        _f64,
        "GPM DRAM bandwidth utilization over the window, % of the GPU's theoretical peak (mean over the cell's GPUs)",
    ),
    ("sm_active_pct", _f64, "GPM SM activity over the window: % of SMs busy (mean over GPUs)"),
    ("tensor_active_pct", _f64, "GPM tensor-core activity over the window: % of time any tensor pipe was busy"),
    (
        "mem_busy_pct",
        _f64,
        "mean of nvmlDeviceGetUtilizationRates().memory in the window: % of time HBM was read "
        "or written (not bandwidth); the fallback where GPM is refused",
    ),
    (
        "target_revision",
        _str,
        "the target's weights as resolve_models found them: a hub snapshot's commit, "
        "sha256:<weights> for a local checkpoint (fp:<…> above 2 GiB), config-sha256:<…> "
        "for a shape-only one; null outside Snakemake (ADR 0121)",
    ),
    (
        "draft_revision",
        _str,
        "the same for the drafter (the pair's draft for draft_model, the scheme's drafter "
        "otherwise); null for ngram and baseline",
    ),
    # tensor parallelism (issue 23, ADR 0155)
    (
        "tensor_parallel_size",
        _i64,
        "the target's tensor-parallel size: GPUs the cell held and metered (energy_j sums "
        "energy_j_per_gpu over them, in gpu_uuids order); null before issue 23 = 1",
    ),
    # faults (issue 21): what a shared cluster did to the cell, appended (older records read back with these null)
    (
        "other_gpu_process_list",
        _str,
        "compute processes not ours on the cell's GPU(s) at its start or window end, "
        "'pid N name (MiB) on GPU i; ...' (checks.gpu_in_use: flag; ADR 0133)",
    ),
    (
        "slurm_restart_count",
        _i64,
        "SLURM's restart count of the job that measured: 0 on its first run, >= 1 after "
        "a requeue; null outside SLURM (ADR 0134)",
    ),
    (
        "retried",
        _bool,
        "an earlier attempt at this cell started and ended without a record (preemption, requeue, "
        "crash, failure); this record is from a later attempt (ADR 0134)",
    ),
    # device time (issue 22): what the runner left out of the held time, appended (older records read back null)
    (
        "warmup_skipped",
        _bool,
        "true: no warm-up, the window before on this engine ran the same configuration (only "
        "the seed or window index differ; ADR 0188); false: the configured warm-up ran",
    ),
    (
        "compile_cache_warm",
        _bool,
        "the engine start found its compiled graphs in the campaign's compile cache (true) "
        "or compiled them (false); null: not vLLM, or nothing compiled (ADR 0189)",
    ),
    # (appended 2026-12-02b; older records read back null: their commit and the bundle manifest name it, ADR 0183)
    ("transformers_version", _str, "the transformers the engine process imported to read the model configs"),
    # loop window accounting (issue 19, ADR 0226), appended: older loop records read back null
    (
        "edge_requests_completed",
        _i64,
        "loops: requests the engine completed between the snapshots bracketing the two edges: "
        "requests_completed, taken at those snapshots, is within this of the exact count in the window",
    ),
]

#: What each column means. The documentation of a record is this code, versioned with it and with
#: ``record_version``; it is not written into record files, where it was a quarter of every one-row record's
#: bytes, carried by each device call with the committed evidence (ADR 0190).
RECORD_DOCS: dict[str, str] = {n: d for n, _, d in RECORD_FIELDS}
RECORD_SCHEMA = pa.schema(
    [pa.field(n, t, nullable=True) for n, t, _ in RECORD_FIELDS],
    metadata={"record_version": str(RECORD_VERSION)},
)
RECORD_COLUMNS = [n for n, _, _ in RECORD_FIELDS]

TIMELINE_SCHEMA = pa.schema(
    [
        ("t_monotonic", _f64),
        ("t_rel_s", _f64),
        ("gpu_index", pa.int32()),
        ("gpu_uuid", _str),
        ("power_w", _f64),
        ("energy_mj", _i64),
        ("sm_clock_mhz", _i64),
        ("mem_clock_mhz", _i64),
        ("temperature_c", _f64),
        ("throttle_reasons", _i64),
        ("gpu_util_pct", _f64),
        ("mem_util_pct", _f64),
        ("in_window", _bool),
        # GPM metrics between this tick's sample and the previous one (issue 18, ADR 0101); null where unsupported
        ("dram_bw_util_pct", _f64),
        ("sm_active_pct", _f64),
        ("tensor_active_pct", _f64),
    ]
)


def _window_samples(timeline: Any, column: str) -> list[float]:
    """The in-window, non-null samples of one column of a timeline (TIMELINE_SCHEMA); none without a GPU meter or a
    timeline without the columns."""
    try:
        pairs = zip(timeline.column(column).to_pylist(), timeline.column("in_window").to_pylist())
    except (KeyError, AttributeError):
        return []
    return [u for u, w in pairs if w and u is not None]


def window_gpu_util_samples(timeline: Any) -> list[float]:
    """The in-window, non-null ``gpu_util_pct`` samples of a timeline; none without a GPU meter."""
    return _window_samples(timeline, "gpu_util_pct")


def window_gpu_busy_fraction(timeline: Any) -> float | None:
    """A record's ``gpu_busy_fraction``: the mean of the window's utilization samples / 100; None without them."""
    util = window_gpu_util_samples(timeline)
    return sum(util) / len(util) / 100.0 if util else None


def window_mean_temperature_c(timeline: Any) -> float | None:
    """A record's ``mean_temperature_c``: the mean of the window's temperature samples; None without them."""
    temps = _window_samples(timeline, "temperature_c")
    return sum(temps) / len(temps) if temps else None


ENERGY_COLUMNS = ("energy_j", "energy_j_per_gpu", "mean_power_w", "idle_power_w", "mj_per_committed_token")


class RecordError(ValueError):
    pass


def derive(row: dict[str, Any]) -> dict[str, Any]:
    """Fill the per-cell derived columns from the measured ones."""
    out = dict(row)
    committed, drafts, accepted = out.get("committed_tokens"), out.get("drafts"), out.get("accepted_tokens")
    window = out.get("window_s")
    energy = out.get("energy_j")
    out["mj_per_committed_token"] = (energy * 1000.0 / committed) if (energy is not None and committed) else None
    if drafts:
        out["accepted_per_verification"] = accepted / drafts if accepted is not None else None
        out["realized_L"] = 1.0 + accepted / drafts if accepted is not None else None
    else:
        out["accepted_per_verification"] = None
        out["realized_L"] = None if out.get("method") not in (None, "baseline") else 1.0
    draft_tokens = out.get("draft_tokens")
    # Measured, not configured: a proposer that drafts fewer than k tokens (n-gram without a match) verifies fewer.
    out["verify_width"] = 1.0 + draft_tokens / drafts if (drafts and draft_tokens is not None) else None
    out["drafted_per_committed"] = draft_tokens / committed if (committed and draft_tokens is not None) else None
    out["tokens_per_s"] = committed / window if (committed is not None and window) else None
    out["round_time_ms"] = round_time_ms(out)
    if energy is not None and window:
        out.setdefault("mean_power_w", energy / window)
    return out


def round_time_ms(row: Mapping[str, Any]) -> float | None:
    """Milliseconds of window per engine step that committed tokens (ADR 0029).

    Every request-step commits 1 token plus the drafts accepted in it (0 for a baseline or a round
    without a draft), so request-steps = committed − accepted; dividing by the requests a step holds
    (B in a closed batch, the sampled mean in open loop) gives engine steps. The counters are the
    engine's own; the definition is the same for baseline and speculative arms, so the two compare.
    Closed batches slightly understate steps (hence overstate the time per step) in the tail of a
    generation, when fewer than B requests remain — equally in every arm that finishes together.
    """
    committed, accepted, window = row.get("committed_tokens"), row.get("accepted_tokens"), row.get("window_s")
    if accepted is None and row.get("method") in (None, "baseline"):
        accepted = 0
    b_eff = row.get("batch_size") if row.get("workload_kind") == "closed_batch" else row.get("mean_running_requests")
    if committed is None or accepted is None or not window or not b_eff:
        return None
    steps_x_b = committed - accepted
    return 1000.0 * window * b_eff / steps_x_b if steps_x_b > 0 else None


STATUS_MEASURED = "measured"
STATUS_UNSUPPORTED = "unsupported"
# What an unsupported record may not carry: it measured nothing (ADR 0063).
_MEASURED_ONLY = ("energy_j", "committed_tokens", "window_s", "mj_per_committed_token", "drafts")


def validate_row(row: Mapping[str, Any]) -> None:
    unknown = set(row) - set(RECORD_COLUMNS)
    if unknown:
        raise RecordError(f"unknown record columns: {sorted(unknown)}")
    status = row.get("status")
    if status not in (None, STATUS_MEASURED, STATUS_UNSUPPORTED):
        raise RecordError(f"status = {status!r}; known: {STATUS_MEASURED}, {STATUS_UNSUPPORTED}")
    if status == STATUS_UNSUPPORTED:
        if not row.get("unsupported_reason"):
            raise RecordError("an unsupported record must say why (unsupported_reason)")
        measured = [n for n in _MEASURED_ONLY if row.get(n) is not None]
        if measured:
            raise RecordError(f"an unsupported record measured nothing, but has {', '.join(measured)}")
        return
    for name in RECORD_COLUMNS:
        v = row.get(name)
        if isinstance(v, float) and math.isnan(v):
            raise RecordError(f"{name} is NaN; write null for 'not measured'")
    if row.get("meter") == "none":
        for name in ENERGY_COLUMNS:
            if row.get(name) not in (None, []):
                raise RecordError(f"meter is 'none' but {name} = {row.get(name)!r}; energy must be null")
    elif row.get("meter") is not None:
        if row.get("energy_j") is None or row["energy_j"] <= 0:
            raise RecordError(f"meter is {row['meter']!r} but energy_j = {row.get('energy_j')!r}")


def to_table(rows: list[Mapping[str, Any]]) -> pa.Table:
    full = []
    for r in rows:
        validate_row(r)
        full.append({n: r.get(n) for n in RECORD_COLUMNS} | {"record_version": RECORD_VERSION})
    return pa.Table.from_pylist(full, schema=RECORD_SCHEMA)


def default_file_mode() -> int:
    # mkstemp creates 0600 files; results are shared (project directories on a cluster), so a renamed
    # file gets the mode a plain open() would have given it under the current umask.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """Yield a temp path beside ``path``; on success fsync and rename it over ``path``, on any
    failure remove it. Readers see the whole file or nothing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_atomic(table: pa.Table, path: str | Path) -> None:
    """Write a Parquet file so that readers see the whole file or nothing."""
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


#: A record is one row. Per-column min/max statistics would only repeat its values in the footer (engine_config's
#: JSON twice), and a dictionary page per column would only wrap its one value; no reader uses either (ADR 0190).
#: Nor is the Arrow schema stored (``ARROW:schema``, 11.5 kB of a 147-column record's 24 kB footer): Parquet's own
#: schema gives the reader back the same Arrow schema for every record type (int32, int64, float64, bool, string,
#: timestamp[us, UTC] and lists of them), and the one key-value pair readers use, ``record_version``, is written
#: as Parquet key-value metadata by ``record_parquet`` (ADR 0221).
RECORD_PARQUET_OPTIONS: dict[str, Any] = {"write_statistics": False, "use_dictionary": False, "store_schema": False}


def record_parquet(table: pa.Table, where: str | pa.NativeFile) -> None:
    """Write record rows as Parquet the one way records are written (the runner, tools/slim_records.py).

    Without the stored Arrow schema, Arrow writes no key-value metadata either; the schema's (``record_version``)
    is added to the footer here, so that a reader gets the same ``schema.metadata`` back (ADR 0221)."""
    with pq.ParquetWriter(where, table.schema, **RECORD_PARQUET_OPTIONS) as writer:
        writer.write_table(table)
        if table.schema.metadata:
            writer.add_key_value_metadata(table.schema.metadata)


def write_record_table(table: pa.Table, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        record_parquet(table, tmp)


def write_record(row: Mapping[str, Any], path: str | Path) -> None:
    write_record_table(to_table([row]), path)


def read_records(paths: list[str | Path]) -> pa.Table:
    tables = []
    for p in paths:
        t = pq.read_table(p)
        version = (t.schema.metadata or {}).get(b"record_version", b"?").decode()
        if version != str(RECORD_VERSION):
            raise RecordError(f"{p}: record_version {version}, this reader knows {RECORD_VERSION}")
        tables.append(t)
    return pa.concat_tables(tables) if tables else RECORD_SCHEMA.empty_table()
