"""One short vLLM run on the device machine, right after the bundle is installed (ADR 0060).

    source /tmp/site/specjoule-env.sh && python3 tools/device/smoke_vllm.py [--out $OUT] [--device cpu]

Offline ``LLM`` with the repository's shape-only Qwen2 pair (config/models/tiny-target, tiny-draft; dummy weights,
token-id prompts), ``draft_model`` speculation with k=3 and, on a GPU, synthetic acceptance rates
(0.8, 0.5, 0.2: configured L = 2.5) with CUDA graphs on: the combination ARCHITECTURE.md records as verified on
an H200, now from the bundle's real wheels. Prints the engine start time, the spec-decode counters from
``LLM.get_metrics()`` and the realized acceptance length, and exits 1 when they are inconsistent (no drafts, or
realized L off the configured one by more than 0.25). ``--device cpu`` runs it without synthetic acceptance (vLLM
asserts on CPU sampling), for a check on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RATES = [0.8, 0.5, 0.2]


def counters(metrics) -> dict[str, float]:
    """Sum the ``vllm:spec_decode_*`` and token counters of ``LLM.get_metrics()`` (per-position as a list)."""
    out: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for m in metrics:
        name = m.name[5:] if m.name.startswith("vllm:") else m.name
        if isinstance(getattr(m, "values", None), list):  # Vector
            if name == "spec_decode_num_accepted_tokens_per_pos":
                for i, v in enumerate(m.values):
                    per_pos[i] = per_pos.get(i, 0.0) + float(v)
            continue
        if hasattr(m, "value") and isinstance(m.value, (int, float)):
            out[name] = out.get(name, 0.0) + float(m.value)
    out["accepted_per_pos"] = [per_pos[i] for i in sorted(per_pos)]  # type: ignore[assignment]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--output-len", type=int, default=128)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams

    t_import = time.perf_counter() - t0
    spec_cfg: dict = {
        "method": "draft_model",
        "model": str(REPO / "config" / "models" / "tiny-draft"),
        "num_speculative_tokens": len(RATES),
    }
    synthetic = args.device == "cuda"
    if synthetic:
        spec_cfg.update(rejection_sample_method="synthetic", synthetic_acceptance_rates=RATES)
    kwargs: dict = dict(
        model=str(REPO / "config" / "models" / "tiny-target"),
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="bfloat16",
        seed=0,
        max_model_len=1024,
        max_num_seqs=args.batch,
        enable_prefix_caching=False,
        disable_log_stats=False,
        speculative_config=spec_cfg,
    )
    if args.device == "cuda":
        kwargs["gpu_memory_utilization"] = 0.3
    else:
        kwargs.update(enforce_eager=True, gpu_memory_utilization=0.1)

    t1 = time.perf_counter()
    llm = LLM(**kwargs)
    t_init = time.perf_counter() - t1
    before = counters(llm.get_metrics())
    prompts = [{"prompt_token_ids": [(7 * i + j) % 8000 + 10 for j in range(32)]} for i in range(args.batch)]
    params = SamplingParams(max_tokens=args.output_len, ignore_eos=True, temperature=1.0, seed=0, detokenize=False)
    t2 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    t_gen = time.perf_counter() - t2
    after = counters(llm.get_metrics())

    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after if k != "accepted_per_pos"}
    drafts = d.get("spec_decode_num_drafts", 0.0)
    accepted = d.get("spec_decode_num_accepted_tokens", 0.0)
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    realized = 1.0 + accepted / drafts if drafts else float("nan")
    configured = 1.0 + sum(RATES)
    result = {
        "device": args.device,
        "synthetic": synthetic,
        "import_s": round(t_import, 1),
        "engine_init_s": round(t_init, 1),
        "generate_s": round(t_gen, 2),
        "generated_tokens": generated,
        "drafts": drafts,
        "draft_tokens": d.get("spec_decode_num_draft_tokens"),
        "accepted_tokens": accepted,
        "accepted_per_pos": after.get("accepted_per_pos"),
        "realized_L": realized,
        "configured_L": configured if synthetic else None,
    }
    print("smoke_vllm:", json.dumps(result))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "smoke-vllm.json").write_text(json.dumps(result, indent=1))
    problems = []
    if generated != args.batch * args.output_len:
        problems.append(f"generated {generated} tokens, expected {args.batch * args.output_len}")
    if not drafts:
        problems.append("no drafts counted: speculation did not run or get_metrics() lacks spec_decode counters")
    elif synthetic and abs(realized - configured) > 0.25:
        problems.append(f"realized L {realized:.3f} vs configured {configured:.3f}")
    if problems:
        print("SMOKE: FAILED: " + "; ".join(problems))
        return 1
    print(
        f"SMOKE: OK: engine up in {t_init:.0f} s, {generated} tokens in {t_gen:.1f} s, realized L {realized:.3f}"
        + (f" (configured {configured:.2f})" if synthetic else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
