"""The offline tiny model: a byte-level BPE tokenizer built locally and a random-weight Qwen3 builder.

Nothing here touches the network. The tokenizer is trained deterministically on a small built-in
multilingual corpus (faker names and sentences from many locales plus ASCII, digits and the XML-like
tags environments use). It is byte-level, so any string in any script round-trips byte-exactly
even when its characters were never seen in training. The trained files are cached on disk, so only
the first process on a machine pays the ~1-2 s build; later ones load them in milliseconds.

Heavy imports (torch, transformers, tokenizers, faker) happen inside the functions.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo.errors import UserError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast, Qwen3Config

# Bump when the corpus, trainer settings or template change: the cache dir is keyed on it.
TOKENIZER_VERSION = 4
# Target size including the special tokens: large enough for common multilingual merges,
# small enough that the embedding matrix stays a small part of the tiny model.
VOCAB_SIZE = 2048

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
# Control tokens (skipped by decode(skip_special_tokens=True)); the think tags stay visible in
# decoded text, as in Qwen3, because parsers look for them.
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
THINK_TOKENS = (THINK_OPEN, THINK_CLOSE)

# ChatML as Qwen uses it. Unknown template kwargs (enable_thinking, tools, ...) are simply unused
# variables in Jinja, so callers can pass the same kwargs they pass to a real Qwen tokenizer.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['content'] is string -%}"
    "{%- set content = message['content'] -%}"
    "{%- elif message['content'] is none -%}"
    "{%- set content = '' -%}"
    "{%- else -%}"
    "{%- set content = message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

# Locales covering Latin (with diacritics), Cyrillic, Greek, Arabic, Hebrew, Persian, Devanagari,
# Bengali, Tamil, Thai, Armenian, Georgian, CJK, kana and Hangul.
_CORPUS_LOCALES = (
    "en_US", "de_DE", "fr_FR", "es_ES", "it_IT", "pt_BR", "pl_PL", "tr_TR", "vi_VN", "ru_RU",
    "uk_UA", "el_GR", "ar_AA", "he_IL", "fa_IR", "hi_IN", "bn_BD", "ta_IN", "th_TH", "hy_AM",
    "ka_GE", "ja_JP", "zh_CN", "zh_TW", "ko_KR",
)  # fmt: skip
_CORPUS_ROWS_PER_LOCALE = 120
# Tags and chat words every environment prompt and answer is made of.
_CORPUS_FIXED = (
    "<alphabetical_sorted>", "</alphabetical_sorted>", "<combined_alphabetical_sorted>",
    "</combined_alphabetical_sorted>", "<answer>", "</answer>", "<reasoning>", "</reasoning>",
    "system", "user", "assistant", "You are a helpful assistant.",
    "Sort these names in alphabetical order by FIRST name.",
    "Now sort ALL of these names, the previous ones and the new ones, together.",
    "0123456789", "1 2 3 4 5 6 7 8 9 10 11 12 20 50 100 1000 2024 3.14 -1 +1 1/2 10%",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "    ", "\n\n", "\t", "```python\nprint('hello')\n```",
)  # fmt: skip
# repeated so the tags clear the merge min_frequency and become whole tokens, as in a real tokenizer
_CORPUS_FIXED_REPEATS = 16


def cache_root() -> Path:
    """Where built artifacts live: $GRPO_CACHE_DIR, else $XDG_CACHE_HOME/grpo, else ~/.cache/grpo."""
    if os.environ.get("GRPO_CACHE_DIR"):
        return Path(os.environ["GRPO_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "grpo"


def _corpus() -> Iterator[str]:
    from faker import Faker

    for _ in range(_CORPUS_FIXED_REPEATS):
        yield from _CORPUS_FIXED
    for locale in _CORPUS_LOCALES:
        fake = Faker(locale)
        # seed_instance makes these providers a pure function of (faker version, locale list). Not
        # city(): some locales (it_IT) pick it from a set, so it changes with PYTHONHASHSEED.
        fake.seed_instance(0)
        for _ in range(_CORPUS_ROWS_PER_LOCALE):
            yield f"{fake.name()}, {fake.first_name()} {fake.last_name()}. {fake.sentence()}"


def _byte_alphabet() -> list[str]:
    """The 256 printable stand-ins byte-level BPE uses for bytes 0..255, in byte order.

    Printable Latin-1 bytes stand for themselves; the others are shifted to code points 256+ so
    that every byte has a visible, whitespace-free character (the GPT-2 convention ByteLevel uses).
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    kept = set(keep)
    shifted = iter(range(256, 512))
    return [chr(b) if b in kept else chr(next(shifted)) for b in range(256)]


