"""Model resolution before any GPU job (ADR 0121): local checkpoints checked at parse time, hub ids
fetched through the real huggingface_hub code path from a local mirror in the hub cache layout."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake_api import REPO, plan, write_config

from specjoule import config, pair
from specjoule import resolve_models as rm

TARGET = REPO / "config/models/trained-qwen3-target"
DRAFT = REPO / "config/models/trained-qwen3-draft"
REAL = REPO / "config/cpu-real-acceptance.yaml"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def real_raw() -> dict:
    return yaml.safe_load(REAL.read_text())


def with_pair(raw: dict, target: dict, draft: dict) -> dict:
    out = copy.deepcopy(raw)
    out["models"] = {"p": {"target": target, "draft": draft, "max_model_len": 256}}
    return out


def checkpoint_without_weights(dest: Path) -> Path:
    dest.mkdir(parents=True)
    shutil.copy(TARGET / "config.json", dest / "config.json")
    return dest


def error_of(raw: dict) -> config.ConfigError:
    with pytest.raises(config.ConfigError) as info:
        rm.check_config(config.validate(raw))
    return info.value


# -- parse-time checks of local directories --------------------------------------------------------


def test_shipped_configs_pass_the_checks():
    for path in sorted((REPO / "config").glob("*.yaml")):
        if path.name != "schema.yaml":
            rm.check_config(config.load(path))


def test_checkpoint_without_weights_is_refused_unless_dummy(tmp_path):
    bare = checkpoint_without_weights(tmp_path / "bare")
    err = error_of(with_pair(real_raw(), {"model": str(bare)}, {"model": str(DRAFT)}))
    assert err.key == "models.p.target.model" and err.value == str(bare)
    assert "no weights" in err.reason and "load_format: dummy" in err.reason
    assert str(err).startswith(f"config error at models.p.target.model = '{bare}'")
    # The same directory as a shape-only model is fine.
    rm.check_config(config.validate(with_pair(real_raw(), {"model": str(bare), "load_format": "dummy"},
                                              {"model": str(DRAFT)})))


def test_index_naming_a_missing_shard_is_refused(tmp_path):
    ckpt = tmp_path / "sharded"
    shutil.copytree(TARGET, ckpt)
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    err = error_of(with_pair(real_raw(), {"model": str(ckpt)}, {"model": str(DRAFT)}))
    assert err.key == "models.p.target.model" and "model-00002-of-00002.safetensors" in err.reason


def test_directory_without_config_json_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    err = error_of(with_pair(real_raw(), {"model": str(TARGET)}, {"model": str(tmp_path / "empty")}))
    assert err.key == "models.p.draft.model" and "config.json" in err.reason


def shape_only(dest: Path, vocab: int) -> Path:
    dest.mkdir(parents=True)
    cfg = json.loads((REPO / "config/models/tiny-target/config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**cfg, "vocab_size": vocab}))
    return dest


def test_tokenizer_whose_ids_the_model_cannot_embed_is_refused(tmp_path):
    from specjoule import tokenizer as tk

    top = tk.ShippedTokenizer().size - 1  # the shipped tokenizer's largest id
    small = shape_only(tmp_path / "small", vocab=top)  # one id short
    # A shape-only target takes the shipped tokenizer; the key is the model that chose it.
    err = error_of(with_pair(real_raw(), {"model": str(small), "load_format": "dummy"}, {"model": str(DRAFT)}))
    assert err.key == "models.p.target.model" and str(tk.SHIPPED_TOKENIZER_PATH) == err.value
    assert f"ids up to {top}" in err.reason and f"vocab_size {top}" in err.reason
    # Named explicitly, the tokenizer key is named.
    err = error_of(with_pair(real_raw(), {"model": str(small), "load_format": "dummy", "tokenizer": "specjoule"},
                             {"model": str(DRAFT)}))
    assert err.key == "models.p.target.tokenizer"
    # The draft embeds the target's prompt ids too.
    err = error_of(with_pair(real_raw(), {"model": str(TARGET)}, {"model": str(small), "load_format": "dummy"}))
    assert err.key == "models.p.target.model" and err.value == str(TARGET) and str(small) in err.reason
    # One id more and it fits.
    fits = shape_only(tmp_path / "fits", vocab=top + 1)
    rm.check_config(config.validate(with_pair(real_raw(), {"model": str(fits), "load_format": "dummy"},
                                              {"model": str(DRAFT)})))


def test_bad_checkpoint_stops_snakemake_at_parse_time(tmp_path):
    bare = checkpoint_without_weights(tmp_path / "bare")
    cfg = write_config(tmp_path / "bad.yaml", with_pair(real_raw(), {"model": str(bare)}, {"model": str(DRAFT)}))
    with pytest.raises(Exception) as info:
        plan(tmp_path / "work", cfg)
    assert f"models.p.target.model = '{bare}'" in str(info.value)


# -- resolution: manifests, hub mirror, what the runner reads --------------------------------------


def hub_mirror(cache: Path, repo_id: str, source: Path, commit: str = COMMIT) -> Path:
    """A model in the hub cache layout: blobs, a snapshot of symlinks to them, refs/main."""
    root = cache / ("models--" + repo_id.replace("/", "--"))
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    (root / "blobs").mkdir()
    for f in source.iterdir():
        blob = root / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copy(f, blob)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    return snap


def resolve_cli(cfg: Path, workdir: Path, cache: Path) -> subprocess.CompletedProcess:
    # A fresh process: huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE when it is imported.
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "specjoule.resolve_models", str(cfg), "--workdir", str(workdir)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_hub_id_resolves_from_the_cache_offline_and_the_runner_loads_the_snapshot(tmp_path):
    cache, work = tmp_path / "hub", tmp_path / "work"
    snap = hub_mirror(cache, "specjoule-test/trained-target", TARGET)
    raw = with_pair(real_raw(), {"model": "specjoule-test/trained-target", "dtype": "bfloat16"},
                    {"model": str(DRAFT), "dtype": "bfloat16"})
    cfg = write_config(tmp_path / "hub.yaml", raw)
    proc = resolve_cli(cfg, work, cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    validated = config.validate(raw)
    refs = rm.model_refs(validated)
    manifests = {r.key: json.loads((work / rm.manifest_path(r)).read_text()) for r in refs}
    hub = manifests["models.p.target.model"]
    assert hub["source"] == "hub" and hub["revision"] == COMMIT and Path(hub["path"]) == snap.resolve()
    local = manifests["models.p.draft.model"]
    assert local["source"] == "local" and local["revision"] == rm.resolve(
        rm.ModelRef("x", str(DRAFT), "auto", None), str(cache))["revision"]

    from specjoule import cells

    cell = next(c for c in cells.build(validated) if c.spec["scheme"]["method"] == "draft_model")
    spec, revisions = rm.localize(cell.spec, work)
    assert spec.engine.target.model == hub["path"] and spec.engine.draft.model == str(DRAFT)
    assert cell.spec["target"]["model"] == "specjoule-test/trained-target"  # the cell's own spec is untouched
    assert revisions == {"target_revision": COMMIT, "draft_revision": local["revision"]}
    ngram = next(c for c in cells.build(validated) if c.spec["scheme"]["method"] == "ngram")
    assert rm.localize(ngram.spec, work)[1] == {"target_revision": COMMIT, "draft_revision": None}
    # Outside a workflow (no manifests) nothing is guessed.
    assert rm.localize(cell.spec, tmp_path / "elsewhere") == (cell.setup, {"target_revision": None,
                                                                           "draft_revision": None})


def test_local_revision_follows_the_weights_bytes(tmp_path):
    def revision(path: Path) -> str:
        return rm.resolve(rm.ModelRef("models.p.target.model", str(path), "auto", None), str(tmp_path))["revision"]

    same, changed = tmp_path / "same", tmp_path / "changed"
    shutil.copytree(DRAFT, same)
    shutil.copytree(DRAFT, changed)
    weights = bytearray((changed / pair.WEIGHTS_FILE).read_bytes())
    weights[-1] ^= 1
    (changed / pair.WEIGHTS_FILE).write_bytes(bytes(weights))
    assert revision(DRAFT) == "sha256:" + pair.read_manifest(DRAFT)["weights_sha256"][:16]
    assert revision(same) == revision(DRAFT) != revision(changed)
    # Shape-only models: the config is what identifies them.
    dummy = rm.resolve(rm.ModelRef("k", str(REPO / "config/models/tiny-target"), "dummy", None), str(tmp_path))
    assert dummy["revision"].startswith("config-sha256:")


def test_hub_model_missing_offline_fails_naming_key_and_id(tmp_path):
    raw = with_pair(real_raw(), {"model": "specjoule-test/not-mirrored"}, {"model": str(DRAFT)})
    proc = resolve_cli(write_config(tmp_path / "c.yaml", raw), tmp_path / "work", tmp_path / "hub")
    assert proc.returncode == 1
    assert "config error at models.p.target.model = 'specjoule-test/not-mirrored': cannot fetch" in proc.stdout
    assert not (tmp_path / "work/results").exists()  # nothing half-written


def test_hub_snapshot_without_weights_is_refused_after_the_fetch(tmp_path):
    cache = tmp_path / "hub"
    hub_mirror(cache, "specjoule-test/config-only", checkpoint_without_weights(tmp_path / "bare"))
    raw = with_pair(real_raw(), {"model": "specjoule-test/config-only"}, {"model": str(DRAFT)})
    proc = resolve_cli(write_config(tmp_path / "c.yaml", raw), tmp_path / "work", cache)
    assert proc.returncode == 1 and "models.p.target.model" in proc.stdout and "no weights" in proc.stdout


def test_one_manifest_per_distinct_model_and_unchanged_manifests_are_not_rewritten(tmp_path):
    raw = real_raw()
    raw["models"]["again"] = copy.deepcopy(raw["models"]["trained"])  # the same two checkpoints
    validated = config.validate(raw)
    manifests = rm.resolve_all(validated, log=lambda m: None)
    assert len(manifests) == 2
    rm.write_manifests(manifests, tmp_path)
    path = tmp_path / next(iter(manifests))
    before = path.stat().st_mtime_ns
    rm.write_manifests(rm.resolve_all(validated, log=lambda m: None), tmp_path)
    assert path.stat().st_mtime_ns == before


def _dag(configfile: Path, workdir: Path, profile_slurm: bool = False):
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings

    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        wapi = api.workflow(resource_settings=ResourceSettings(cores=1, resources={"gpu": 1}),
                            storage_settings=StorageSettings(), config_settings=ConfigSettings(configfiles=[configfile]),
                            snakefile=REPO / "Snakefile", workdir=workdir)
        wapi.dag(dag_settings=DAGSettings()).execute_workflow(executor="local", pseudo_executor="dryrun")
        dag = wapi._workflow.dag
        jobs = list(dag.needrun_jobs(exclude_finished=False))
        return {j: {d.rule.name for d in dag.dependencies[j]} for j in jobs}


@pytest.mark.parametrize("configfile", ["config/cpu-real-acceptance.yaml", "config/config.yaml"])
def test_every_gpu_job_waits_for_resolve_models_which_is_local(configfile, tmp_path):
    deps = _dag(REPO / configfile, tmp_path)
    resolve = [j for j in deps if j.rule.name == "resolve_models"]
    assert len(resolve) == 1 and resolve[0].is_local  # a localrule: on the login node under profiles/slurm
    gpu = [j for j in deps if j.rule.name == "run_cell"]
    assert gpu and all(j.resources.get("gpu") == 1 for j in gpu)
    # Each GPU job names its models' manifests, so it runs after resolve_models.
    assert all("resolve_models" in deps[j] for j in gpu)


def test_records_measured_before_resolution_existed_are_not_replanned(workflow, tmp_path):
    """A working directory whose cells were measured by a workflow without resolve_models: Snakemake
    recorded their inputs without manifests; the `input` rerun trigger must not re-measure them."""
    from snakemake_api import materialize

    snakefile, work = workflow
    demo = REPO / "config/config.yaml"
    rules = snakefile.parent / "rules/common.smk"
    original = rules.read_text()
    without_manifests = original.replace("_chain_inputs(cell) + _cell_model_manifests(cell)", "_chain_inputs(cell)")
    assert without_manifests != original  # the old workflow really lacks the manifests
    rules.write_text(without_manifests)
    materialize(work, demo, snakefile)  # "measured" by the old workflow
    rules.write_text(original)
    counts = plan(work, demo, snakefile=snakefile)
    assert counts["run_cell"] == 0, dict(counts)


def test_a_head_drafter_from_the_hub_is_localized_into_the_scheme_even_when_the_pair_has_a_draft(tmp_path):
    """An EAGLE3 cell of a pair that also has a draft model (for its draft_model arms): the fetched snapshot of the
    scheme's drafter replaces the scheme's drafter, and the pair's draft stays as it was (once, the snapshot went
    into the pair's draft instead and the engine would have loaded the drafter by its hub id)."""
    from specjoule import cells

    raw = config.read_yaml(REPO / "validation/h200-2026-12/config/h200-schemes-qwen3-8b.yaml")
    raw["models"]["qwen3_8b"]["draft"] = {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"}
    raw["schemes"]["eagle3"]["drafter"] = "specjoule-test/qwen3-8b-eagle3"
    validated = config.validate(raw)
    eagle3 = next(c for c in cells.build(validated) if c.spec["scheme"]["method"] == "eagle3")
    snapshot = str(tmp_path / "hub" / "snapshots" / COMMIT)
    for role, ref in rm.cell_refs(eagle3.spec).items():
        hub = ref.model == "specjoule-test/qwen3-8b-eagle3"
        manifest = tmp_path / rm.manifest_path(ref)
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps({"source": "hub" if hub else "local", "revision": COMMIT if hub else "r-" + role,
                                        "path": snapshot if hub else ref.model}))
    assert rm.cell_refs(eagle3.spec)["draft"].model == "specjoule-test/qwen3-8b-eagle3"
    spec, revisions = rm.localize(eagle3.spec, tmp_path)
    assert spec.scheme.drafter == snapshot
    assert spec.engine.draft is not None and spec.engine.draft.model == "config/models/qwen2.5-0.5b"
    assert revisions == {"target_revision": "r-target", "draft_revision": COMMIT}
