"""The reward model's backbone: building it for training, saving and loading a trained one.

A reward model is an AutoModelForSequenceClassification that returns one scalar per sequence:
- source=random: a Qwen3ForSequenceClassification with random weights built from
  `backbone.architecture`, with a byte-level BPE trained on the training pairs' text (names and tags
  become whole tokens; `tokenizer_vocab_size`) or the built-in offline tokenizer (the CPU default);
- source=pretrained: `backbone.path`, a hub id or local dir (a multilingual encoder such as
  xlm-roberta, a causal LM such as Qwen3 that gets a new score head, or an existing seq-cls RM).

Language conditioning (reward_model.conditioning):
- tag_token: one added special token <lang:xx> per training language, put at both ends of every
  sequence (the embedding is learned: effectively a language embedding). The closing tag is the
  token a decoder's score is read from, so the score is computed by a language-specific query over
  the whole conversation (a tag in front only reaches the score through attention, and a tiny model
  then learns "this text looks foreign" instead of "this text does not match its tag");
- per_language_heads: the backbone's head has one output per language and the row's language
  picks it (LanguageHeadsRewardModel). TRL's RewardTrainer wants a model that returns one score
  (config.num_labels == 1): the wrapper does, so TRL trains it unchanged.

A trained RM dir holds the standard HF files (config.json, weights, tokenizer) of the inner
sequence-classification model, so `AutoModelForSequenceClassification.from_pretrained(dir)` loads
it anywhere, plus rm_meta.json (languages, conditioning, max length; written LAST, so a dir
without it is incomplete) and rm_calibration.json (per-language score statistics).

Heavy imports (torch, transformers) happen inside the functions and in `_heads_classes`.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo.config import RewardModelBackboneConfig
from grpo.errors import UserError
from grpo.files import write_json_atomic
from grpo.reward_model import check_checkpoint_dir
from grpo.reward_model.data import PreferencePair, pair_texts
from grpo.run.layout import RM_CALIBRATION_FILE, RM_META_FILE

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from grpo.reward_model.calibration import Calibration

META_VERSION = 1
FIELD = "reward_model.backbone"
# a random backbone trains its own tokenizer from this many training pairs on. Below it, most names
# would be tokens seen once or twice, which the model cannot learn: on 480 en+sv pairs the built-in
# tokenizer ranked 1.0 / 0.97 of held-out pairs right, a pair-trained one 0.68 / 0.83
MIN_PAIRS_FOR_OWN_TOKENIZER = 1000


def lang_tag(code: str) -> str:
    """The language tag token the RM sees in front of a sequence."""
    return f"<lang:{code}>"


@dataclass
class RMMeta:
    """What a trained RM dir needs besides the HF files (rm_meta.json)."""

    # training languages, in head order for per_language_heads
    languages: list[str]
    tag_token: bool
    per_language_heads: bool
    # tokens of prompt + completion the RM reads (longer ones lose their middle)
    max_length: int
    # the tag closes the sequence too (RMs trained before this was added have it in front only)
    tag_at_end: bool = False
    # where the backbone came from: {name, source, path}
    backbone: dict[str, Any] = field(default_factory=dict)
    # extra kwargs of apply_chat_template (none for the tiny backbone)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    version: int = META_VERSION

    def save(self, out_dir: Path) -> Path:
        return write_json_atomic(out_dir / RM_META_FILE, asdict(self))

    @classmethod
    def load(cls, out_dir: Path) -> RMMeta:
        data = json.loads((out_dir / RM_META_FILE).read_text(encoding="utf-8"))
        if int(data.get("version", 0)) > META_VERSION:
            raise UserError(
                f"{out_dir}/{RM_META_FILE} was written by a newer grpo (format {data['version']}); upgrade grpo"
            )
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


# ---- the per-language heads wrapper (classes built on first use: transformers is heavy) ----------


@functools.cache
def _heads_classes() -> tuple[type, type]:
    import torch
    from transformers import PreTrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import SequenceClassifierOutput

    class LanguageHeadsConfig(PreTrainedConfig):
        model_type = "grpo_language_heads"

        def __init__(self, languages: Sequence[str] = (), **kwargs: Any) -> None:
            self.languages = list(languages)
            kwargs["num_labels"] = 1  # one reward per sequence, whatever the number of heads
            super().__init__(**kwargs)

    class LanguageHeadsRewardModel(PreTrainedModel):
        """A sequence-classification model with one output per language; the output of each
        row's language (`language_ids`) is its reward. Trained by TRL's RewardTrainer as is."""

        config_class = LanguageHeadsConfig
        base_model_prefix = "backbone"
        _supports_sdpa = True

        def __init__(self, config: Any, backbone: Any) -> None:
            super().__init__(config)
            self.backbone = backbone
            self.post_init()

        def get_input_embeddings(self) -> Any:
            return self.backbone.get_input_embeddings()

        def forward(
            self,
            input_ids: torch.Tensor | None = None,
            attention_mask: torch.Tensor | None = None,
            language_ids: torch.Tensor | None = None,
            **kwargs: Any,
        ) -> Any:
            if language_ids is None:
                raise ValueError("per-language heads need `language_ids` (one per sequence)")
            logits = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
            picked = logits.gather(1, language_ids.to(logits.device).long().view(-1, 1))
            return SequenceClassifierOutput(logits=picked)

    return LanguageHeadsConfig, LanguageHeadsRewardModel


def wrap_language_heads(backbone: PreTrainedModel, languages: Sequence[str]) -> PreTrainedModel:
    config_cls, model_cls = _heads_classes()
    config = config_cls(languages=languages, pad_token_id=backbone.config.pad_token_id)
    return model_cls(config, backbone)


def inner_model(model: Any) -> Any:
    """The sequence-classification model inside a per-language heads wrapper (or the model)."""
    _, model_cls = _heads_classes()
    return model.backbone if isinstance(model, model_cls) else model


# ---- building a backbone to train -------------------------------------------------------------


def build_backbone(
    backbone_cfg: RewardModelBackboneConfig,
    languages: Sequence[str],
    tag_token: bool,
    per_language_heads: bool,
    train_pairs: Sequence[PreferencePair] = (),
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) ready for RewardTrainer: the model returns one score per sequence.
    `train_pairs`: what a random backbone's own tokenizer is trained on (`trains_tokenizer`)."""
    import torch

    from grpo.models.loading import load_tokenizer, resolve_dtype

    num_labels = len(languages) if per_language_heads else 1
    _check_paths(backbone_cfg)  # errors name reward_model.backbone.*, not model.*
    if trains_tokenizer(backbone_cfg, len(train_pairs)):
        from grpo.models.tiny import bpe_tokenizer

        texts = pair_texts(train_pairs)
        tokenizer = bpe_tokenizer(texts, backbone_cfg.tokenizer_vocab_size, padding_side="right")
    else:
        tokenizer = load_tokenizer(backbone_cfg, padding_side="right")
    if tokenizer.pad_token is None:
        raise UserError(f"{FIELD}: the tokenizer has neither a pad nor an eos token; set {FIELD}.tokenizer")
    added = add_language_tags(tokenizer, languages) if tag_token else 0
    dtype = resolve_dtype(backbone_cfg)
    seed = backbone_cfg.seed
    if backbone_cfg.source == "random":
        from transformers import Qwen3ForSequenceClassification

        from grpo.models.tiny import qwen3_config

        config = qwen3_config(backbone_cfg.architecture, tokenizer)
        config.num_labels = num_labels
        config.pad_token_id = tokenizer.pad_token_id
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Qwen3ForSequenceClassification(config)
        model = model.to(dtype=torch.float32 if dtype == "auto" else dtype)
    else:
        model = _load_pretrained(backbone_cfg, num_labels, dtype, seed)
        # the tag tokens need rows; a padded embedding (Qwen's 151936 rows) may already have them
        if added and len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tokenizer))
        model.config.pad_token_id = tokenizer.pad_token_id
    if per_language_heads:
        model = wrap_language_heads(model, languages)
    return model, tokenizer


