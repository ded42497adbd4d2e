"""Does each drafting scheme start, draft and count on the GPU, through specjoule's own adapters? (issue 16, ADR 0075)

    python3 tools/device/smoke_schemes.py --engine vllm --out $OUT/schemes-vllm \\
        config/models/qwen3-8b:eagle3:config/models/qwen3-8b-eagle3 \\
        config/models/mimo-7b:mtp \\
        config/models/qwen3-8b:dflash:config/models/qwen3-8b-dflash \\
        config/models/qwen3-8b:dspark:config/models/qwen3-8b-dspark \\
        config/models/qwen3-8b:ngram

Each positional argument is ``TARGET:METHOD[:DRAFTER][:k=K]`` (k defaults to 3 for chains and n-gram, to the
drafter's trained block for block drafters). Per scheme a tiny config (B=2, 64 prompt / 64 output tokens, dummy
weights, bf16, CUDA graphs on, synthetic acceptance at L = 1 and L = k + 1) is validated by specjoule.config and
expanded by specjoule.cells, and its cells run through ``specjoule.engines.make_engine``: vLLM starts once and
swaps the second L in place (ADR 0039); SGLang reads its simulated length at start, so it starts once per L
(``--one-L`` keeps only L = k + 1). Written to ``--out``, per scheme ``<n>-<method>/``: ``engine_info.json``
(versions, the effective engine_config), ``L<L>.json`` (the adapter's counter snapshots before/after, their delta
columns, realized L, measured verify width, per-request results; SGLang: the raw meta_info too), and
``summary.json`` after every scheme (a failure is recorded with its message and traceback, and the next scheme
runs). Exit 0 when every scheme ran with realized L within 0.05 of the configured one at both ends.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from specjoule import cells, schemes  # noqa: E402
from specjoule import config as cfgmod  # noqa: E402

B, PROMPT_LEN, OUTPUT_LEN, DEFAULT_K = 2, 64, 64, 3
L_TOLERANCE = 0.05
ENGINE_OPTIONS = {
    "vllm": {"gpu_memory_utilization": 0.85},
    # as validation/h200-2026-12/config/h200-sglang.yaml (ADR 0016)
    "sglang": {
        "mem_fraction_static": 0.85,
        "attention_backend": "fa3",
        "sampling_backend": "pytorch",
        "disable_prefill_cuda_graph": True,
        "env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"},
    },
}


@dataclasses.dataclass(frozen=True)
class Arm:
    target: str
    method: str
    drafter: str | None
    k: int

    @property
    def label(self) -> str:
        return f"{Path(self.target).name}-{self.method}"


def parse_arm(text: str) -> Arm:
    """``TARGET:METHOD[:DRAFTER][:k=K]`` → an Arm; k from the drafter's block for block drafters."""
    parts = text.split(":")
    if len(parts) < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TARGET:METHOD[:DRAFTER][:k=K]")
    k = None
    if parts[-1].startswith("k="):
        k = int(parts.pop()[2:])
    target, method, *rest = parts
    if method not in schemes.METHODS or method == "baseline":
        raise argparse.ArgumentTypeError(
            f"{text!r}: method {method!r} is not a speculative scheme "
            f"({', '.join(m for m in schemes.METHODS if m != 'baseline')})"
        )
    if len(rest) > 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TARGET:METHOD[:DRAFTER][:k=K]")
    drafter = rest[0] if rest else None
    desc = schemes.get(method)
    if desc.needs_drafter and not drafter:
        raise argparse.ArgumentTypeError(f"{text!r}: {method} needs a drafter dir (TARGET:{method}:DRAFTER)")
    if k is None and desc.is_block:
        drafter_cfg = schemes.read_model_config(drafter)
        k = schemes.block_k(method, drafter_cfg) if drafter_cfg is not None else None
        if k is None:
            raise argparse.ArgumentTypeError(f"{text!r}: cannot read the block of {drafter}; give :k=K")
    return Arm(target, method, drafter, int(k if k is not None else DEFAULT_K))


