"""grpo.models: the offline tokenizer, the random Qwen3 builder, the one loading path, LoRA config."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.config import ModelConfig
from grpo.errors import UserError
from grpo.models import (
    load_policy,
    load_tokenizer,
    lora_config,
    render_chat,
    resolve_dtype,
    save_pretrained_tiny,
)
from grpo.models.tiny import (
    IM_END,
    IM_START,
    PAD_TOKEN,
    THINK_CLOSE,
    THINK_OPEN,
    _train_bpe_merges,
    qwen3_config,
    tiny_tokenizer,
    tiny_tokenizer_dir,
)

MULTILINGUAL = [
    "Hello, world! Sort: Alice, Bob.",
    "Grüße aus Köln — ça va? ¿Qué tal? Łódź, Ærøskøbing, İstanbul",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε",
    "你好，世界。排序：李明、王芳、张伟",
    "こんにちは世界 カタカナ ひらがな",
    "안녕하세요 세계",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם",
    "नमस्ते दुनिया, क्षत्रिय",
    "স্বাগতম বিশ্ব",
    "สวัสดีชาวโลก",
    "Բարեւ աշխարհ ქართული",
    "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ✨",
    "rare CJK 𠀀𪚥 and math 𝔸𝔹 ∑∫√ and combining e\u0301 a\u0308",
    "tabs\tand\nnewlines\r\n  double  spaces   ",
    "\x00\x01\x7f control bytes \ufeff BOM \u200b zwsp",
    "<alphabetical_sorted>\nAlice\nBob\n</alphabetical_sorted>",
    "",
]


def model_cfg(*overrides: str) -> ModelConfig:
    return load_settings(overrides).model


def rule_error(*overrides: str) -> str:
    """The one-line error the config rules give for `overrides` (grpo.cli.checks)."""
    with pytest.raises(UserError) as exc:
        check(load_settings(["+env=alphabet_sort", *overrides]))
    return _one_line(exc)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def tiny_policy():
    return load_policy(model_cfg())


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory) -> Path:
    return save_pretrained_tiny(model_cfg(), tmp_path_factory.mktemp("tiny") / "model")


# ---------------------------------------------------------------- tokenizer


@pytest.mark.parametrize("text", MULTILINGUAL)
def test_tokenizer_round_trips_every_script_byte_exactly(tok, text):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.decode(ids).encode("utf-8") == text.encode("utf-8")


def test_tokenizer_round_trips_random_unicode(tok):
    rng = random.Random(0)
    # random code points across the BMP and astral planes, surrogates excluded (not encodable)
    for _ in range(200):
        chars = []
        for _ in range(rng.randint(1, 40)):
            cp = rng.choice([rng.randint(0, 0x7F), rng.randint(0x80, 0xD7FF), rng.randint(0xE000, 0x10FFFF)])
            chars.append(chr(cp))
        text = "".join(chars)
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_common_text_compresses(tok):
    # a trained BPE, not a byte fallback: names and tags take far fewer tokens than bytes
    text = "<alphabetical_sorted>\nMaria Schmidt\nИван Петров\n</alphabetical_sorted>"
    n_ids = len(tok(text, add_special_tokens=False)["input_ids"])
    assert n_ids < len(text.encode("utf-8")) / 2


def test_special_tokens_are_single_ids_at_the_end_of_the_vocab(tok):
    ids = {
        t: tok(t, add_special_tokens=False)["input_ids"]
        for t in (PAD_TOKEN, IM_START, IM_END, THINK_OPEN, THINK_CLOSE)
    }
    assert all(len(v) == 1 for v in ids.values()), ids
    assert len({v[0] for v in ids.values()}) == 5
    assert sorted(v[0] for v in ids.values()) == list(range(len(tok) - 5, len(tok)))
    assert tok.pad_token == PAD_TOKEN and tok.pad_token_id == ids[PAD_TOKEN][0]
    assert tok.eos_token == IM_END and tok.eos_token_id == ids[IM_END][0]
    # inside running text too, never split
    inline = tok(f"a{THINK_OPEN}b{IM_END}", add_special_tokens=False)["input_ids"]
    assert ids[THINK_OPEN][0] in inline and ids[IM_END][0] in inline
    # control tokens vanish with skip_special_tokens, the think tags stay (parsers need them)
    text = f"{IM_START}assistant\n{THINK_OPEN}hm{THINK_CLOSE}ok{IM_END}{PAD_TOKEN}"
    assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == "assistant\n<think>hm</think>ok"


def test_tokenizer_adds_no_bos_or_eos_and_pads_on_the_left(tok):
    assert tok("abc")["input_ids"] == tok("abc", add_special_tokens=False)["input_ids"]
    assert tok.padding_side == "left"
    batch = tok(["a", "a much longer text"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, 0].item() == tok.pad_token_id
    assert batch["attention_mask"][0, 0].item() == 0 and batch["attention_mask"][0, -1].item() == 1
    right = tiny_tokenizer("right")
    assert right.padding_side == "right" and tok.padding_side == "left"
    assert right(["a", "a much longer text"], padding=True)["input_ids"][0][-1] == tok.pad_token_id


def test_chat_template_renders_chatml(tok):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Sort: Émile, Ærø"},
        {"role": "assistant", "content": "<think>x</think>Ærø, Émile"},
    ]
    expected = (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nSort: Émile, Ærø<|im_end|>\n"
        "<|im_start|>assistant\n<think>x</think>Ærø, Émile<|im_end|>\n"
    )
    assert tok.apply_chat_template(messages, tokenize=False) == expected
    prompt = tok.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\nSort: Émile, Ærø<|im_end|>\n<|im_start|>assistant\n")
    # Qwen-style kwargs are accepted (and do not change the tiny template)
    assert tok.apply_chat_template(messages, tokenize=False, enable_thinking=False, tools=None) == expected
    # list-of-parts content (OpenAI style) renders its text parts
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert tok.apply_chat_template(parts, tokenize=False) == "<|im_start|>user\nab<|im_end|>\n"


def test_render_chat_applies_config_kwargs(tok):
    cfg = model_cfg("model=qwen3_0_6b").chat_template_kwargs
    assert cfg == {"enable_thinking": False}
    assert model_cfg().chat_template_kwargs == {}
    messages = [{"role": "user", "content": "hi"}]
    assert render_chat(tok, messages, cfg) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert render_chat(tok, messages, cfg, add_generation_prompt=False) == "<|im_start|>user\nhi<|im_end|>\n"


@pytest.mark.slow
def test_tokenizer_build_is_deterministic(tmp_path):
    # a fresh build in another process with a fixed hash seed, against the cached copy this process
    # uses (built here or by an earlier process): byte-identical files
    cached = tiny_tokenizer_dir()
    code = "import sys; from grpo.models.tiny import build_tokenizer_dir; build_tokenizer_dir(sys.argv[1])"
    env = {**os.environ, "PYTHONHASHSEED": "1"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=True, capture_output=True)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "tokenizer.json" in names and names == sorted(p.name for p in cached.iterdir())
    for name in names:
        assert (tmp_path / name).read_bytes() == (cached / name).read_bytes(), name


def _naive_bpe(words: Counter[str], num_merges: int, min_frequency: int) -> list[tuple[str, str]]:
    """Reference: recount every pair after every merge; highest count wins, ties by pair text."""
    ws = {tuple(w): c for w, c in words.items()}
    merges: list[tuple[str, str]] = []
    while len(merges) < num_merges:
        counts: Counter[tuple[str, str]] = Counter()
        for w, c in ws.items():
            for pair in zip(w, w[1:], strict=False):
                counts[pair] += c
        if not counts:
            break
        pair, count = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if count < min_frequency:
            break
        merges.append(pair)
        merged: dict[tuple[str, ...], int] = {}
        for w, c in ws.items():
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == pair:
                    out.append(w[j] + w[j + 1])
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        ws = merged
    return merges


def test_incremental_bpe_matches_naive_recount():
    rng = random.Random(0)
    for _ in range(100):
        # tiny alphabets force overlapping pairs (aaa, abab) and many count ties
        words = Counter("".join(rng.choice("aabc") for _ in range(rng.randint(1, 12))) for _ in range(40))
        assert _train_bpe_merges(words, 40, 1) == _naive_bpe(words, 40, 1)
    words = Counter(
        "Ġ" + rng.choice(["Anna", "Annika", "Hans", "Hanna", "Иван", "Ивана", "李明"]) for _ in range(300)
    )
    assert _train_bpe_merges(words, 30, 2) == _naive_bpe(words, 30, 2)


# ---------------------------------------------------------------- random tiny model


def test_tiny_model_forward_and_generate(tiny_policy):
    model, tok = tiny_policy
    assert model.config.vocab_size == len(tok)
    assert model.config.eos_token_id == tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id
    assert model.dtype == torch.float32 and not model.training
    prompts = [
        render_chat(tok, [{"role": "user", "content": "Sort: Bob, Alice"}], {}),
        render_chat(tok, [{"role": "user", "content": "排序：王芳、李明、张伟、赵六、陈七"}], {}),
    ]
    batch = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (2, batch["input_ids"].shape[1], len(tok))
    assert torch.isfinite(logits).all()
    torch.manual_seed(0)
    out = model.generate(**batch, max_new_tokens=12, do_sample=True)
    assert out.shape[0] == 2 and 1 <= out.shape[1] - batch["input_ids"].shape[1] <= 12
    assert all(isinstance(tok.decode(row), str) for row in out)


def test_random_weights_depend_on_the_seed_only():
    cfg = model_cfg("seed=3")
    a, _ = load_policy(cfg)
    b, _ = load_policy(cfg)
    c, _ = load_policy(model_cfg("seed=4"))
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    # bf16 is the float32 init cast down, not a different draw
    d, _ = load_policy(model_cfg("seed=3", "model.dtype=bf16"))
    assert d.dtype == torch.bfloat16 and torch.equal(d.model.embed_tokens.weight, wa.to(torch.bfloat16))
    # the global RNG is left as it was
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    load_policy(cfg)
    assert torch.equal(torch.rand(1), expected)


def test_saved_tiny_model_loads_back_through_pretrained_with_identical_logits(tiny_policy, saved_tiny):
    model, tok = tiny_policy
    assert (saved_tiny / "config.json").is_file() and (saved_tiny / "tokenizer.json").is_file()
    cfg = model_cfg("model=qwen3_0_6b", f"model.path={saved_tiny}", "model.dtype=float32")
    loaded, loaded_tok = load_policy(cfg)
    messages = [{"role": "user", "content": "Ordnen: Zoë, Ärger, 李明 😀"}]
    text = render_chat(tok, messages, cfg.chat_template_kwargs)
    assert render_chat(loaded_tok, messages, cfg.chat_template_kwargs) == text
    assert loaded_tok(text)["input_ids"] == tok(text)["input_ids"]
    assert loaded_tok.padding_side == "left" and loaded_tok.eos_token_id == tok.eos_token_id
    batch = tok([text], return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, loaded(**batch).logits)
    assert loaded.generation_config.eos_token_id == tok.eos_token_id


def test_random_source_with_explicit_tokenizer_dir(saved_tiny):
    cfg = model_cfg(f"model.tokenizer={saved_tiny}")
    model, tok = load_policy(cfg)
    assert tok.name_or_path == str(saved_tiny) and model.config.vocab_size == len(tok)


def test_qwen3_0_6b_random_has_the_exact_architecture(tok):
    cfg = model_cfg("model=qwen3_0_6b_random")
    assert cfg.source == "random" and resolve_dtype(cfg) == torch.bfloat16
    config = qwen3_config(cfg.architecture, tok, resolve_dtype(cfg))
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (1024, 28, 16)
    assert (config.num_key_value_heads, config.head_dim, config.intermediate_size) == (8, 128, 3072)
    assert config.vocab_size == 151936 and config.max_position_embeddings == 40960
    assert config.rope_parameters["rope_theta"] == 1_000_000.0 and config.rms_norm_eps == 1e-6
    assert config.tie_word_embeddings is True and config.sliding_window is None
    assert config.hidden_act == "silu" and config.attention_bias is False
    assert config.eos_token_id == tok.eos_token_id and config.pad_token_id == tok.pad_token_id
    from transformers import Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    # Qwen/Qwen3-0.6B's published parameter count (tied embeddings)
    assert sum(p.numel() for p in model.parameters()) == 596_049_920


# ---------------------------------------------------------------- errors


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_bad_dtype_is_a_user_error():
    message = rule_error("model.dtype=float8")
    assert "model.dtype='float8'" in message and "bfloat16" in message


def test_missing_local_path_is_a_user_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(UserError) as exc:
        load_policy(model_cfg("model=qwen3_0_6b", f"model.path={missing}"))
    assert f"model.path='{missing}' does not exist" in _one_line(exc)
    with pytest.raises(UserError) as exc:
        load_policy(model_cfg("model=qwen3_0_6b", f"model.path={tmp_path}"))
    assert "written by save_pretrained" in _one_line(exc)


def test_dir_with_tokenizer_but_no_weights_is_a_user_error(tmp_path):
    tiny_tokenizer().save_pretrained(str(tmp_path))
    with pytest.raises(UserError) as exc:
        load_policy(model_cfg("model=qwen3_0_6b", f"model.path={tmp_path}"))
    assert f"model.path='{tmp_path}' is a folder with no config.json" in _one_line(exc)


def test_unreachable_hub_id_is_a_user_error():
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    with pytest.raises(UserError) as exc:
        load_policy(model_cfg("model=qwen3_0_6b", "model.path=Qwen/Qwen3-0.6B-not-cached"))
    assert _one_line(exc) == (
        "model.path 'Qwen/Qwen3-0.6B-not-cached' could not be loaded: no local copy and the hub is unreachable "
        "(HF_HUB_OFFLINE / no network); download it on a machine with network or set model.path to a local dir"
    )
    with pytest.raises(UserError) as exc:
        load_tokenizer(model_cfg("model.tokenizer=someorg/some-tokenizer"))
    assert _one_line(exc).startswith(
        "model.tokenizer 'someorg/some-tokenizer' could not be loaded: no local copy"
    )


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["+model.architecture.hidden_sizee=8"], "unknown Qwen3Config field(s) ['hidden_sizee']"),
        (["+model.architecture.vocab_size=100"], "model.architecture.vocab_size=100 is smaller"),
        (["+model.architecture.eos_token_id=1"], "model.architecture.eos_token_id is set from the tokenizer"),
        (["model.architecture.num_attention_heads=0"], "model.architecture.num_attention_heads=0 must be"),
        (["model.architecture.num_key_value_heads=3"], "must be a multiple of num_key_value_heads=3"),
        (["+model.architecture.rope_parameters=5"], "model.architecture is not a valid Qwen3 config"),
    ],
)
def test_bad_model_config_is_a_user_error(overrides, needle):
    with pytest.raises(UserError) as exc:
        load_policy(model_cfg(*overrides))
    assert needle in _one_line(exc)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["model.source=hub"], "model.source='hub'"),
        (["model=qwen3_0_6b", "model.path=null"], "model.path is required"),
        (["model.path=/data/qwen"], "model.path='/data/qwen' does not exist"),
    ],
)
def test_bad_model_source_is_a_rule_error(overrides, needle):
    assert needle in rule_error(*overrides)


def test_a_model_path_with_random_weights_is_a_rule_error(tmp_path):
    # a folder that could load: still refused, random weights would silently ignore it
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    assert f"model.path={tmp_path} is not used with model.source=random" in rule_error(
        f"model.path={tmp_path}"
    )


# ---------------------------------------------------------------- LoRA and import weight


def test_lora_config_from_model_lora(tiny_policy):
    assert lora_config(model_cfg().lora) is None
    cfg = model_cfg(
        "model.lora.enabled=true",
        "model.lora.r=4",
        "model.lora.alpha=8",
        "model.lora.target_modules=[q_proj,v_proj]",
    )
    lc = lora_config(cfg.lora)
    assert (lc.r, lc.lora_alpha, lc.lora_dropout) == (4, 8, 0.05)
    assert set(lc.target_modules) == {"q_proj", "v_proj"} and lc.task_type == "CAUSAL_LM"
    # the default target modules exist in the Qwen3 model
    from peft import get_peft_model

    fresh, _ = load_policy(model_cfg())
    peft_model = get_peft_model(fresh, lora_config(model_cfg("model.lora.enabled=true").lora))
    trainable = {
        n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in peft_model.named_parameters() if p.requires_grad
    }
    assert trainable == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("model.lora.r=0", "model.lora.r=0"),
        ("model.lora.dropout=1.5", "model.lora.dropout=1.5"),
        ("model.lora.target_modules=[]", "model.lora.target_modules"),
    ],
)
def test_bad_lora_is_a_user_error(override, needle):
    assert needle in rule_error("model.lora.enabled=true", override)


def test_importing_grpo_models_is_light():
    code = "import sys, grpo.models; print(sorted(m for m in ('torch', 'transformers', 'peft', 'faker') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_tokenizer_cache_loads_fast():
    # the on-disk cache is hit: a second load is a file read, not a BPE training run
    import time

    tiny_tokenizer_dir()
    start = time.perf_counter()
    tiny_tokenizer()
    assert time.perf_counter() - start < 0.5


def test_the_shipped_warm_start_loads_offline_and_sorts_names(tmp_path):
    """model=small_alphabet_sort (grpo/assets, scripts/build_warm_start.py) resolves to the package's
    own copy from any working directory, loads as float32 and, unlike model=small's random weights,
    writes sorted lists (the SFT model of the See it learn recipe scores ~0.5)."""
    from grpo.envs import build_env
    from grpo.evaluation.evaluator import evaluate
    from grpo.evaluation.setup import EvalSetup
    from grpo.files import ASSETS_DIR
    from grpo.generation import make_backend

    settings = load_settings(
        [
            "+experiment=alphabet_sort_cpu",
            "tracking=none",
            "env.num_train_examples=16",
            "env.num_eval_examples=37",
            "eval.num_examples=12",
            "eval.rollouts_per_example=1",
        ]
    )
    check(settings)
    assert Path(settings.model.path) == ASSETS_DIR / "small_alphabet_sort_sft"
    assert settings.stages == ["eval", "train", "eval"]
    full = load_settings(["+experiment=alphabet_sort_cpu_full"])
    assert full.model.name == "small" and full.stages == ["sft", "eval", "train", "eval"]
    model, tokenizer = load_policy(settings.model)
    assert next(model.parameters()).dtype == torch.float32
    env = build_env(settings.env, settings.language)
    backend = make_backend(settings.generation, model, tokenizer, settings.model)
    result = evaluate(EvalSetup.of(settings), env, backend, tmp_path / "eval", label="warm")
    assert result.mean > 0.25


def test_the_multilingual_base_copies_names_in_every_language_it_claims():
    """model=small_multilingual (grpo/assets, scripts/build_multilingual_base.py) loads offline from
    the package, its sft_meta.json records what docs/models.md says it measured (160 held-out lists
    per language, at least the build's floor of 0.8 of the names copied exactly in every language),
    and on lists of
    another seed it copies in every one of the eleven languages (the English warm start it was built
    from copies few names in other scripts)."""
    import importlib.util
    import json

    from grpo.files import ASSETS_DIR

    spec = importlib.util.spec_from_file_location(
        "build_multilingual_base",
        Path(__file__).resolve().parents[1] / "scripts" / "build_multilingual_base.py",
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    settings = load_settings(["+experiment=alphabet_sort_multilingual", "tracking=none"])
    assert settings.model.name == "small_multilingual"
    assert Path(settings.model.path) == ASSETS_DIR / "small_multilingual"
    meta = json.loads((ASSETS_DIR / "small_multilingual" / "sft_meta.json").read_text())
    assert set(meta["copy_accuracy"]) == set(build.LANGUAGES) and len(build.LANGUAGES) == 11
    assert meta["heldout_lists_per_language"] >= 160
    assert all(v["names"] >= 0.8 for v in meta["copy_accuracy"].values())
    model, tokenizer = load_policy(settings.model)
    assert next(model.parameters()).dtype == torch.float32
    # 24 lists per language (~70 names; measured 2026-12-06: lowest language 0.81, mean 0.94; 48 lists:
    # 0.81 and 0.93, at twice the time)
    rows = build.heldout(build.list_env(), "copy", seed=7, per_language=24)
    accuracy = build.list_accuracy(model, tokenizer, settings, rows)
    assert set(accuracy) == set(build.LANGUAGES)
    low = {code: v["names"] for code, v in accuracy.items() if v["names"] < 0.75}
    assert not low, f"names copied exactly under 0.75 in {low}"
    assert sum(v["names"] for v in accuracy.values()) / len(accuracy) >= 0.85
