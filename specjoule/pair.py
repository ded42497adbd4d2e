"""A small real model pair the project trains itself (ADR 0120).

Every shipped shape-only model has dummy weights, so its drafters accept ~nothing and real acceptance
was never measured here. This module trains a small Qwen3 *target* and a smaller Qwen3 *draft* on the
built-in offline corpora (code, conversation, long documents; ADR 0042), with the shipped tokenizer's
8192 ids (ADR 0041), deterministically on CPU:

1. the three corpora are rendered as the prompt builder renders them (text documents joined by a
   blank line in source order; the conversations as one ChatML message list, as pool prompts stack
   them), so the prompts the pipeline sends are windows of the training distribution;
2. the target is trained on that text (next-token cross entropy);
3. the draft is distilled from the target (KL to the target's next-token distribution on the same
   windows), so that its greedy choice tends to be the target's — what a drafter is for.

Each step's batch takes the corpora in turn, so each gets a third of the windows whatever its size.
The same seed, step counts and thread count give the same weights on one machine (a test checks it);
another CPU or torch version may round differently, which is why the checkpoints are committed
(ADR 0120) and carry the hash of their weights.

Only :func:`train_pair` needs torch and transformers (imported lazily): the rest reads checkpoints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specjoule import corpora
from specjoule import tokenizer as tk

# Built-in corpora the pair learns from, in this order (their text types: code, conversation, long documents).
TRAINING_CORPORA = ("humaneval", "chatterbot_en", "python_reference")
TRAINING_MANIFEST = "specjoule_training.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class Shape:
    """A Qwen3 decoder's size. head_dim 64: a head size every vLLM attention backend supports."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int = 64


@dataclass(frozen=True)
class PairRecipe:
    """Everything that decides the weights (the training manifest stores it)."""

    seed: int = 0
    target: Shape = Shape(
        hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1
    )
    draft: Shape = Shape(
        hidden_size=64, intermediate_size=192, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1
    )
    # 160 + 100 steps of 16 windows of 64 tokens: ~2.7 min wall on 2 shared cores (ADR 0120).
    seq_len: int = 64
    batch_size: int = 16
    target_steps: int = 160
    draft_steps: int = 100
    lr: float = 1e-2
    warmup_steps: int = 10
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    # One thread: kernels never split a reduction differently between runs, and on a shared 2-core
    # machine a second thread mostly spin-waits (2 threads: 8 s a step under load, 1 thread: 1 s).
    threads: int = 1
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    corpora: tuple[str, ...] = TRAINING_CORPORA

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class TrainingResult:
    target_dir: Path
    draft_dir: Path
    target_sha256: str
    draft_sha256: str
    seconds: float
    losses: dict[str, list[float]] = field(default_factory=dict)


# -- the training text ---------------------------------------------------------------------------


def corpus_text(name: str, tokenizer: tk.TextTokenizer) -> str:
    """A built-in corpus rendered as the prompt builder renders it (ADR 0040, 0043)."""
    docs = corpora.load_documents(name, {"source": "builtin", "name": name})
    if docs.conversational:
        # All conversations as one message list, as pool prompts stack earlier ones as history; the
        # trailing assistant turn is kept here (the model should learn replies, not only questions).
        messages: list[dict[str, str]] = []
        for conv in docs.docs:
            messages = corpora._join(messages, corpora._conversation_messages(conv))
        return tokenizer.render_chat(messages, add_generation_prompt=False)
    return corpora.DOC_SEPARATOR.join(d for d in docs.docs if isinstance(d, str))


_ENCODED: dict[tuple[str, str], list[int]] = {}


def training_ids(recipe: PairRecipe, tokenizer: tk.TextTokenizer) -> dict[str, list[int]]:
    """Token ids of each training corpus, in the recipe's order (encoded once per process)."""
    out = {}
    for name in recipe.corpora:
        key = (name, tokenizer.name)
        if key not in _ENCODED:
            _ENCODED[key] = tokenizer.encode(corpus_text(name, tokenizer))
        ids = _ENCODED[key]
        if len(ids) <= recipe.seq_len + 1:
            raise ValueError(f"corpus {name!r} has {len(ids)} tokens, too few for seq_len {recipe.seq_len}")
        out[name] = ids
    return out


