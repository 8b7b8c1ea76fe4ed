"""One loading path for the policy model and its tokenizer, from the `model` config group.

source=pretrained: `model.path` is a hub id or a local dir (AutoTokenizer / AutoModelForCausalLM).
source=random:     a Qwen3 model built from `model.architecture` with random weights and the
                   built-in offline tokenizer (or `model.tokenizer` if set).

Every failure a user can cause (bad dtype, missing dir, unreachable hub) becomes a one-line
UserError. Heavy imports happen inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from grpo.errors import UserError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SOURCES = ("pretrained", "random")
_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "auto": "auto",
}
# org/name as the hub spells repo ids; anything else that is not an existing dir is a bad local path
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


def _plain(value: Any) -> Any:
    """OmegaConf containers -> plain dict/list (transformers and Jinja want real dicts)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, DictConfig | ListConfig):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a hard dependency
        pass
    return value


def _field(model_cfg: Any, name: str, default: Any = None) -> Any:
    """Read a field from a DictConfig, a ModelConfig dataclass or a plain dict alike."""
    if isinstance(model_cfg, Mapping):
        return _plain(model_cfg.get(name, default))
    return _plain(getattr(model_cfg, name, default))


def resolve_dtype(model_cfg: Any) -> torch.dtype | str:
    """`model.dtype` -> torch.dtype ("auto" stays the string "auto": the checkpoint's own dtype)."""
    raw = str(_field(model_cfg, "dtype", "float32") or "float32")
    name = _DTYPES.get(raw.lower())
    if name is None:
        raise UserError(f"model.dtype={raw!r} is not supported; use one of float32, bfloat16, float16, auto")
    if name == "auto":
        return "auto"
    import torch

    return getattr(torch, name)


def chat_template_kwargs(model_cfg: Any) -> dict[str, Any]:
    """Extra kwargs for apply_chat_template (e.g. {"enable_thinking": False} for Qwen3)."""
    kwargs = _field(model_cfg, "chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise UserError(f"model.chat_template_kwargs must be a mapping, got {type(kwargs).__name__}")
    return dict(kwargs)


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    model_cfg: Any,
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text of a conversation: the one way the project applies a chat template."""
    return tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **chat_template_kwargs(model_cfg),
    )


def _is_local(path: str) -> bool:
    return os.path.exists(os.path.expanduser(path)) or not _HUB_ID.match(path)


def _hub_cached(repo_id: str, filename: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, filename), str)
    except Exception:  # malformed id and the like: let from_pretrained report it
        return False


def _hub_unreachable() -> bool:
    """Offline mode, or the hub's host does not even resolve: saves ~45 s of retries before failing."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return True
    if any(
        os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")
    ):
        return False  # behind a proxy, local DNS says nothing about reachability
    host = urlparse(constants.ENDPOINT).hostname
    if not host:
        return False
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return True
    return False


def _unreachable_error(field: str, path: str) -> UserError:
    return UserError(
        f"{field} {path!r} could not be loaded: no local copy and the hub is unreachable "
        f"(HF_HUB_OFFLINE / no network); download it on a machine with network or set {field} to a local dir"
    )


def _check_source(field: str, path: str, required: Sequence[str], what: str) -> str:
    """Fail fast, in one line, on a path that cannot work. Returns the path to hand to from_pretrained."""
    if _is_local(path):
        local = Path(path).expanduser()
        if not local.exists():
            raise UserError(
                f"{field}={path!r} does not exist; set it to a local dir or a hub id like Qwen/Qwen3-0.6B"
            )
        if not local.is_dir():
            raise UserError(f"{field}={path!r} is a file; it must be a dir written by save_pretrained")
        if not any((local / name).is_file() for name in required):
            raise UserError(
                f"{field}={path!r} has no {' or '.join(required)}; it must be a {what} dir written by save_pretrained"
            )
        return str(local)
    if not _hub_cached(path, required[0]) and _hub_unreachable():
        raise _unreachable_error(field, path)
    return path


def _load_error(field: str, path: str, exc: Exception) -> UserError:
    text = str(exc)
    if "couldn't connect" in text or "offline mode" in text.lower() or "cached files" in text:
        return _unreachable_error(field, path)
    if "not a valid model identifier" in text or "Repository Not Found" in text:
        return UserError(
            f"{field}={path!r} was not found on the hub; check the id or set {field} to a local dir"
        )
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return UserError(f"{field}={path!r} could not be loaded: {first}")


def _finish_tokenizer(tokenizer: PreTrainedTokenizerBase, padding_side: str) -> PreTrainedTokenizerBase:
    tokenizer.padding_side = padding_side
    # Batched generation needs a pad token; the eos is the usual stand-in when a model has none.
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_tokenizer(model_cfg: Any, padding_side: str = "left") -> PreTrainedTokenizerBase:
    """The tokenizer of `model_cfg`: `model.tokenizer` if set, else the model's own (pretrained) or the
    built-in offline byte-level BPE (random). Left padding by default (batched generation)."""
    if padding_side not in ("left", "right"):
        raise UserError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    source = _source(model_cfg)
    path = _field(model_cfg, "tokenizer")
    field = "model.tokenizer"
    if path is None and source == "random":
        from grpo.models.tiny import tiny_tokenizer

        return tiny_tokenizer(padding_side)
    if path is None:
        path, field = _pretrained_path(model_cfg), "model.path"
    path = str(path)
    target = _check_source(field, path, ("tokenizer_config.json", "tokenizer.json"), "tokenizer")

    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            target, trust_remote_code=bool(_field(model_cfg, "trust_remote_code", False))
        )
    except (OSError, ValueError) as exc:
        raise _load_error(field, path, exc) from exc
    return _finish_tokenizer(tokenizer, padding_side)


