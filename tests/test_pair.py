"""The project's trained model pair (ADR 0120): deterministic training, complete checkpoints, and a
draft that really predicts its target — checked in torch, independently of any engine."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from specjoule import corpora, pair
from specjoule import tokenizer as tk

REPO = pair.corpora.REPO_ROOT
TARGET = REPO / "config/models/trained-qwen3-target"
DRAFT = REPO / "config/models/trained-qwen3-draft"
TINY = dataclasses.replace(pair.PairRecipe(), target_steps=2, draft_steps=2, warmup_steps=1, batch_size=3, seq_len=16)


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    first = pair.train_pair(TINY, tmp_path / "a/t", tmp_path / "a/d")
    again = pair.train_pair(TINY, tmp_path / "b/t", tmp_path / "b/d")
    other = pair.train_pair(dataclasses.replace(TINY, seed=1), tmp_path / "c/t", tmp_path / "c/d")
    assert (first.target_sha256, first.draft_sha256) == (again.target_sha256, again.draft_sha256)
    # Hashed from the files on disk, not from what training returned.
    assert pair.weights_sha256(tmp_path / "b/d") == first.draft_sha256
    assert first.target_sha256 != other.target_sha256 and first.draft_sha256 != other.draft_sha256
    # Training restores the caller's torch settings.
    import torch

    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("model_dir", [TARGET, DRAFT], ids=["target", "draft"])
def test_committed_checkpoint_is_complete_and_says_how_it_was_made(model_dir):
    from safetensors import safe_open

    cfg = json.loads((model_dir / "config.json").read_text())
    manifest = pair.read_manifest(model_dir)
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["vocab_size"] == tk.SHIPPED_VOCAB_SIZE == tk.ShippedTokenizer().size
    assert manifest["weights_sha256"] == pair.weights_sha256(model_dir)
    with safe_open(str(model_dir / pair.WEIGHTS_FILE), "pt") as fh:
        shapes = {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}
    assert shapes["model.embed_tokens.weight"] == (cfg["vocab_size"], cfg["hidden_size"])
    assert sum(1 for k in shapes if k.endswith("self_attn.q_proj.weight")) == cfg["num_hidden_layers"]
    assert sum(map(_numel, shapes.values())) == manifest["parameters"]  # the tied head is stored once
    # Small enough to travel with the repository (a few MB, ADR 0120).
    assert sum(f.stat().st_size for f in model_dir.iterdir()) < 4 * 1024**2
    # Its tokenizer files are links to the shipped ones, which travel once (ADR 0190), and the file read through
    # them is the one the pair was trained with: a rebuilt shipped tokenizer fails here until the pair is retrained.
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (model_dir / name).is_symlink() and (model_dir / name).resolve() == (tk.DATA_DIR / name).resolve()
    assert manifest["tokenizer"] == f"{tk.SHIPPED_NAME}@{tk.file_sha256(model_dir / 'tokenizer.json')[:12]}"


def _numel(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def test_a_checkpoint_links_the_shipped_tokenizer_inside_the_repository_and_copies_it_outside(tmp_path):
    shipped = {name: (tk.DATA_DIR / name).read_bytes() for name in ("tokenizer.json", "tokenizer_config.json")}
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    pair.place_shipped_tokenizer(outside, repo_root=REPO)
    assert {n: (outside / n).read_bytes() for n in shipped} == shipped
    assert not any((outside / n).is_symlink() for n in shipped)
    # A tree holding both the checkpoint and the shipped files (here all of /) gets relative links; placing them
    # again over the links of the last training neither fails nor writes through them.
    inside = tmp_path / "models" / "pair"
    inside.mkdir(parents=True)
    for _ in range(2):
        pair.place_shipped_tokenizer(inside, repo_root=Path("/"))
    assert all((inside / n).is_symlink() and not os.path.isabs(os.readlink(inside / n)) for n in shipped)
    assert {n: (inside / n).read_bytes() for n in shipped} == shipped
    assert {name: (tk.DATA_DIR / name).read_bytes() for name in shipped} == shipped


def test_draft_is_smaller_than_its_target_and_of_the_same_family():
    t = json.loads((TARGET / "config.json").read_text())
    d = json.loads((DRAFT / "config.json").read_text())
    assert t["model_type"] == d["model_type"] and t["vocab_size"] == d["vocab_size"]
    assert pair.read_manifest(DRAFT)["parameters"] < pair.read_manifest(TARGET)["parameters"]
    assert pair.read_manifest(DRAFT)["teacher_weights_sha256"] == pair.read_manifest(TARGET)["weights_sha256"]


def test_checkpoint_tokenizer_is_the_shipped_one_through_transformers():
    # Prompts for a real model are made with its own files through transformers (ADR 0041): they
    # must give exactly the ids the pair was trained on (a Qwen2 config would make transformers 5
    # substitute Qwen's own pre-tokenizer; Qwen3 keeps the file's).
    own = tk.resolve({"model": str(TARGET)}, REPO)
    shipped = tk.ShippedTokenizer()
    assert isinstance(own, tk.HFTokenizer)
    text = corpora.load_documents("code", {"source": "builtin", "name": "humaneval"}).docs[3]
    assert own.encode(text) == shipped.encode(text)
    msgs = [{"role": "user", "content": "hello"}]
    assert own.encode(own.render_chat(msgs)) == shipped.encode(shipped.render_chat(msgs))


def test_trained_draft_predicts_its_target_on_the_training_corpora():
    """Replayed greedy speculation in float32 torch (no engine): the draft's proposals match the
    target's continuation well beyond chance (1/8192 per token), on every corpus it learned."""
    target, draft = pair.load_checkpoint(TARGET), pair.load_checkpoint(DRAFT)
    for name, spec in {"humaneval": {"source": "builtin", "name": "humaneval"},
                       "chatterbot_en": {"source": "builtin", "name": "chatterbot_en", "chat_template": True}}.items():
        pool = corpora.load_pool({"corpus": name, "corpus_spec": spec, "seed": 0, "pool_size": 32,
                                  "workload": {"prompt_len": 32}, "target": {"model": str(TARGET)}})
        est = pair.greedy_acceptance(target, draft, pool.token_ids[:2], output_len=16, k=3)
        assert est.realized_L > 1.2, (name, est)
        # A later position is reached only through the earlier ones.
        assert est.accepted_per_position == sorted(est.accepted_per_position, reverse=True)
        assert sum(est.accepted_per_position) == est.accepted <= 3 * est.drafts
