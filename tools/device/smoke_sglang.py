"""SGLang 0.5.17 through specjoule's own adapter on the GPU machine; captures the raw fixtures the
CPU tests parse (tests/data/sglang/, ADR 0016).

    export SPECJOULE_SGLANG_PYTHONPATH=/tmp/sglang-site      # the SGLang site dir (transformers 5.12.1 …)
    python3 tools/device/smoke_sglang.py --out $OUT/sglang

Stages (each guarded: a failure is written to summary.json with its traceback, and later stages still run;
summary.json is rewritten after every stage, so a run cut short keeps what it had):
1. probe    — ``python -m specjoule.engines.sglang probe`` in the engine environment → probe.json
2. offline  — ``SglangOfflineEngine``: qwen2.5-3b target + qwen2.5-0.5b draft (dummy weights, bf16), STANDALONE
              k=5, SGLANG_SIMULATE_ACC_LEN=3 (minvar 3 → rates [1, 1, 0, 0, 0]), B=4, 128 in / 64 out, CUDA
              graphs on → offline_meta_info.json (raw per-request meta_info), offline_delta.json (counter
              delta and realized L), offline_info.json (engine.info(): versions, engine_config); then one
              more batch of 65 output tokens → offline_meta_info_65.json: 64 decode tokens = 21 steps of 3
              + a 22nd step cut to 1 token, so the scheduler's accepted count (44) and the committed view
              (42) must differ by 2 (ADR 0016)
3. server   — ``SglangServerEngine`` (launch_server), same STANDALONE arm → server_metrics_before.txt /
              server_metrics_after.txt (raw /metrics around one batch of 4), server_delta.json,
              server_info.json (raw /server_info), server_generate.json (one raw non-streamed /generate
              body), server_generate_stream.txt (one raw streamed body), server_info_adapter.json
Exit 0 when every stage passed and realized L is 3 within 0.05 in both; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from specjoule.engines import sglang as sg  # noqa: E402
from specjoule.engines.base import CounterDelta  # noqa: E402

K, L, B, PROMPT_LEN, OUTPUT_LEN = 5, 3.0, 4, 128, 64


def cell_spec(synthetic: bool = True, kind: str = "closed_batch") -> dict:
    """A cell spec as cells.build makes it (only the keys the adapter reads)."""
    return {
        "engine": "sglang",
        "target": {
            "model": "config/models/qwen2.5-3b",
            "load_format": "dummy",
            "dtype": "bfloat16",
            "tensor_parallel_size": 1,
            "tokenizer": None,
        },
        "draft": {
            "model": "config/models/qwen2.5-0.5b",
            "load_format": "dummy",
            "dtype": "bfloat16",
            "tensor_parallel_size": 1,
            "tokenizer": None,
        },
        "max_model_len": 2048,
        "batch_size": B,
        "seed": 0,
        "cuda_graphs": True,
        "device": "cuda",
        "workload": {"kind": kind, "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN},
        "prefix_caching": False,
        "engine_options": {
            "mem_fraction_static": 0.8,
            "attention_backend": "fa3",
            "sampling_backend": "pytorch",
            # 0.5.17 captures 58 prefill graph sizes up to 8192 tokens by default: >150 s at start
            "disable_prefill_cuda_graph": True,
            # the deep_gemm stand-in must not pass for the real library (validation/h200-2026-12/config/h200-sglang.yaml)
            "env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"},
        },
        "protocol": {"idle_s": 0, "engine_ready_timeout_s": 300},
        "scheme": {
            "method": "draft_model",
            "k": K,
            "synthetic": synthetic,
            "name": "standalone_k5",
            "drafter": None,
            "options": {},
        },
        "acceptance_rates": [1.0, 1.0, 0.0, 0.0, 0.0] if synthetic else None,  # minvar 3.0, k=5
    }


def delta_json(d: CounterDelta) -> dict:
    drafts = d.counters.get("spec_decode_num_drafts") or 0
    acc = d.counters.get("spec_decode_num_accepted_tokens") or 0
    return {
        "counters": d.counters,
        "finished": d.finished,
        "accepted_per_pos": d.accepted_per_pos,
        "seconds": d.seconds,
        "columns": d.columns(True),
        "realized_L": (1.0 + acc / drafts) if drafts else None,
    }


def _exit_on_sigterm() -> None:
    """`timeout` sends SIGTERM: unwind through the finally blocks so that the engine is stopped
    (a first H200 run left an SGLang engine holding 90 GiB after `timeout` killed this script)."""
    import signal

    def handler(signum, frame):  # noqa: ANN001
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    _exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--skip-server", action="store_true")
    args = ap.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "stages": {}}
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 30000) for _ in range(PROMPT_LEN)] for _ in range(B)]

    def save(name: str, obj) -> None:
        p = out / name
        if isinstance(obj, (bytes, str)):
            p.write_bytes(obj if isinstance(obj, bytes) else obj.encode())
        else:
            p.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))

    def stage(name: str, fn) -> None:
        t0 = time.monotonic()
        entry: dict = {}
        summary["stages"][name] = entry
        try:
            entry.update(fn() or {})
            entry["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - one failing stage must not lose the others' files
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
            print(f"[{name}] FAILED: {type(exc).__name__}: {exc}", flush=True)
        entry["seconds"] = round(time.monotonic() - t0, 2)
        save("summary.json", summary)
        print(f"[{name}] {'ok' if entry['ok'] else 'failed'} in {entry['seconds']} s", flush=True)

    def probe_stage() -> dict:
        info = sg._probe_subprocess(sg.engine_env(cell_spec()), timeout_s=180)
        save("probe.json", info)
        return {
            k: info.get(k)
            for k in (
                "engine_version",
                "torch_version",
                "cuda_version",
                "spec_algorithms",
                "simulate_methods",
                "simulate_acc_len",
                "probe_error",
            )
        }

    def offline_stage() -> dict:
        spec = cell_spec()
        eng = sg.SglangOfflineEngine(spec, out / "offline.log", ready_timeout_s=150)
        res: dict = {"engine_kwargs": eng.kwargs}
        try:
            res["start_s"] = eng.start()
            save("offline_info.json", eng.info())
            before = eng.snapshot()
            batch = eng.generate_batch(prompts, OUTPUT_LEN, timeout_s=120)
            after = eng.snapshot()
            save("offline_meta_info.json", eng.last_metas)
            d = delta_json(after.minus(before))
            save("offline_delta.json", d)
            eng.generate_batch(prompts, OUTPUT_LEN + 1, timeout_s=120)
            save("offline_meta_info_65.json", eng.last_metas)
            res.update(
                batch_s=batch.ended_monotonic - batch.started_monotonic,
                realized_L=d["realized_L"],
                requests_ok=sum(r.ok for r in batch.requests),
                ttft_s=[r.ttft_s for r in batch.requests],
                tpot_s=[r.tpot_s for r in batch.requests],
            )
            if d["realized_L"] is None or abs(d["realized_L"] - L) > 0.05:
                raise AssertionError(f"offline realized L {d['realized_L']} != configured {L}")
        finally:
            eng.stop()
        return res

    def server_stage() -> dict:
        spec = cell_spec()
        eng = sg.SglangServerEngine(spec, out / "server.log", ready_timeout_s=150)
        res: dict = {}
        try:
            res["start_s"] = eng.start()
            res["command"] = eng.proc.args if eng.proc is not None else None
            save("server_info_adapter.json", eng.info())
            save("server_info.json", eng.server_info_raw())
            text0 = eng.metrics_text()
            save("server_metrics_before.txt", text0)
            batch = eng.generate_batch(prompts, OUTPUT_LEN, timeout_s=120)
            time.sleep(1.0)  # counters move at request finish; let the last one land
            text1 = eng.metrics_text()
            save("server_metrics_after.txt", text1)
            res.update(
                batch_s=batch.ended_monotonic - batch.started_monotonic,
                requests_ok=sum(r.ok for r in batch.requests),
                client_truncation_tally=eng._truncated,
                ttft_s=[r.ttft_s for r in batch.requests],
                tpot_s=[r.tpot_s for r in batch.requests],
            )
            # raw bodies before any parsing: a parser problem must not cost the fixtures
            save("server_generate.json", eng.generate_raw(prompts[0], OUTPUT_LEN, stream=False))
            save("server_generate_stream.txt", eng.generate_raw(prompts[1], 8, stream=True))
            d = delta_json(
                sg.snapshot_from_prometheus(text1, K, res["client_truncation_tally"]).minus(
                    sg.snapshot_from_prometheus(text0, K)
                )
            )
            save("server_delta.json", d)
            res["realized_L"] = d["realized_L"]
            if d["realized_L"] is None or abs(d["realized_L"] - L) > 0.05:
                raise AssertionError(f"server realized L {d['realized_L']} != configured {L}")
        finally:
            eng.stop()
        return res

    stage("probe", probe_stage)
    stage("offline", offline_stage)
    if not args.skip_server:
        stage("server", server_stage)
    ok = all(s.get("ok") for s in summary["stages"].values())
    summary["ok"] = ok
    save("summary.json", summary)
    print(
        "SMOKE-SGLANG:",
        "OK" if ok else "FAILED",
        json.dumps(
            {n: {k: v for k, v in s.items() if k != "traceback"} for n, s in summary["stages"].items()}, default=str
        ),
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