def trains_tokenizer(backbone_cfg: RewardModelBackboneConfig, num_pairs: int) -> bool:
    """Whether the backbone's tokenizer is trained on its training pairs: a random backbone without a
    given tokenizer, with enough pairs (MIN_PAIRS_FOR_OWN_TOKENIZER). A from-scratch model gains
    nothing from another corpus's vocabulary, and names as whole tokens make sequences ~2x shorter."""
    return (
        backbone_cfg.source == "random"
        and not backbone_cfg.tokenizer
        and backbone_cfg.tokenizer_vocab_size > 0
        and num_pairs >= MIN_PAIRS_FOR_OWN_TOKENIZER
    )


def _check_paths(backbone_cfg: RewardModelBackboneConfig) -> None:
    from grpo.models.loading import MODEL_FILES, TOKENIZER_FILES, checked_source

    if backbone_cfg.source == "pretrained":
        checked_source(f"{FIELD}.path", str(backbone_cfg.path), MODEL_FILES, "model")
    if backbone_cfg.tokenizer:
        checked_source(f"{FIELD}.tokenizer", backbone_cfg.tokenizer, TOKENIZER_FILES, "tokenizer")


def add_language_tags(tokenizer: PreTrainedTokenizerBase, languages: Sequence[str]) -> int:
    """Add <lang:xx> as single special tokens (never split, never merged with text)."""
    from tokenizers import AddedToken

    tags = [lang_tag(code) for code in languages]
    return tokenizer.add_tokens(
        [AddedToken(t, special=True, normalized=False) for t in tags], special_tokens=True
    )