def acceptance_lengths(arm: Arm, one_L: bool) -> list[float]:
    top = float(schemes.max_acceptance_length(arm.method, arm.k))
    return [top] if one_L else [1.0, top]


def arm_config(arm: Arm, engine: str, one_L: bool = False, cuda_graphs: bool = True) -> dict:
    """The tiny validated config of one arm (ConfigError when the arm cannot be configured)."""
    scheme: dict[str, Any] = {"method": arm.method, "k": arm.k, "synthetic": True}
    if arm.drafter:
        scheme["drafter"] = arm.drafter
    Ls = acceptance_lengths(arm, one_L)
    raw = {
        "name": "smokeschemes",
        "device": "cuda",
        "engines": [engine],
        "models": {
            "m": {"target": {"model": arm.target, "load_format": "dummy", "dtype": "bfloat16"}, "max_model_len": 1024}
        },
        "schemes": {"base": {"method": "baseline"}, "s": {**scheme, "acceptance": [f"L{i}" for i in range(len(Ls))]}},
        "acceptance": {f"L{i}": {"minvar": L} for i, L in enumerate(Ls)},
        "batch_sizes": [B],
        "seeds": [0],
        "cuda_graphs": [cuda_graphs],
        "paper_grade": False,
        "workloads": {"w": {"kind": "closed_batch", "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN}},
        "engine_options": {engine: ENGINE_OPTIONS[engine]},
        "meter": "none",
        "protocol": {"idle_s": 0, "engine_ready_timeout_s": 600},
    }
    return cfgmod.validate(raw)


def arm_cells(arm: Arm, engine: str, one_L: bool = False, cuda_graphs: bool = True) -> list:
    """The arm's point cells (one per L), in L order."""
    table = cells.build(arm_config(arm, engine, one_L, cuda_graphs))
    points = [c for c in table.cells if c.scheme == "s"]
    return sorted(points, key=lambda c: c.configured_L)


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def measure(eng, prompts: list[list[int]], cell) -> dict:
    """One batch on a started engine: snapshots around it, delta, realized L and verify width."""
    before = eng.snapshot()
    t0 = time.monotonic()
    batch = eng.generate_batch(prompts, OUTPUT_LEN, timeout_s=300)
    gen_s = time.monotonic() - t0
    time.sleep(0.5)  # counters move at request finish
    after = eng.snapshot()
    delta = after.minus(before)
    c = delta.counters
    drafts, draft_tokens = c.get("spec_decode_num_drafts") or 0, c.get("spec_decode_num_draft_tokens") or 0
    accepted = c.get("spec_decode_num_accepted_tokens") or 0
    out = {
        "configured_L": cell.configured_L,
        "rates": list(cell.acceptance_rates or ()),
        "generate_s": round(gen_s, 3),
        "snapshot_before": _jsonable(before),
        "snapshot_after": _jsonable(after),
        "delta_counters": c,
        "delta_accepted_per_pos": delta.accepted_per_pos,
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "realized_L": (1.0 + accepted / drafts) if drafts else None,
        "verify_width_measured": (1.0 + draft_tokens / drafts) if drafts else None,
        "verify_width_scheme": schemes.verify_width(cell.method, cell.k),
        "draft_passes_per_round": schemes.draft_passes_per_round(cell.method, cell.k),
        "requests": _jsonable(batch.requests),
        "requests_ok": sum(r.ok for r in batch.requests),
    }
    if hasattr(eng, "last_metas"):
        out["meta_info"] = eng.last_metas  # SGLang's raw per-request counters
    return out


def run_arm(arm: Arm, engine: str, out: Path, one_L: bool, prompts: list[list[int]], cuda_graphs: bool = True) -> dict:
    from specjoule.engines import make_engine

    arm_cells_ = arm_cells(arm, engine, one_L, cuda_graphs)
    res: dict = {
        "target": arm.target,
        "method": arm.method,
        "drafter": arm.drafter,
        "k": arm.k,
        "engine_name": (
            schemes.get(arm.method).vllm_method if engine == "vllm" else schemes.get(arm.method).sglang_algorithm
        ),
        "runs": [],
    }
    # vLLM: one engine, the second L swapped in place; SGLang: one engine per L (read at start).
    groups = [arm_cells_] if engine == "vllm" else [[c] for c in arm_cells_]
    for group in groups:
        eng = make_engine(group[0].spec, out / f"engine-L{group[0].configured_L:g}.log")
        res.setdefault("engine_kwargs", getattr(eng, "kwargs", None))
        try:
            res["runs"].append({"start_s": round(eng.start(), 1)})
            (out / "engine_info.json").write_text(json.dumps(eng.info(), indent=1, sort_keys=True, default=str))
            res["engine_config"] = eng.info().get("engine_config")
            for i, cell in enumerate(group):
                if i:
                    eng.set_synthetic_rates(list(cell.acceptance_rates))
                m = measure(eng, prompts, cell)
                (out / f"L{cell.configured_L:g}.json").write_text(json.dumps(m, indent=1, sort_keys=True, default=str))
                res["runs"].append(
                    {
                        k: m[k]
                        for k in (
                            "configured_L",
                            "realized_L",
                            "verify_width_measured",
                            "verify_width_scheme",
                            "drafts",
                            "requests_ok",
                            "generate_s",
                        )
                    }
                )
        finally:
            eng.stop()
    bad = [
        r
        for r in res["runs"]
        if "configured_L" in r and (r["realized_L"] is None or abs(r["realized_L"] - r["configured_L"]) > L_TOLERANCE)
    ]
    if bad:
        raise AssertionError(f"realized L off the configured one: {bad}")
    return res


def _exit_on_sigterm() -> None:
    """``timeout`` sends SIGTERM: unwind through the finally blocks so that the engine is stopped."""
    import signal

    def handler(signum, frame):  # noqa: ANN001
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=["vllm", "sglang"], required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--one-L", dest="one_L", action="store_true", help="only L = k + 1 (SGLang: one start per scheme)")
    ap.add_argument(
        "--no-cuda-graphs",
        dest="cuda_graphs",
        action="store_false",
        help="start without CUDA graphs (a faster start; the smoke then says nothing about capture)",
    )
    ap.add_argument("arms", nargs="+", type=parse_arm, metavar="TARGET:METHOD[:DRAFTER][:k=K]")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    _exit_on_sigterm()
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 30000) for _ in range(PROMPT_LEN)] for _ in range(B)]
    summary: dict = {
        "engine": args.engine,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "schemes": {},
    }
    for i, arm in enumerate(args.arms):
        name = f"{i}-{arm.label}"
        d = args.out / name
        d.mkdir(exist_ok=True)
        t0 = time.monotonic()
        entry: dict = {}
        try:
            entry.update(run_arm(arm, args.engine, d, args.one_L, prompts, args.cuda_graphs))
            entry["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - one scheme failing must not cost the others
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
            print(f"[{name}] FAILED: {type(exc).__name__}: {exc}", flush=True)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                summary["schemes"][name] = entry
                break
        finally:
            entry["seconds"] = round(time.monotonic() - t0, 1)
            summary["schemes"][name] = entry
            (args.out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str))
        print(
            f"[{name}] {'ok' if entry['ok'] else 'failed'} in {entry['seconds']} s: "
            f"{json.dumps(entry.get('runs'), default=str)}",
            flush=True,
        )
    summary["ok"] = all(e.get("ok") for e in summary["schemes"].values()) and len(summary["schemes"]) == len(args.arms)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str))
    print(
        "SMOKE-SCHEMES:",
        "OK" if summary["ok"] else "FAILED",
        json.dumps({n: e.get("error") or "ok" for n, e in summary["schemes"].items()}),
    )
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
