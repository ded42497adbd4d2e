"""English and Romansh news (ADR 0122): the shipped `hf` entries, loaded unchanged from local mirrors in
the hub cache layout, offline; a plan that needs a download, or a corpus in the wrong layout, stops at
parse time naming the key.

The mirrors are small made-up datasets with the real ones' configs, splits and columns (WMT24++ and its
Romansh extension; this machine cannot reach the hub); the loading code is the real `datasets` path."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from snakemake_api import REPO, plan, write_config

from specjoule import config
from specjoule import resolve_models as rm

SNIPPET = REPO / "config/corpora/corpora.yaml"
COMMITS = {"google/wmt24pp": "a" * 40, "ZurichNLP/wmt24pp-rm": "b" * 40}


def news_rows(n: int, lp: str, source, target) -> list[dict]:
    domains = ["news", "social", "speech", "literary"]
    return [{"lp": lp, "domain": domains[i % 4], "document_id": f"doc{i // 3}", "segment_id": i,
             "is_bad_source": i % 13 == 0, "source": source(i), "target": target(i)} for i in range(n)]


def dataset_repo(cache: Path, repo_id: str, config_name: str, split: str, files: dict[str, bytes]) -> Path:
    """A dataset repository snapshot in the hub cache layout, its config declared in the README."""
    root = cache / ("datasets--" + repo_id.replace("/", "--"))
    snap = root / "snapshots" / COMMITS[repo_id]
    for rel, data in files.items():
        (snap / rel).parent.mkdir(parents=True, exist_ok=True)
        (snap / rel).write_bytes(data)
    card = {"license": "apache-2.0", "configs": [{"config_name": config_name, "data_files": [
        {"split": split, "path": next(iter(files))}]}]}
    (snap / "README.md").write_text("---\n" + yaml.safe_dump(card, sort_keys=False) + "---\n# mirror for tests\n")
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(COMMITS[repo_id])
    return snap


def parquet_bytes(rows: list[dict]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue().to_pybytes()


def build_news_mirrors(cache: Path, n: int = 800) -> None:
    # WMT24++: English on the source side; the Romansh set translates its German side (ADR 0042).
    en = news_rows(n, "en-de_DE", lambda i: f"Segment {i}: the council met on Tuesday to discuss the new railway line.",
                   lambda i: f"Segment {i}: der Rat tagte am Dienstag.")
    dataset_repo(cache, "google/wmt24pp", "en-de_DE", "train",
                 {"en-de_DE.jsonl": "".join(json.dumps(r) + "\n" for r in en).encode()})
    rm_rows = news_rows(n, "de_DE-rm-rumgr", lambda i: f"Segment {i}: der Rat tagte am Dienstag.",
                        lambda i: f"Segment {i}: il cussegl ha discutà la nova lingia da viafier.")
    dataset_repo(cache, "ZurichNLP/wmt24pp-rm", "de_DE-rm-rumgr", "test",
                 {"de_DE-rm-rumgr/test-00000-of-00001.parquet": parquet_bytes(rm_rows)})


def offline_env(cache: Path, tmp: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(tmp / "datasets-cache"), "PYTHONPATH": str(REPO)}


@pytest.mark.parametrize("name, words", [("news_en", "council"), ("news_rm", "cussegl")])
def test_shipped_news_entries_load_offline_from_the_hub_cache(name, words, tmp_path):
    cache = tmp_path / "hub"
    build_news_mirrors(cache)
    proc = subprocess.run([sys.executable, "-m", "specjoule.corpora", str(SNIPPET), name, "--prompt-len", "24",
                           "--pool-size", "16", "--show", "1"], capture_output=True, text=True,
                          env=offline_env(cache, tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = yaml.safe_load(SNIPPET.read_text())["corpora"][name]
    # Provenance: the hub id, config, filter, split and the snapshot's commit.
    assert f"source    hf:{entry['dataset']}/{entry['config_name']}?domain=news&is_bad_source=False:" \
           f"{entry['split']}@{COMMITS[entry['dataset']]}" in proc.stdout
    assert "16 prompts × 24 tokens" in proc.stdout and words in proc.stdout


def news_config(tmp_path: Path) -> Path:
    raw = yaml.safe_load((REPO / "config/config.yaml").read_text())
    raw["corpora"] = {k: v for k, v in yaml.safe_load(SNIPPET.read_text())["corpora"].items() if k.startswith("news")}
    return write_config(tmp_path / "news.yaml", raw)


@pytest.fixture()
def hub_cache(tmp_path, monkeypatch):
    """An empty hub cache for this process (huggingface_hub read HF_HUB_CACHE at import)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_plan_without_the_news_downloads_fails_naming_them_and_the_command(tmp_path, hub_cache):
    cfg = news_config(tmp_path)
    with pytest.raises(Exception) as info:
        plan(tmp_path / "work", cfg)
    msg = str(info.value)
    assert "config error at corpora.news_en.dataset = 'google/wmt24pp'" in msg
    assert "corpora news_en, news_rm need a download" in msg and str(hub_cache) in msg
    assert f"python -m specjoule.corpora {cfg} news_rm --fetch" in msg


