"""The record contract: null (never 0 or NaN) energy without a meter, atomic writes, versioning."""

import math
import os
import stat

import pyarrow as pa
import pytest

from specjoule import records


def row(**over):
    base = {"cell_id": "c", "campaign_id": "k", "cell_name": "n", "meter": "none", "committed_tokens": 128,
            "drafts": 10, "accepted_tokens": 25, "window_s": 2.0, "method": "draft_model"}
    return records.derive({**base, **over})


def test_derive_realized_length_and_null_energy_without_meter():
    r = row()
    assert r["realized_L"] == pytest.approx(3.5) and r["accepted_per_verification"] == pytest.approx(2.5)
    assert r["mj_per_committed_token"] is None and r["tokens_per_s"] == pytest.approx(64.0)
    assert records.to_table([r]).column("energy_j").null_count == 1


def test_energy_with_meter_none_is_refused():
    with pytest.raises(records.RecordError, match="energy must be null"):
        records.to_table([row(energy_j=0.0)])


def test_nan_and_zero_energy_are_refused():
    with pytest.raises(records.RecordError, match="NaN"):
        records.to_table([row(tpot_mean_s=math.nan)])
    with pytest.raises(records.RecordError, match="energy_j"):
        records.to_table([row(meter="nvml", energy_j=0.0)])


def test_mj_per_token_from_measured_energy():
    assert row(meter="nvml", energy_j=3.2)["mj_per_committed_token"] == pytest.approx(25.0)


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "cells" / "x.parquet"
    with pytest.raises(RuntimeError):
        with records.atomic_path(target) as tmp:
            open(tmp, "w").write("half a file")
            raise RuntimeError("cell died")
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_written_record_round_trips_with_shared_permissions(tmp_path):
    target = tmp_path / "r.parquet"
    records.write_record(row(), target)
    table = records.read_records([target])
    assert table.num_rows == 1 and table.column("record_version")[0].as_py() == records.RECORD_VERSION
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_unknown_record_version_is_refused(tmp_path):
    import pyarrow.parquet as pq

    table = records.to_table([row()]).replace_schema_metadata({"record_version": "999"})
    pq.write_table(table, tmp_path / "old.parquet")
    with pytest.raises(records.RecordError, match="record_version 999"):
        records.read_records([tmp_path / "old.parquet"])


def test_unknown_column_is_refused():
    with pytest.raises(records.RecordError, match="unknown record columns"):
        records.to_table([{**row(), "joules": 1.0}])
    assert isinstance(records.RECORD_SCHEMA, pa.Schema)
