"""The transformers release the vLLM bundle ships (ADR 0183): gemma-4 must be readable the way vLLM 0.26.0 reads it.

The lock is checked as written (its pins and the reasons make_bundle gave); the attribute path is run on the
installed transformers in-process (tools/check_transformers.replica_arch), and through vLLM 0.26.0's own sources
with the lock's transformers wherever both wheels are in .bundle/cache (a `make bundle` leaves them there).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tools import bundle as B
from tools import check_transformers as C

REPO = Path(__file__).resolve().parents[2]
GEMMA = REPO / "config" / "models" / "gemma-4-26b-a4b"
QWEN = REPO / "config" / "models" / "qwen3-8b"


def _lock_lines() -> dict[str, str]:
    return {ln.split("==", 1)[0]: ln for ln in C.LOCK.read_text().splitlines() if ln and not ln.startswith("#")}


def test_lock_ships_the_profile_override_of_transformers():
    override = B.load_profiles(REPO / "bundle" / "profiles.toml")["vllm"].override["transformers"]
    pinned = C.lock_version("transformers")
    assert Requirement(override).specifier.contains(pinned)
    assert str(Requirement(override).specifier) == f"=={pinned}"  # exact: the version measured, nothing else


def test_lock_version_is_the_newest_measured_to_work_and_the_image_one_raises():
    pinned = C.lock_version("transformers")
    assert C.MEASURED_GEMMA4[pinned] == "works"
    image = B.parse_installed((REPO / "bundle" / "gpu-image-packages.txt").read_text())["transformers"]
    assert image is not None and C.MEASURED_GEMMA4.get(image) == "raises"  # why it is shipped at all
    newer = [v for v, verdict in C.MEASURED_GEMMA4.items() if Version(v) > Version(pinned)]
    assert newer and all(C.MEASURED_GEMMA4[v] == "raises" for v in newer)
    assert Version(pinned) >= Version("5.5.3")  # vLLM 0.26.0 declares transformers>=5.5.3


def test_lock_ships_a_tokenizers_the_pinned_transformers_accepts():
    lines = _lock_lines()
    tok = lines["tokenizers"]
    version = tok.split("==", 1)[1].split()[0]
    spec = re.search(r"transformers needs ([^;\s]+)", tok)
    assert spec, f"tokenizers is shipped for another reason: {tok}"
    assert Requirement(f"tokenizers{spec.group(1)}").specifier.contains(version)
    image = B.parse_installed((REPO / "bundle" / "gpu-image-packages.txt").read_text())["tokenizers"]
    assert image is not None and not Requirement(f"tokenizers{spec.group(1)}").specifier.contains(image)


def _gemma_json() -> dict:
    return json.loads((GEMMA / "config.json").read_text())


def test_replica_path_with_the_installed_transformers():
    """Whatever transformers this environment has: gemma-4 either raises the H200's error (when its config object
    holds head_dim per layer) or gives vLLM's head size, the larger of the two published head widths."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(GEMMA)
    per_layer = getattr(cfg, "per_layer_attributes", None) or set()
    published = _gemma_json()
    if "head_dim" in per_layer:
        with pytest.raises(Exception) as e:
            C.replica_arch(cfg)
        assert type(e.value).__name__ == "AmbiguousGlobalPerLayerAttributeError"
    else:
        got = C.replica_arch(cfg)
        assert got["head_size"] == max(published["head_dim"], published["global_head_dim"])
        assert got["total_num_kv_heads"] == published["num_key_value_heads"]
    qwen = json.loads((QWEN / "config.json").read_text())
    got = C.replica_arch(AutoConfig.from_pretrained(QWEN))
    assert (got["head_size"], got["total_num_kv_heads"]) == (qwen["head_dim"], qwen["num_key_value_heads"])


def _cached(name: str, spec: str) -> Path | None:
    return C._find(REPO / ".bundle" / "cache", name, spec)


def test_lock_transformers_through_vllm_0_26_0_own_code(tmp_path):
    pinned = C.lock_version("transformers")
    vllm_wheel = C.default_vllm_wheel()
    if vllm_wheel is None or _cached("transformers", f"=={pinned}") is None:
        pytest.skip(f"needs vllm-0.26.0 and transformers=={pinned} wheels in .bundle/cache (make bundle fetches them)")
    try:
        rows = C.probe(
            pinned,
            [GEMMA, QWEN],
            wheels=REPO / ".bundle" / "cache",
            scratch=tmp_path,
            vllm_wheel=vllm_wheel,
            offline=True,
        )
    except FileNotFoundError as exc:  # a companion (tokenizers, huggingface-hub) this interpreter lacks
        pytest.skip(str(exc))
    by = {Path(r["dir"]).name: r for r in rows}
    assert all(r["mode"] == "vllm" and r["transformers"] == pinned for r in rows)
    published = _gemma_json()
    assert by["gemma-4-26b-a4b"]["ok"], by["gemma-4-26b-a4b"]
    assert by["gemma-4-26b-a4b"]["arch"]["head_size"] == max(published["head_dim"], published["global_head_dim"])
    assert by["gemma-4-26b-a4b"]["arch"]["total_num_hidden_layers"] == published["num_hidden_layers"]
    assert by["qwen3-8b"]["ok"]