def _load_pretrained(
    backbone_cfg: RewardModelBackboneConfig, num_labels: int, dtype: Any, seed: int
) -> PreTrainedModel:
    import torch
    from transformers import AutoModelForSequenceClassification

    from grpo.models.loading import MODEL_FILES, _load_error, checked_source, load_errors

    path = str(backbone_cfg.path)
    target = checked_source(f"{FIELD}.path", path, MODEL_FILES, "model")
    try:
        # the new score head is random: seed it so the same config gives the same start
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForSequenceClassification.from_pretrained(
                target,
                num_labels=num_labels,
                # a classification checkpoint with another number of outputs (an existing RM when
                # heads are per language, a 2-label classifier) gets a new head of the right size
                ignore_mismatched_sizes=True,
                dtype=dtype,
                trust_remote_code=backbone_cfg.trust_remote_code,
            )
    except load_errors() as exc:
        raise _load_error(f"{FIELD}.path", path, exc) from exc
    return model


# ---- saving and loading a trained reward model ---------------------------------------------------


def save_reward_model(
    model: Any, tokenizer: Any, meta: RMMeta, calibration: Calibration, out_dir: str | os.PathLike[str]
) -> Path:
    """Write the HF files of the inner model, the tokenizer and the calibration, then
    rm_meta.json last: a dir is only used as a checkpoint once all of it is on disk."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / RM_META_FILE).unlink(missing_ok=True)  # the dir is incomplete until the new meta lands
    inner_model(model).save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    calibration.save(out / RM_CALIBRATION_FILE)
    meta.save(out)
    return out


@dataclass
class LoadedRewardModel:
    """A trained reward model ready to score: model (eval mode), tokenizer, meta, calibration."""

    path: Path
    model: Any
    tokenizer: Any
    meta: RMMeta
    calibration: Calibration


# reward model dir (resolved) -> how many times this process loaded it from disk
LOADS: Counter[str] = Counter()


def load_reward_model(
    path: str | os.PathLike[str], field_name: str = "reward_model.checkpoints", device: Any = None
) -> LoadedRewardModel:
    """Load a reward model dir written by the reward_model stage; one-line UserError if unusable.
    Each load is counted in LOADS (a run's rewards load each of its reward models once)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from grpo.models.loading import load_errors
    from grpo.reward_model.calibration import Calibration

    root = check_checkpoint_dir(path, field_name)
    LOADS[str(root.resolve())] += 1
    try:
        meta = RMMeta.load(root)
        calibration = Calibration.load(root / RM_CALIBRATION_FILE)
    except (OSError, ValueError, TypeError, KeyError) as ex:
        raise UserError(
            f"{field_name}={path}: unreadable reward model files ({ex}); train it again"
        ) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(root))
        model = AutoModelForSequenceClassification.from_pretrained(str(root))
    except load_errors() as ex:
        first = str(ex).strip().splitlines()[0] if str(ex).strip() else type(ex).__name__
        raise UserError(f"{field_name}={path}: cannot load the reward model ({first})") from None
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    if meta.per_language_heads:
        model = wrap_language_heads(model, meta.languages)
    if device is not None:
        model = model.to(device)
    return LoadedRewardModel(
        path=root, model=model.eval(), tokenizer=tokenizer, meta=meta, calibration=calibration
    )
