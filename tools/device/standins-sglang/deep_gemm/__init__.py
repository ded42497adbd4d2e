"""STAND-IN for DeepGEMM, used only on the H200 validation node (ADR 0016).

SGLang 0.5.17 imports ``deep_gemm`` unconditionally while capturing the draft model's CUDA graphs
(speculative/eagle_worker_v2.py → layers/attention/dsa_backend.py, for DeepSeek sparse attention, which a
Qwen2 pair never uses); the wheel set that runs on the H200 image has no DeepGEMM. With this empty module on
the engine's path and ``SGLANG_ENABLE_JIT_DEEPGEMM=0`` (so that sglang's own deep_gemm_wrapper does not
treat it as the real library), the import succeeds and nothing of it is ever called. A call into it fails.
"""


def __getattr__(name: str):
    raise AttributeError(f"deep_gemm stand-in (specjoule ADR 0016): {name} is not available")
