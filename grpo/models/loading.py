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

from grpo.config import DTYPES, ModelConfig, RewardModelBackboneConfig
from grpo.errors import UserError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# the files a model dir / a tokenizer dir has (save_pretrained writes them)
MODEL_FILES = ("config.json",)
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")
# org/name as the hub spells repo ids; anything else that is not an existing dir is a bad local path
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


# the settings a loader reads: ModelConfig for the policy, RewardModelBackboneConfig for the RM
WeightsConfig = ModelConfig | RewardModelBackboneConfig


def resolve_dtype(model_cfg: WeightsConfig) -> torch.dtype | str:
    """`model.dtype` -> torch.dtype ("auto" stays the string "auto": the checkpoint's own dtype)."""
    name = DTYPES[model_cfg.dtype.lower()]
    if name == "auto":
        return "auto"
    import torch

    return getattr(torch, name)


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    chat_template_kwargs: Mapping[str, Any],
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text of a conversation: the one way the project applies a chat template.
    `chat_template_kwargs`: model.chat_template_kwargs (e.g. {"enable_thinking": False} for Qwen3)."""
    return tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **chat_template_kwargs,
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


def local_dir_problem(field: str, path: str, required: Sequence[str], what: str) -> str | None:
    """What keeps a local `path` from loading as a `what` dir (one line: the folder, what it
    lacks), None when it has one of the `required` files or is a hub id. Light: files only, so the
    preflight says it before anything starts."""
    if not _is_local(path):
        return None
    local = Path(path).expanduser()
    if not local.exists():
        return f"{field}={path!r} does not exist; set it to a local dir or a hub id like Qwen/Qwen3-0.6B"
    if not local.is_dir():
        return f"{field}={path!r} is a file; it must be a dir written by save_pretrained"
    if not any((local / name).is_file() for name in required):
        state = "is an empty folder" if not any(local.iterdir()) else "is a folder"
        run = " or a grpo run folder (outputs/runs/<date>/<time>)" if field == "model.path" else ""
        return (
            f"{field}={path!r} {state} with no {' or '.join(required)}; it must be a {what} dir written by "
            f"save_pretrained{run}"
        )
    return None


def checked_source(field: str, path: str, required: Sequence[str], what: str) -> str:
    """Fail fast, in one line, on a path that cannot work. Returns the path to hand to from_pretrained."""
    problem = local_dir_problem(field, path, required, what)
    if problem is not None:
        raise UserError(problem)
    if _is_local(path):
        return str(Path(path).expanduser())
    if not _hub_cached(path, required[0]) and _hub_unreachable():
        raise _unreachable_error(field, path)
    return path


def load_errors() -> tuple[type[BaseException], ...]:
    """What loading a model dir raises for a bad dir: a missing or unreadable file (OSError), a
    config or shape that does not fit (ValueError), a damaged or truncated weights file
    (safetensors' own error): every one becomes a one-line UserError (`_load_error`)."""
    from safetensors import SafetensorError

    return (OSError, ValueError, SafetensorError)


def _load_error(field: str, path: str, exc: Exception) -> UserError:
    text = str(exc)
    if type(exc).__name__ == "SafetensorError":
        return UserError(
            f"{field}={path!r} could not be loaded: its weights file is damaged or cut short (safetensors: "
            f"{' '.join(text.split())})"
        )
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


def load_tokenizer(model_cfg: WeightsConfig, padding_side: str = "left") -> PreTrainedTokenizerBase:
    """The tokenizer of `model_cfg`: `model.tokenizer` if set, else the model's own (pretrained) or the
    built-in offline byte-level BPE (random). Left padding by default (batched generation)."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    path = model_cfg.tokenizer
    field = "model.tokenizer"
    if path is None and model_cfg.source == "random":
        from grpo.models.tiny import tiny_tokenizer

        return tiny_tokenizer(padding_side)
    if path is None:
        path, field = str(model_cfg.path), "model.path"
    target = checked_source(field, path, TOKENIZER_FILES, "tokenizer")

    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(target, trust_remote_code=model_cfg.trust_remote_code)
    except (OSError, ValueError) as exc:
        raise _load_error(field, path, exc) from exc
    return _finish_tokenizer(tokenizer, padding_side)


def run_device() -> str | None:
    """Where a run's policy lives: its process's CUDA GPU when there is one (what the trainer will
    train on, so evaluations and generation before training run there too), else the CPU (None).
    A sharded launch (FSDP, DeepSpeed) loads on the CPU and lets its engine place the shards."""
    from grpo.run.distributed import has_cuda_gpu

    if not has_cuda_gpu() or any(
        os.environ.get(flag, "false").lower() == "true"
        for flag in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED")
    ):
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0') or 0) % torch.cuda.device_count()}"


def config_dtype(name: str, fallback: str = "float32") -> Any:
    """A `model.dtype` value as the torch dtype the loader uses ("auto": the checkpoint's, here
    `fallback`)."""
    import torch

    resolved = DTYPES[name.lower()]
    return getattr(torch, fallback if resolved == "auto" else resolved)


def pretrained_config(path: str, field: str, trust_remote_code: bool = False) -> Any:
    """The transformers config of a checkpoint (a local dir, the hub cache or the hub), without its
    weights; UserError (one line) when its config.json cannot be read."""
    from transformers import AutoConfig

    target = checked_source(field, path, MODEL_FILES, "model")
    try:
        return AutoConfig.from_pretrained(target, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as ex:
        raise _load_error(field, path, ex) from ex


def model_config(model_cfg: ModelConfig) -> tuple[Any, Any]:
    """(transformers config, torch dtype) of the policy `model_cfg` loads, without its weights:
    model.architecture (source=random, grpo's Qwen3 builder) or the checkpoint's config.json."""
    if model_cfg.source == "random":
        from grpo.models.tiny import qwen3_config

        dtype = config_dtype(model_cfg.dtype)
        return qwen3_config(model_cfg.architecture, load_tokenizer(model_cfg), dtype), dtype
    config = pretrained_config(str(model_cfg.path), "model.path", model_cfg.trust_remote_code)
    fallback = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32")
    return config, config_dtype(model_cfg.dtype, fallback.removeprefix("torch."))


def load_policy(
    model_cfg: ModelConfig, device: str | torch.device | None = "auto"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) for the policy. The tokenizer is left-padded; the model is in eval mode
    (trainers switch it to train) on `device` ("auto": `run_device()`, a CUDA GPU when there is
    one; None: CPU)."""
    if device == "auto":
        device = run_device()
    dtype = resolve_dtype(model_cfg)
    tokenizer = load_tokenizer(model_cfg)
    if model_cfg.source == "random":
        import torch

        from grpo.models.tiny import random_qwen3

        model_dtype = torch.float32 if dtype == "auto" else dtype
        model = random_qwen3(
            model_cfg.architecture, tokenizer, seed=model_cfg.seed, dtype=model_dtype, device=device
        )
        return _with_adapter(model, tokenizer, model_cfg) if model_cfg.adapter else (model, tokenizer)

    path = str(model_cfg.path)
    target = checked_source("model.path", path, MODEL_FILES, "model")
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            target, dtype=dtype, trust_remote_code=model_cfg.trust_remote_code
        )
    except load_errors() as exc:
        raise _load_error("model.path", path, exc) from exc
    if device is not None:
        model = model.to(device)
    return _with_adapter(model, tokenizer, model_cfg)


def _with_adapter(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, model_cfg: ModelConfig
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The loaded weights with model.adapter (a LoRA run's checkpoint) merged in, in eval mode."""
    if model_cfg.adapter:
        from peft import PeftModel

        try:
            model = PeftModel.from_pretrained(model, model_cfg.adapter).merge_and_unload()
        except load_errors() as exc:
            raise _load_error("model.adapter", model_cfg.adapter, exc) from exc
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def save_pretrained_tiny(model_cfg: ModelConfig, out_dir: str | os.PathLike[str]) -> Path:
    """Write the model of `model_cfg` (normally model=tiny) and its tokenizer to out_dir, as a dir
    that `model.source=pretrained model.path=<out_dir>` (or `transformers serve`) loads back."""
    model, tokenizer = load_policy(model_cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
