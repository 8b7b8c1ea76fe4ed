"""The settings rules of the policy model: where its weights come from (`weights_source`, shared
with the reward model's backbone) and the LoRA adapter's shape.

Walked by the registry grpo/cli/checks.py; UserError (one line: field, value, fix) on the first
rule broken. Light: no torch (installed versions are read from package metadata)."""

from __future__ import annotations

import importlib.metadata

from grpo.config import DTYPES, MODEL_SOURCES, ModelConfig, RewardModelBackboneConfig, TrainerConfig
from grpo.errors import reject
from grpo.models.loading import MODEL_FILES, TOKENIZER_FILES, local_dir_problem


def weights_source(block: str, m: ModelConfig | RewardModelBackboneConfig) -> None:
    """Rules shared by the policy (`model`) and the reward model backbone: where weights come from."""
    if m.source not in MODEL_SOURCES:
        reject(f"{block}.source='{m.source}' is not one of {', '.join(MODEL_SOURCES)}")
    if m.source == "pretrained" and not m.path:
        reject(f"{block}.path is required for {block}.source=pretrained: a hub id or a local dir")
    # a local folder that cannot load: said before anything starts (a tracked run, a run folder),
    # naming the folder and what it lacks, whichever source was asked for
    if m.path and (problem := local_dir_problem(f"{block}.path", str(m.path), MODEL_FILES, "model")):
        reject(problem)
    if m.tokenizer and (
        problem := local_dir_problem(f"{block}.tokenizer", m.tokenizer, TOKENIZER_FILES, "tokenizer")
    ):
        reject(problem)
    if (
        block == "model"  # the policy's tokenizer comes from its path (the RM backbone's may be trained)
        and m.source == "pretrained"
        and not m.tokenizer
        and (problem := local_dir_problem(f"{block}.path", str(m.path), TOKENIZER_FILES, "tokenizer"))
    ):
        reject(problem)
    if m.source == "random" and m.path:
        # random weights are built from `architecture`: a path would be silently ignored
        reject(
            f"{block}.path={m.path} is not used with {block}.source=random (random weights from "
            f"{block}.architecture): set {block}.source=pretrained to load it, or {block}.tokenizer={m.path} "
            "to use only its tokenizer"
        )
    if str(m.dtype).lower() not in DTYPES:
        reject(f"{block}.dtype='{m.dtype}' is not supported; use one of float32, bfloat16, float16, auto")


def check_model(m: ModelConfig, t: TrainerConfig) -> None:
    """The model group; `t`: the trainer group (its reference model under LoRA)."""
    weights_source("model", m)
    lora = m.lora
    if not lora.enabled:
        return
    if lora.r < 1 or lora.alpha <= 0:
        reject(
            f"model.lora.r={lora.r} and model.lora.alpha={lora.alpha} must be positive (e.g. r=16, alpha=32)"
        )
    if not 0 <= lora.dropout < 1:
        reject(f"model.lora.dropout={lora.dropout} must be in [0, 1)")
    if not lora.target_modules or not all(lora.target_modules):
        reject("model.lora.target_modules must be a non-empty list of module names, e.g. [q_proj, v_proj]")
    if "lm_head" in lora.target_modules:
        reject(
            "model.lora.target_modules contains lm_head: GRPO computes log-probs from lm_head.weight directly, so "
            "an adapter there would never train; remove lm_head"
        )
    if t.extra.get("sync_ref_model"):
        reject(
            "trainer.extra.sync_ref_model=true does not work with model.lora.enabled=true: under LoRA the reference "
            "model is the adapter-disabled base; drop sync_ref_model"
        )


def check_torch_builds() -> None:
    """A CPU build of torch beside PyPI's torchvision / torchaudio / torchcodec (CUDA builds, which
    vLLM's CPU build pulls in): their operators do not load, and `import transformers`' model code
    fails (`operator torchvision::nms does not exist`). grpo uses none of them."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return
    if "+cpu" not in torch_version:
        return
    foreign = []
    for dist in ("torchvision", "torchaudio", "torchcodec"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if "+cpu" not in version:
            foreign.append(f"{dist} {version}")
    if foreign:
        reject(
            f"torch {torch_version} (a CPU build) is installed beside {', '.join(foreign)} (CUDA builds from PyPI, "
            "pulled in by vLLM's CPU build): transformers cannot load its models next to them; grpo needs none "
            f"of them: pip uninstall -y {' '.join(f.split()[0] for f in foreign)}"
        )
