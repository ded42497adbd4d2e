"""What the SLURM test cluster leaves in /etc/slurm after its teardown (tests/slurm_cluster.py), on files in a
temporary folder: no daemon is started, so these run in the fast tier.

A test cluster killed before its teardown leaves its slurm.conf behind, pointing at a slurmctld that is gone. The next
cluster took that file for the machine's own and restored it on teardown; every `scontrol` then waited about 10 s for
the dead controller, and so did every Snakemake start (its SLURM executor plugin runs `scontrol show config`): on
2026-12-06 `make test-fast` took 289 s instead of 150 s after one such kill.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# as the SLURM test modules do, and before them (this file is collected first): an import without it would leave
# their helper's asserts unrewritten and warn in every process that collects them
pytest.register_assert_rewrite("slurm_cluster")
import slurm_cluster as sc  # noqa: E402

OWN = "ClusterName=site\nSlurmctldHost=head\n"  # a machine's own config: no WRITTEN_MARK


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    monkeypatch.setattr(sc, "_node_line", lambda: {"RealMemory": "16000", "CPUs": "2"})
    return sc.SlurmCluster(state_dir=tmp_path / "state")


def installed(cluster: sc.SlurmCluster, path: Path) -> None:
    cluster._install(path, cluster.conf_text())
    assert path.read_text().startswith(sc.WRITTEN_MARK)


def test_every_file_the_cluster_writes_starts_with_its_mark(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(sc, "SLURM_CONF", tmp_path / "slurm.conf")
    monkeypatch.setattr(sc, "GRES_CONF", tmp_path / "gres.conf")
    cluster.state_dir.mkdir()
    cluster._write_conf()
    for path in (tmp_path / "slurm.conf", tmp_path / "gres.conf"):
        assert path.read_text().splitlines()[0].startswith(sc.WRITTEN_MARK), path
    cluster.stop()
    assert not (tmp_path / "slurm.conf").exists() and not (tmp_path / "gres.conf").exists()


def test_without_a_config_teardown_removes_the_one_it_wrote(cluster, tmp_path):
    path = tmp_path / "slurm.conf"
    installed(cluster, path)
    cluster.stop()
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_the_machines_own_config_is_backed_up_and_restored(cluster, tmp_path):
    path = tmp_path / "slurm.conf"
    path.write_text(OWN)
    installed(cluster, path)
    cluster.stop()
    assert path.read_text() == OWN and sorted(p.name for p in tmp_path.iterdir()) == ["slurm.conf"]


def test_a_killed_clusters_leftover_is_removed_not_restored(cluster, tmp_path):
    path = tmp_path / "slurm.conf"
    # FAULT INJECTION: what a cluster killed before teardown leaves (its own config, a controller port now dead)
    path.write_text(f"{sc.WRITTEN_MARK}: a single-node test cluster. Restored/removed on teardown.\nSlurmctldPort=37227\n")
    installed(cluster, path)
    cluster.stop()
    assert not path.exists(), path.read_text()


def test_a_killed_clusters_backup_of_the_machines_config_is_what_comes_back(cluster, tmp_path):
    path = tmp_path / "slurm.conf"
    # FAULT INJECTION: the killed cluster had backed up the machine's own file and written its own over it
    (tmp_path / f"slurm.conf{sc.BACKUP_SUFFIX}").write_text(OWN)
    path.write_text(f"{sc.WRITTEN_MARK}: a single-node test cluster.\nSlurmctldPort=37227\n")
    installed(cluster, path)
    cluster.stop()
    assert path.read_text() == OWN and sorted(p.name for p in tmp_path.iterdir()) == ["slurm.conf"]