def _train_bpe_merges(words: Counter[str], num_merges: int, min_frequency: int) -> list[tuple[str, str]]:
    """Greedy BPE merges over byte-level words, ties broken by the pair's text.

    Written here rather than using tokenizers' trainer because that one breaks count ties in hash
    order, so two builds give different merges; this one is a pure function of the corpus.
    """
    symbols = [list(w) for w in words]
    freqs = list(words.values())
    counts: dict[tuple[str, str], int] = {}
    where: dict[tuple[str, str], set[int]] = {}
    for i, syms in enumerate(symbols):
        for pair in zip(syms, syms[1:], strict=False):
            counts[pair] = counts.get(pair, 0) + freqs[i]
            where.setdefault(pair, set()).add(i)
    # Max-heap by (count, pair text) with lazy deletion. Ties pop in pair-text order whatever the
    # push order, so set iteration order below does not matter. An entry whose count went down is
    # re-pushed with the current count when popped; counts that go up are pushed right away.
    heap = [(-c, pair) for pair, c in counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while heap and len(merges) < num_merges:
        neg, pair = heapq.heappop(heap)
        current = counts.get(pair, 0)
        if current != -neg:
            if current > 0:
                heapq.heappush(heap, (-current, pair))
            continue
        if current < min_frequency:
            break
        merges.append(pair)
        first, second = pair
        merged = first + second
        delta: dict[tuple[str, str], int] = {}
        for i in where.pop(pair, ()):
            syms, f = symbols[i], freqs[i]
            out: list[str] = []
            j, n = 0, len(syms)
            # jump between occurrences of `first` with list.index (C speed) instead of walking symbols
            while True:
                try:
                    k = syms.index(first, j)
                except ValueError:
                    out.extend(syms[j:])
                    break
                if k + 1 == n or syms[k + 1] != second:
                    out.extend(syms[j : k + 1])
                    j = k + 1
                    continue
                out.extend(syms[j:k])
                # the pairs around this occurrence change: (prev, first) -> (prev, merged), ...
                if out:
                    prev = out[-1]
                    delta[(prev, first)] = delta.get((prev, first), 0) - f
                    delta[(prev, merged)] = delta.get((prev, merged), 0) + f
                    where.setdefault((prev, merged), set()).add(i)
                if k + 2 < n:
                    nxt = syms[k + 2]
                    delta[(second, nxt)] = delta.get((second, nxt), 0) - f
                    delta[(merged, nxt)] = delta.get((merged, nxt), 0) + f
                    where.setdefault((merged, nxt), set()).add(i)
                out.append(merged)
                j = k + 2
            symbols[i] = out
        del counts[pair]
        for p, d in delta.items():
            c = counts.get(p, 0) + d
            if c > 0:
                counts[p] = c
                if d > 0:
                    heapq.heappush(heap, (-c, p))
            else:
                counts.pop(p, None)
    return merges


def bpe_tokenizer(
    texts: Iterable[str], vocab_size: int, padding_side: str = "left"
) -> PreTrainedTokenizerFast:
    """A byte-level BPE of at most `vocab_size` tokens trained on `texts`, with the special tokens and
    chat template of the built-in tokenizer. Deterministic: the same texts give the same tokenizer
    (merges are a pure function of the word counts)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    # GPT-2 style: split on the regex, map every byte to a printable char, so nothing is ever unknown
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    words: Counter[str] = Counter()
    for text in texts:
        words.update(piece for piece, _ in pre.pre_tokenize_str(text))
    alphabet = _byte_alphabet()
    n_added = len(SPECIAL_TOKENS) + len(THINK_TOKENS)
    merges = _train_bpe_merges(words, vocab_size - n_added - len(alphabet), min_frequency=2)
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # Added after the merges so they sit at the end of the vocab like Qwen's, and never get split.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        padding_side=padding_side,
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
    )


def _build_tokenizer_files(out_dir: Path) -> None:
    """Train the byte-level BPE on the built-in corpus and write HF tokenizer files to out_dir."""
    bpe_tokenizer(_corpus(), VOCAB_SIZE).save_pretrained(str(out_dir))


def tokenizer_cache_key() -> str:
    """Version of the cached files: our corpus/template version plus the libraries that shape them."""
    libs = f"{version('faker')}-{version('tokenizers')}-{version('transformers')}"
    digest = hashlib.sha256(f"{TOKENIZER_VERSION}|{libs}|{CHAT_TEMPLATE}".encode()).hexdigest()[:10]
    return f"v{TOKENIZER_VERSION}-{digest}"


def build_tokenizer_dir(out_dir: str | os.PathLike[str]) -> Path:
    """Build the tokenizer files into out_dir (no cache); returns the dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _build_tokenizer_files(out)
    return out


@functools.lru_cache(maxsize=1)
def tiny_tokenizer_dir() -> Path:
    """The cached tokenizer dir, built once per machine (and checked once per process)."""
    final = cache_root() / f"tiny-tokenizer-{tokenizer_cache_key()}"
    if (final / "tokenizer.json").is_file() and (final / "tokenizer_config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # Build into a private temp dir and rename: concurrent processes (pytest workers, joblib
    # sweeps) never see a half-written dir, and whoever renames second just drops its copy.
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-tokenizer-", dir=final.parent))
    try:
        _build_tokenizer_files(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is readable like any other
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "tokenizer.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def tiny_tokenizer(padding_side: str = "left") -> PreTrainedTokenizerBase:
    """A fresh tokenizer object over the cached files (callers may mutate it freely)."""
    from transformers import PreTrainedTokenizerFast

    if padding_side not in ("left", "right"):
        raise UserError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    return PreTrainedTokenizerFast.from_pretrained(str(tiny_tokenizer_dir()), padding_side=padding_side)


# Sizes that must be positive integers; checked here because a 0 surfaces as a ZeroDivisionError deep
# inside the model constructor.
_POSITIVE_FIELDS = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "max_position_embeddings", "vocab_size",
)  # fmt: skip


def qwen3_config(
    architecture: Mapping[str, Any] | None,
    tokenizer: PreTrainedTokenizerBase,
    dtype: torch.dtype | None = None,
) -> Qwen3Config:
    """Qwen3Config from `model.architecture` fields, with vocab and special ids from the tokenizer.

    If the architecture names a vocab_size (e.g. Qwen3-0.6B's 151936) the embedding is padded to
    it; otherwise it is the tokenizer's length.
    """
    import dataclasses

    from huggingface_hub.errors import StrictDataclassError
    from transformers import Qwen3Config

    arch = dict(architecture or {})
    # rope_theta is the v4 spelling most people know; transformers 5 folds it into rope_parameters
    known = {f.name for f in dataclasses.fields(Qwen3Config)} | {"rope_theta"}
    unknown = sorted(set(arch) - known)
    if unknown:
        raise UserError(
            f"model.architecture has unknown Qwen3Config field(s) {unknown}; "
            f"valid fields include hidden_size, num_hidden_layers, num_attention_heads, ..."
        )
    for reserved in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if reserved in arch:
            raise UserError(f"model.architecture.{reserved} is set from the tokenizer; remove it")
    for name in _POSITIVE_FIELDS:
        value = arch.get(name, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise UserError(f"model.architecture.{name}={value!r} must be a positive integer")
    heads, kv_heads = arch.get("num_attention_heads"), arch.get("num_key_value_heads")
    if heads is not None and kv_heads is not None and heads % kv_heads:
        raise UserError(
            f"model.architecture.num_attention_heads={heads} must be a multiple of num_key_value_heads={kv_heads}"
        )
    n_tokens = len(tokenizer)
    vocab_size = int(arch.pop("vocab_size", n_tokens))
    if vocab_size < n_tokens:
        raise UserError(
            f"model.architecture.vocab_size={vocab_size} is smaller than the tokenizer ({n_tokens} tokens); "
            f"raise it or remove it to use the tokenizer's size"
        )
    try:
        config = Qwen3Config(
            vocab_size=vocab_size,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.bos_token_id,
            **arch,
        )
    except (TypeError, ValueError, StrictDataclassError) as exc:
        # strict-dataclass errors span lines ("Validation error for field 'x':" then the reason)
        detail = " ".join(line.strip() for line in str(exc).strip().splitlines()[:2]) or type(exc).__name__
        raise UserError(f"model.architecture is not a valid Qwen3 config: {detail[:300]}") from exc
    if dtype is not None:
        config.dtype = dtype
    return config


def random_qwen3(
    architecture: Mapping[str, Any] | None,
    tokenizer: PreTrainedTokenizerBase,
    *,
    seed: int = 0,
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
) -> PreTrainedModel:
    """A Qwen3ForCausalLM with random weights: the same (architecture, seed, dtype) gives the same weights."""
    import torch
    from transformers import GenerationConfig, Qwen3ForCausalLM

    dtype = dtype or torch.float32
    config = qwen3_config(architecture, tokenizer, dtype)
    # Initialise in float32 on CPU, then cast and move: the weights are then a function of the seed
    # only, identical whatever the target dtype/device (GPU RNG streams differ from CPU ones).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model = model.to(dtype=dtype)
    if device is not None:
        model = model.to(device)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    return model.eval()