def _source(model_cfg: Any) -> str:
    source = str(_field(model_cfg, "source", "pretrained"))
    if source not in SOURCES:
        raise UserError(f"model.source={source!r} is not supported; use one of {', '.join(SOURCES)}")
    return source


def _pretrained_path(model_cfg: Any) -> str:
    path = _field(model_cfg, "path")
    if not path:
        raise UserError("model.path is required for model.source=pretrained; set a hub id or a local dir")
    return str(path)


def load_policy(
    model_cfg: Any, device: str | torch.device | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) for the policy. The tokenizer is left-padded; the model is in eval mode
    (trainers switch it to train) on `device` (None: CPU)."""
    source = _source(model_cfg)
    dtype = resolve_dtype(model_cfg)
    tokenizer = load_tokenizer(model_cfg)
    if source == "random":
        import torch

        from grpo.models.tiny import random_qwen3

        arch = _field(model_cfg, "architecture")
        if arch is not None and not isinstance(arch, dict):
            raise UserError(
                f"model.architecture must be a mapping of Qwen3Config fields, got {type(arch).__name__}"
            )
        seed = int(_field(model_cfg, "seed", 0) or 0)
        model_dtype = torch.float32 if dtype == "auto" else dtype
        return random_qwen3(arch, tokenizer, seed=seed, dtype=model_dtype, device=device), tokenizer

    path = _pretrained_path(model_cfg)
    target = _check_source("model.path", path, ("config.json",), "model")
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            target, dtype=dtype, trust_remote_code=bool(_field(model_cfg, "trust_remote_code", False))
        )
    except (OSError, ValueError) as exc:
        raise _load_error("model.path", path, exc) from exc
    if device is not None:
        model = model.to(device)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def save_pretrained_tiny(model_cfg: Any, out_dir: str | os.PathLike[str]) -> Path:
    """Write the model of `model_cfg` (normally model=tiny) and its tokenizer to out_dir, as a dir
    that `model.source=pretrained model.path=<out_dir>` (or `transformers serve`) loads back."""
    model, tokenizer = load_policy(model_cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