def test_plan_with_the_news_in_the_hub_cache_passes(tmp_path, hub_cache, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    build_news_mirrors(hub_cache)
    rm.check_corpora(config.load(news_config(tmp_path)))
    # Asking for more distinct news segments than the mirror has is a plan-time error too.
    raw = config.read_yaml(news_config(tmp_path))
    raw["corpora"]["news_rm"]["pool_size"] = 10_000
    with pytest.raises(config.ConfigError) as info:
        rm.check_corpora(config.validate(raw))
    assert info.value.key == "corpora.news_rm.pool_size" and "distinct documents" in info.value.reason


def wrong_layout_config(tmp_path: Path, corpus: dict) -> dict:
    raw = yaml.safe_load((REPO / "config/config.yaml").read_text())
    raw["corpora"] = {"mine": corpus}
    return config.validate(raw)


def test_corpus_files_in_the_wrong_layout_fail_at_plan_time_naming_key_and_path(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "fine"}\n{"text": "cut off\n')
    with pytest.raises(config.ConfigError) as info:
        rm.check_corpora(wrong_layout_config(tmp_path, {"source": "file", "path": str(broken)}))
    assert info.value.key == "corpora.mine.path" and info.value.value == str(broken)
    assert "line 2: not JSON" in info.value.reason

    other_field = tmp_path / "other.jsonl"
    other_field.write_text("".join(json.dumps({"body": f"doc {i}"}) + "\n" for i in range(200)))
    with pytest.raises(config.ConfigError) as info:
        rm.check_corpora(wrong_layout_config(tmp_path, {"source": "file", "path": str(other_field)}))
    assert info.value.key == "corpora.mine.field" and "no field 'text'" in info.value.reason and "body" in \
        info.value.reason

    missing = tmp_path / "nope.jsonl"
    with pytest.raises(config.ConfigError) as info:
        rm.check_corpora(wrong_layout_config(tmp_path, {"source": "file", "path": str(missing)}))
    assert info.value.key == "corpora.mine.path" and str(missing) in info.value.reason


def test_hf_directory_without_the_configured_split_fails_naming_the_dataset(tmp_path, hub_cache):
    build_news_mirrors(hub_cache)
    snap = hub_cache / "datasets--google--wmt24pp" / "snapshots" / COMMITS["google/wmt24pp"]
    spec = copy.deepcopy(yaml.safe_load(SNIPPET.read_text())["corpora"]["news_en"])
    spec.update(dataset=str(snap), split="test")  # the mirror has only `train`
    with pytest.raises(config.ConfigError) as info:
        rm.check_corpora(wrong_layout_config(tmp_path, spec))
    assert info.value.key == "corpora.mine.dataset" and info.value.value == str(snap)
    assert "split 'test'" in info.value.reason