def data_hash(streams: dict[str, list[int]]) -> str:
    blob = json.dumps(streams, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


# -- checkpoints ---------------------------------------------------------------------------------


def qwen3_config(shape: Shape, recipe: PairRecipe, vocab_size: int) -> dict[str, Any]:
    """config.json for a Qwen3ForCausalLM of ``shape``, written out in full (both the transformers-4
    ``rope_theta`` and the transformers-5 ``rope_parameters``), so any engine version reads the same
    model and none falls back to a default that differs from training."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": recipe.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "rope_theta": recipe.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": recipe.rope_theta},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": shape.num_hidden_layers,
        "tie_word_embeddings": True,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
    }


def weights_sha256(model_dir: str | Path) -> str:
    """sha256 over the directory's safetensors files (name and bytes, in name order)."""
    digest = hashlib.sha256()
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def _save(model: Any, out: Path, config: dict[str, Any], manifest: dict[str, Any]) -> str:
    """Weights (bfloat16 safetensors; the tied lm_head is not stored twice), config and the shipped
    tokenizer files, so the directory is a complete checkpoint for vLLM and transformers."""
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"
    }
    save_file(dict(sorted(state.items())), str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps(
            {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": False}, indent=1, sort_keys=True
        )
        + "\n"
    )
    place_shipped_tokenizer(out)
    sha = weights_sha256(out)
    (out / TRAINING_MANIFEST).write_text(
        json.dumps({**manifest, "weights_sha256": sha}, indent=1, sort_keys=True) + "\n"
    )
    return sha


def place_shipped_tokenizer(out: Path, repo_root: Path = corpora.REPO_ROOT) -> None:
    """The shipped tokenizer files in checkpoint ``out``: relative links to them where ``out`` lies in the
    repository with them (config/models/trained-qwen3-*), so that one copy travels with each device call and
    the engine reads the same bytes (ADR 0190); copies elsewhere, so that a checkpoint outside stands alone."""
    root = repo_root.resolve()
    for source, name in (
        (tk.SHIPPED_TOKENIZER_PATH, "tokenizer.json"),
        (tk.SHIPPED_TOKENIZER_CONFIG_PATH, "tokenizer_config.json"),
    ):
        dest = out / name
        dest.unlink(missing_ok=True)  # a link left by the last training would make copyfile copy onto itself
        if out.resolve().is_relative_to(root) and source.resolve().is_relative_to(root):
            dest.symlink_to(os.path.relpath(source.resolve(), out.resolve()))
        else:
            shutil.copyfile(source, dest)


# -- training ------------------------------------------------------------------------------------


def _batches(streams: dict[str, list[int]], recipe: PairRecipe, steps: int, salt: int):
    """``steps`` batches of ``batch_size`` windows of ``seq_len + 1`` ids; element i of a batch comes
    from corpus ``i % n_corpora`` at an offset drawn from a generator seeded by (seed, salt)."""
    import torch

    gen = torch.Generator().manual_seed(recipe.seed * 1000 + salt)
    tensors = [torch.tensor(ids, dtype=torch.long) for ids in streams.values()]
    n = len(tensors)
    width = recipe.seq_len + 1
    for _ in range(steps):
        rows = []
        for i in range(recipe.batch_size):
            t = tensors[i % n]
            start = int(torch.randint(0, len(t) - width + 1, (1,), generator=gen))
            rows.append(t[start : start + width])
        yield torch.stack(rows)


def _lr_at(step: int, recipe: PairRecipe, steps: int) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    import math

    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(1, steps - recipe.warmup_steps)
    return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _build(shape: Shape, recipe: PairRecipe, vocab_size: int, init_seed: int) -> tuple[Any, dict[str, Any]]:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = qwen3_config(shape, recipe, vocab_size)
    hf_cfg = Qwen3Config(
        **{
            k: v
            for k, v in cfg.items()
            if k not in ("architectures", "model_type", "torch_dtype", "dtype", "rope_theta")
        }
    )
    torch.manual_seed(init_seed)
    model = Qwen3ForCausalLM(hf_cfg).float()
    return model, cfg


def _optimizer(model: Any, recipe: PairRecipe) -> Any:
    import torch

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    rest = [p for n, p in model.named_parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=recipe.lr,
        betas=(0.9, 0.95),
    )


def _step(model: Any, opt: Any, loss: Any, lr: float, recipe: PairRecipe) -> float:
    import torch

    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
    opt.step()
    return float(loss.detach())


def train_pair(
    recipe: PairRecipe,
    target_dir: str | Path,
    draft_dir: str | Path,
    progress: Callable[[str], None] = lambda msg: None,
) -> TrainingResult:
    """Train the target, distil the draft from it, save both checkpoints; deterministic per recipe."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(recipe.threads)
    torch.use_deterministic_algorithms(True)
    try:
        return _train(recipe, Path(target_dir), Path(draft_dir), progress)
    finally:  # the caller's process keeps its own settings
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def _train(recipe: PairRecipe, target_dir: Path, draft_dir: Path, progress: Callable[[str], None]) -> TrainingResult:
    import torch
    import torch.nn.functional as F

    t0 = time.monotonic()
    tokenizer = tk.ShippedTokenizer()
    vocab = tokenizer.size
    streams = training_ids(recipe, tokenizer)
    progress("training text: " + ", ".join(f"{k} {len(v)} tokens" for k, v in streams.items()))
    losses: dict[str, list[float]] = {"target": [], "draft": []}

    target, target_cfg = _build(recipe.target, recipe, vocab, recipe.seed * 1000 + 1)
    target.train()
    opt = _optimizer(target, recipe)
    for step, batch in enumerate(_batches(streams, recipe, recipe.target_steps, salt=11)):
        logits = target(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
        losses["target"].append(_step(target, opt, loss, _lr_at(step, recipe, recipe.target_steps), recipe))
        if step % 25 == 0 or step == recipe.target_steps - 1:
            progress(f"target step {step}: loss {losses['target'][-1]:.3f} ({time.monotonic() - t0:.0f} s)")
    target.eval()

    draft, draft_cfg = _build(recipe.draft, recipe, vocab, recipe.seed * 1000 + 2)
    draft.train()
    opt = _optimizer(draft, recipe)
    for step, batch in enumerate(_batches(streams, recipe, recipe.draft_steps, salt=22)):
        with torch.no_grad():
            teacher = F.log_softmax(target(input_ids=batch[:, :-1]).logits, dim=-1)
        student = F.log_softmax(draft(input_ids=batch[:, :-1]).logits, dim=-1)
        loss = F.kl_div(student.reshape(-1, vocab), teacher.reshape(-1, vocab), log_target=True, reduction="batchmean")
        losses["draft"].append(_step(draft, opt, loss, _lr_at(step, recipe, recipe.draft_steps), recipe))
        if step % 25 == 0 or step == recipe.draft_steps - 1:
            progress(f"draft step {step}: KL {losses['draft'][-1]:.3f} ({time.monotonic() - t0:.0f} s)")
    draft.eval()

    seconds = time.monotonic() - t0
    common = {
        "recipe": recipe.as_dict(),
        "training_data_sha256": data_hash(streams),
        "training_tokens": {k: len(v) for k, v in streams.items()},
        "corpus_sources": {
            name: corpora.load_documents(name, {"source": "builtin", "name": name}).source for name in recipe.corpora
        },
        "tokenizer": tokenizer.name,
        "torch_version": torch.__version__,
        "built_by": "scripts/train_pair.py",
        "training_seconds": round(seconds, 1),
    }
    target_sha = _save(
        target,
        Path(target_dir),
        target_cfg,
        {
            **common,
            "role": "target",
            "parameters": sum(p.numel() for p in target.parameters()),
            "final_loss": losses["target"][-1],
        },
    )
    draft_sha = _save(
        draft,
        Path(draft_dir),
        draft_cfg,
        {
            **common,
            "role": "draft",
            "parameters": sum(p.numel() for p in draft.parameters()),
            "final_kl": losses["draft"][-1],
            "teacher_weights_sha256": target_sha,
        },
    )
    return TrainingResult(Path(target_dir), Path(draft_dir), target_sha, draft_sha, seconds, losses)


def read_manifest(model_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(model_dir) / TRAINING_MANIFEST).read_text())


# -- an independent estimate of acceptance ------------------------------------------------------


@dataclass(frozen=True)
class AcceptanceEstimate:
    """Greedy draft-model speculation replayed in torch (no engine): what vLLM's counters should show."""

    drafts: int
    accepted: int
    accepted_per_position: list[int]

    @property
    def realized_L(self) -> float:
        return 1.0 + self.accepted / self.drafts if self.drafts else float("nan")


def greedy_acceptance(target: Any, draft: Any, prompts: list[list[int]], output_len: int, k: int) -> AcceptanceEstimate:
    """Replay greedy speculation: the target's greedy continuation is fixed (greedy speculative decoding
    commits exactly it); each round the draft proposes ``k`` greedy tokens from the committed text and
    the longest prefix equal to the continuation is accepted, then one target token is committed.
    Rounds stop proposing past ``output_len`` (as an engine caps drafts at max_tokens)."""
    import torch

    drafts = accepted = 0
    per_pos = [0] * k
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt], dtype=torch.long)
            out = target.generate(
                ids,
                max_new_tokens=output_len,
                min_new_tokens=output_len,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=None,
            )
            cont = out[0, len(prompt) :].tolist()
            p = 0
            while p < output_len - 1:
                room = min(k, output_len - 1 - p)
                ctx = list(prompt) + cont[:p]
                a = 0
                for j in range(room):
                    nxt = int(draft(input_ids=torch.tensor([ctx]), logits_to_keep=1).logits[0, -1].argmax())
                    if nxt != cont[p + j]:
                        break
                    a += 1
                    ctx.append(nxt)
                drafts += 1
                accepted += a
                for j in range(a):
                    per_pos[j] += 1
                p += a + 1
    return AcceptanceEstimate(drafts, accepted, per_pos)


def load_checkpoint(model_dir: str | Path) -> Any:
    """A saved checkpoint as a float32 transformers model in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
