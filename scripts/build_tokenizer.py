"""Build the tokenizer the project ships for shape-only models (ADR 0041).

A byte-level BPE with exactly 8192 ids (the tiny demo models' vocab), trained with the
``tokenizers`` library on the built-in corpora, in a fixed order, single-threaded. The same
package versions give the same file byte for byte; ``--check`` verifies the committed one.

    python scripts/build_tokenizer.py            # rewrite specjoule/data/tokenizer.json
    python scripts/build_tokenizer.py --check    # exit 1 if a rebuild differs from the committed file
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# Single-threaded training: tokenizers' parallel word counting is meant to be order-independent,
# but one thread removes the question (ADR 0041). Must be set before tokenizers is imported.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from specjoule import corpora  # noqa: E402
from specjoule import tokenizer as tk  # noqa: E402

# The built-in corpora the BPE learns from, in this order. Changing this list changes every
# pool's token ids, and so every content hash: do it only with a new ADR.
TRAINING_CORPORA = ("humaneval", "chatterbot_en")


def training_texts() -> list[str]:
    texts: list[str] = []
    for name in TRAINING_CORPORA:
        docs = corpora.load_documents(name, {"source": "builtin", "name": name})
        for d in docs.docs:
            if isinstance(d, str):
                texts.append(d)
            else:
                texts.extend(t if isinstance(t, str) else t["content"] for t in d)
    return texts


def build() -> str:
    """The tokenizer as a JSON string (what goes into specjoule/data/tokenizer.json)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=tk.SHIPPED_VOCAB_SIZE,
        min_frequency=1,
        special_tokens=list(tk.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_texts(), trainer=trainer)
    size = tok.get_vocab_size(with_added_tokens=True)
    if size != tk.SHIPPED_VOCAB_SIZE:
        raise SystemExit(f"trained vocab has {size} ids, want {tk.SHIPPED_VOCAB_SIZE}: the training text is too small")
    for i, s in enumerate(tk.SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    # Re-serialize with sorted keys so the file does not depend on map iteration order.
    return json.dumps(json.loads(tok.to_str()), ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"


def tokenizer_config() -> str:
    """A transformers-style config beside tokenizer.json: the chat template, special tokens, so
    `AutoTokenizer.from_pretrained("specjoule/data")` works too."""
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1 << 20,
        "pad_token": "<pad>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "add_bos_token": False,
        "chat_template": tk.CHATML_TEMPLATE,
        "specjoule": {
            "vocab_size": tk.SHIPPED_VOCAB_SIZE,
            "training_corpora": list(TRAINING_CORPORA),
            "built_by": "scripts/build_tokenizer.py",
        },
    }
    return json.dumps(cfg, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare a rebuild with the committed files")
    ap.add_argument("--out", type=Path, default=tk.DATA_DIR)
    args = ap.parse_args(argv)
    outputs = {"tokenizer.json": build(), "tokenizer_config.json": tokenizer_config()}
    if args.check:
        bad = [
            n
            for n, text in outputs.items()
            if not (args.out / n).is_file() or (args.out / n).read_text(encoding="utf-8") != text
        ]
        if bad:
            print(f"rebuild differs from committed: {', '.join(bad)}", file=sys.stderr)
            return 1
        print("tokenizer rebuild matches the committed files")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in outputs.items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.out / name} ({len(text.encode())} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
