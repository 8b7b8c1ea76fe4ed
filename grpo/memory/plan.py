"""The memory plan of a run: its phases' peaks on its device, the verdict, the report, the cache.

`plan_memory(settings)` measures every phase the run's stages go through (grpo/memory/phases.py)
for the device the run is planned for (grpo/memory/device.py), or reads the plan of the same
settings from the cache (<cache root>/memory_plans/<key>.json: a fresh plan of Qwen3-0.6B takes
~10-20 s on a CPU, a cached one milliseconds). The plan's peak is the largest phase, since the
phases follow each other; a phase's parts are what is alive at its peak.

What the plan assumes, said in its notes: every completion runs to trainer.max_completion_length
and every prompt is as long as the longest of the env's first train rows (the worst micro-batch a
run can meet); vLLM takes generation.gpu_memory_utilization of the GPU whatever it needs; the
device keeps memory.reserve_gib free for what no tensor shows (the CUDA context, fragmentation).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig
from grpo.errors import UserError
from grpo.memory.device import GIB, Device, planned_for, target_device
from grpo.memory.models import PlanSkipped
from grpo.memory.phases import Phase

# bump when what a plan measures changes: older cached plans are then measured again
PLAN_VERSION = 4
# the plan's parts in the order its table shows them
PARTS = (
    "policy weights",
    "reference model",
    "optimizer states",
    "gradients",
    "activations",
    "KV cache",
    "vLLM share",
    "generator process",
    "reward model",
    "temporaries",
)
# prompts assumed when the env's rows cannot be read here
DEFAULT_PROMPT_TOKENS = 256
# within this share of the usable memory a plan that fits is called tight (its measurement error)
TIGHT = 0.85


def _gib(size: float) -> str:
    return f"{size / GIB:.1f}"


@dataclass
class MemoryPlan:
    """A run's memory plan (see the module docstring)."""

    device: Device
    # what was measured: the policy's architecture and dtype
    model: str
    phases: list[Phase]
    # the training micro-step: checkpointed as configured; what its forward keeps for the backward
    # with gradient checkpointing and without (both measured)
    checkpointing: bool = False
    saved_checkpointed: int | None = None
    saved_full: int | None = None
    # TRL's chunked log-prob head alone on one micro-batch's completion tokens
    logits_chunk: int = 0
    logits_tokens: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cached: bool = False
    # generation=vllm_colocate: the share of the GPU vLLM takes (its part scales with the device)
    vllm_utilization: float | None = None

    def on(self, device: Device) -> MemoryPlan:
        """This plan on another device of the same kind: only vLLM's share (a fraction of the
        GPU) and the verdict change; every measured part stays."""
        phases = []
        for phase in self.phases:
            parts = dict(phase.parts)
            if "vLLM share" in parts and self.vllm_utilization is not None and device.is_gpu:
                parts["vLLM share"] = int(self.vllm_utilization * device.total_bytes)
            phases.append(Phase(phase.name, parts, phase.note))
        return dataclasses.replace(self, device=device, phases=phases)

    # ---- the verdict ----------------------------------------------------------------------------
    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda p: p.total)

    @property
    def fits(self) -> bool:
        return self.peak.total <= self.device.usable_bytes

    @property
    def tight(self) -> bool:
        return self.fits and self.peak.total > TIGHT * self.device.usable_bytes

    def largest_part(self) -> tuple[str, int]:
        peak = self.peak
        part = max(peak.parts, key=lambda k: peak.parts[k])
        return part, peak.parts[part]

    def refusal(self, settings: GrpoConfig) -> str | None:
        """The one line of a run that cannot fit (None when it fits)."""
        if self.fits:
            return None
        part, size = self.largest_part()
        return (
            f"the run does not fit {self.device.name}: its memory plan peaks at {_gib(self.peak.total)} GiB in "
            f"{self.peak.name} (usable {_gib(self.device.usable_bytes)} GiB after memory.reserve_gib), the "
            f"largest part {part} {_gib(size)} GiB; {remedy(part, settings, self)} "
            "(python -m grpo.cli.memory_plan with the same overrides shows the whole plan; memory.plan=false "
            "starts it anyway)"
        )

    # ---- the report ---------------------------------------------------------------------------
    def verdict(self) -> str:
        free = self.device.usable_bytes - self.peak.total
        if not self.fits:
            return f"does NOT fit ({_gib(-free)} GiB over)"
        return f"fits, {_gib(free)} GiB to spare" + (
            " (tight: within the plan's error)" if self.tight else ""
        )

    def header(self) -> list[str]:
        """The lines a run prints before it starts."""
        peak = self.peak
        parts = ", ".join(f"{k} {_gib(v)}" for k, v in _ordered(peak.parts) if v >= GIB / 20)
        lines = [
            f"[memory] {self.model} on {self.device.name}: peak {_gib(peak.total)} GiB in {peak.name} "
            f"({parts}): {self.verdict()}" + (" [cached plan]" if self.cached else "")
        ]
        if self.saved_full is not None:
            lines.append(f"[memory] {self.activations_line()}")
        return lines

    def activations_line(self) -> str:
        """What a micro-batch's forward keeps for its backward, with and without checkpointing."""
        setting = "on" if self.checkpointing else "off"
        return (
            f"a micro-batch's forward keeps {_gib(self.saved_full or 0)} GiB of activations for its backward, "
            f"{_gib(self.saved_checkpointed or 0)} GiB with gradient checkpointing (trainer.gradient_checkpointing: {setting})"
        )

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    def table(self) -> str:
        """The whole plan: a row per phase, a column per part (GiB), then what it assumed."""
        used = [p for p in PARTS if any(ph.parts.get(p) for ph in self.phases)]
        lines = [
            f"memory plan of {self.model} on {self.device.name}"
            + (" (cached)" if self.cached else f", measured in {self.seconds:.1f} s"),
            "",
            "| phase | " + " | ".join(used) + " | total (GiB) |",
            "|---|" + "---|" * len(used) + "---|",
        ]
        for ph in self.phases:
            cells = [_gib(ph.parts[p]) if ph.parts.get(p) else "-" for p in used]
            label = f"{ph.name} ({ph.note})" if ph.note else ph.name
            lines.append(f"| {label} | " + " | ".join(cells) + f" | **{_gib(ph.total)}** |")
        lines += [
            "",
            f"peak: {_gib(self.peak.total)} GiB in {self.peak.name}; usable: {_gib(self.device.usable_bytes)} "
            f"of {_gib(self.device.total_bytes)} GiB; {self.verdict()}",
        ]
        if self.saved_full is not None:
            lines.append(self.activations_line())
        if self.logits_chunk:
            lines.append(
                f"logits chunk: TRL's fused LM head takes {_gib(self.logits_chunk)} GiB for the {self.logits_tokens:,} "
                "completion tokens of a micro-batch (in the train phase's activations and temporaries; no "
                "[batch, length, vocabulary] tensor is made)"
            )
        if not self.fits:
            part, size = self.largest_part()
            lines.append(f"largest part: {part} {_gib(size)} GiB")
        lines += [f"note: {n}" for n in self.notes]
        if self.device.is_gpu:
            lines.append(
                f"note: {_gib(self.device.reserve_bytes)} GiB kept free for the CUDA context and fragmentation "
                "(memory.reserve_gib)"
            )
        return "\n".join(lines)

    # ---- the cache --------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("cached")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MemoryPlan:
        phases = [Phase(**p) for p in data.pop("phases")]
        return cls(device=Device(**data.pop("device")), phases=phases, cached=True, **data)


def _ordered(parts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(parts.items(), key=lambda kv: PARTS.index(kv[0]) if kv[0] in PARTS else len(PARTS))


def remedy(part: str, settings: GrpoConfig, plan: MemoryPlan | None = None) -> str:
    """The setting to change when `part` is the largest of a plan that does not fit."""
    t, g = settings.trainer, settings.generation
    if part == "activations":
        if not t.gradient_checkpointing:
            saved = ""
            if plan is not None and plan.saved_full and plan.saved_checkpointed is not None:
                saved = f" (a micro-batch keeps {_gib(plan.saved_checkpointed)} GiB instead of {_gib(plan.saved_full)})"
            return f"set trainer.gradient_checkpointing=true{saved}, or lower trainer.per_device_batch_completions"
        return _smaller_micro_batch(settings)
    if part in ("temporaries", "gradients") and part == "temporaries":
        return _smaller_micro_batch(settings)
    if part in ("optimizer states", "gradients", "policy weights"):
        return (
            "train a LoRA adapter instead of every weight (model.lora.enabled=true), or optimizer=adamw_8bit"
        )
    if part == "reference model":
        return "model.lora.enabled=true (the reference is then the adapter-disabled base, no copy), or trainer.beta=0"
    if part == "KV cache":
        return (
            f"generate fewer conversations at once (generation.batch_size, now {g.batch_size or 'all'}), or lower "
            "trainer.max_completion_length"
        )
    if part == "vLLM share":
        return f"lower generation.gpu_memory_utilization (now {g.gpu_memory_utilization:g})"
    if part == "generator process":
        return "run the generator on another device (generation.base_url) or generation.num_batches_ahead=0"
    if part == "reward model":
        return "lower reward_model.training.score_batch_size / batch_size_pairs, or use a smaller backbone"
    return _smaller_micro_batch(settings)


def _smaller_micro_batch(settings: GrpoConfig) -> str:
    t = settings.trainer
    smaller = max(
        t.num_generations, t.per_device_batch_completions // 2 // t.num_generations * t.num_generations
    )
    keep = " (completions per step stay as they are)" if t.completions_per_step else ""
    return f"lower trainer.per_device_batch_completions ({t.per_device_batch_completions} -> {smaller}){keep}"


# ---- making a plan ---------------------------------------------------------------------------------


def plan_memory(settings: GrpoConfig, *, force: bool = False, use_cache: bool = True) -> MemoryPlan | None:
    """The memory plan of `settings` on its device (memory.*): None when the run is not planned
    (memory.plan, unless `force`). PlanSkipped when it cannot be made here (its line says why)."""
    if not force and not planned_for(settings.memory):
        return None
    device = target_device(settings.memory)
    key = _cache_key(settings, device)
    path = _cache_dir() / f"{key}.json"
    if use_cache and path.is_file():
        try:
            return MemoryPlan.from_json(json.loads(path.read_text(encoding="utf-8"))).on(device)
        except (ValueError, TypeError, KeyError):
            pass  # a damaged or older entry: measured again and rewritten
    plan = measure_plan(settings, device)
    try:
        from grpo.files import write_text_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(plan.to_json(), indent=1))
    except OSError:
        pass  # a read-only cache: the plan is measured again next time
    return plan


def plan_run(settings: GrpoConfig) -> MemoryPlan | None:
    """What `python -m grpo` does before its stages: plan the run when it is planned (memory.plan),
    print the plan's header lines (main process), and refuse a run that cannot fit (UserError: the
    largest part and the setting to change). A plan that cannot be made is one line, and the run
    goes on."""
    from grpo.run.distributed import is_main

    try:
        plan = plan_memory(settings)
    except PlanSkipped as ex:
        if is_main():
            print(f"[memory] no plan: {ex}", flush=True)
        return None
    if plan is None:
        return None
    refusal = plan.refusal(settings)
    if refusal:
        raise UserError(refusal)
    if is_main():
        for line in plan.header():
            print(line, flush=True)
    return plan


def _cache_dir() -> Path:
    from grpo.models.tiny import cache_root

    return cache_root() / "memory_plans"


def _cache_key(settings: GrpoConfig, device: Device) -> str:
    import importlib.metadata as metadata

    s = dataclasses.asdict(settings)
    relevant = {k: s[k] for k in ("stages", "model", "trainer", "optimizer", "generation", "sft", "env")}
    relevant["reward_model"] = s["reward_model"]
    relevant["eval"] = {k: s["eval"][k] for k in ("num_examples", "rollouts_per_example")}
    relevant["language"] = s["language"]["code"]
    versions = {}
    for dist in ("torch", "transformers", "trl", "peft"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    # the device's kind only: a plan holds for every device of a kind (`MemoryPlan.on`)
    text = json.dumps([PLAN_VERSION, relevant, device.kind, versions], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def sequence_tokens(settings: GrpoConfig) -> tuple[int, int, list[str]]:
    """(prompt, completion) tokens of the longest sequence a micro-batch can hold, and what was
    assumed: over the env's first 64 train rows rendered with the model's chat template, the
    longest prompt, and the longest completion its episode can reach: every model turn of the
    row's reference episode at generation.max_tokens_per_turn, the env's turns between them as
    they are, at most trainer.max_completion_length (all of it for an env without reference
    episodes)."""
    from grpo.envs import build_env
    from grpo.models.loading import load_tokenizer, render_chat

    budget, per_turn = (
        int(settings.trainer.max_completion_length),
        int(settings.generation.max_tokens_per_turn),
    )
    notes: list[str] = []
    try:
        env = build_env(settings.env, settings.language)
        rows = env.rows("train")[:64]
    except Exception as ex:  # a verifiers env that needs what is not here: the plan still stands
        notes.append(
            f"the env's prompts could not be read ({ex}): {DEFAULT_PROMPT_TOKENS} prompt tokens assumed"
        )
        return DEFAULT_PROMPT_TOKENS, budget, notes
    try:
        tokenizer = load_tokenizer(settings.model)
    except UserError:
        from grpo.models.tiny import tiny_tokenizer

        tokenizer = tiny_tokenizer("left")
        notes.append(
            "the model's tokenizer is not here: prompts counted with grpo's built-in byte-level tokenizer "
            "(more tokens than a trained one's: an upper bound)"
        )
    kwargs = dict(settings.model.chat_template_kwargs)

    def count(messages: list[Any], generation_prompt: bool = True) -> int:
        text = render_chat(tokenizer, messages, kwargs, add_generation_prompt=generation_prompt)
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    prompt, completion, episodes = 0, 0, True
    for row in rows:
        prompt = max(prompt, count(list(row.prompt)))
        try:
            reference = [dict(m) for m in env.reference_completion(row)]
        except Exception:  # noqa: BLE001 - an env without reference episodes: the whole budget
            episodes = False
            continue
        answers = [m for m in reference if m.get("role") == "assistant"]
        whole = count([*row.prompt, *reference], generation_prompt=False) - count(list(row.prompt))
        own = sum(
            len(tokenizer(str(m.get("content", "")), add_special_tokens=False).input_ids) for m in answers
        )
        completion = max(completion, whole - own + len(answers) * per_turn)
    if not episodes or not completion:
        completion = budget
        notes.append(
            f"every completion is {budget:,} tokens (trainer.max_completion_length): the longest a run can meet"
        )
    else:
        completion = min(completion, budget)
        notes.append(
            f"the longest completion is {completion:,} tokens: every model turn of the env's reference episodes at "
            f"generation.max_tokens_per_turn={per_turn}, the env's turns between them"
            + (", capped at trainer.max_completion_length" if completion == budget else "")
        )
    return int(prompt or DEFAULT_PROMPT_TOKENS), int(completion), notes


def measure_plan(settings: GrpoConfig, device: Device) -> MemoryPlan:
    """Measure every phase of the run's stages (no cache); PlanSkipped when a config is unreadable."""
    from grpo.memory import phases as ph
    from grpo.memory.models import (
        backbone_config,
        describe,
        fake_causal_lm,
        fake_sequence_classifier,
        parameter_bytes,
        policy_config,
        reward_model_configs,
    )
    from grpo.models.lora import lora_config
    from grpo.train.geometry import step_geometry
    from grpo.train.grpo_args import grpo_config_kwargs
    from grpo.trl_adapter.logs import quiet_library_notices

    quiet_library_notices()  # the libraries' notices a run filters too (grpo/trl_adapter/logs.py)
    started = time.perf_counter()
    t, g, stages = settings.trainer, settings.generation, settings.stages
    notes: list[str] = []
    config, dtype = policy_config(settings.model)
    geometry = step_geometry(t)
    prompt, completion, assumed = sequence_tokens(settings)
    notes += [f"prompts of {prompt:,} tokens, the longest of the env's first train rows", *assumed]
    shape = ph.StepShape(geometry.micro_batch, prompt, completion)
    kwargs = grpo_config_kwargs(settings, Path("unused"), [1.0])
    optimizer_kwargs = _optimizer_kwargs(kwargs, notes)
    peft = lora_config(settings.model.lora)
    import torch

    # trainer.bf16: the trainer runs every forward under autocast (accelerate's mixed precision), also
    # for bf16 weights: what autocast casts (a LoRA adapter's float32 input) is what the backward keeps
    autocast = torch.bfloat16 if t.bf16 else None
    with ph.fake_tensors():
        policy = fake_causal_lm(config, dtype)
        weights, name = parameter_bytes(policy), describe(policy, dtype)
    plan = MemoryPlan(device, name, [], t.gradient_checkpointing)
    resident: dict[str, int] = {}
    if "train" in stages and t.beta > 0 and peft is None:
        resident["reference model"] = weights  # TRL loads a second copy of the policy
    rm_configs = reward_model_configs(settings) if "train" in stages else []
    if rm_configs:
        with ph.fake_tensors():
            resident["reward model"] = sum(
                parameter_bytes(fake_sequence_classifier(c, d)) for c, d in rm_configs
            )
    if g.backend == "vllm_colocate":
        if device.is_gpu:
            resident["vLLM share"] = int(g.gpu_memory_utilization * device.total_bytes)
            plan.vllm_utilization = float(g.gpu_memory_utilization)
        elif g.vllm_cpu_kv_cache_gb:
            resident["vLLM share"] = int(g.vllm_cpu_kv_cache_gb * GIB) + weights
        else:
            notes.append(
                "vLLM's CPU build sizes its KV cache from the run at start (vllm_cpu_kv_cache_gb null): not in the plan"
            )
    elif g.backend == "vllm_server":
        notes.append("generation=vllm_server: vLLM's memory is on the server's device, not in this plan")

    # the hf backend's cache on the planned device (generation.static_cache null: static on a GPU)
    static = g.static_cache if g.static_cache is not None else device.is_gpu
    cache_note = ", static KV cache" if static else ""
    if "train" in stages:
        checkpointing_kwargs = kwargs.get("activation_checkpointing_kwargs") or kwargs.get(
            "gradient_checkpointing_kwargs"
        )
        common = dict(
            peft_config=peft,
            optimizer_kwargs=optimizer_kwargs,
            shape=shape,
            accumulation=geometry.accumulation,
            beta=float(t.beta),
            epsilon=float(t.epsilon),
            temperature=float(t.temperature),
            autocast_dtype=autocast,
            kind=device.kind,
        )
        train = ph.train_phase(
            config, dtype, checkpointing=(checkpointing_kwargs or {}) if t.gradient_checkpointing else None,
            resident=resident, **common,
        )  # fmt: skip
        for checkpointed in (True, False):
            saved = ph.saved_activations(
                config, dtype, peft_config=peft, shape=shape, temperature=float(t.temperature),
                autocast_dtype=autocast, kind=device.kind,
                checkpointing=(checkpointing_kwargs or {}) if checkpointed else None,
            )  # fmt: skip
            if checkpointed:
                plan.saved_checkpointed = saved
            else:
                plan.saved_full = saved
        train.note = (
            f"micro-batch {shape.rows} x {shape.prompt + shape.completion:,} tokens"
            + (", checkpointed" if t.gradient_checkpointing else "")
            + (", LoRA" if peft is not None else "")
        )
        plan.phases.append(train)
        plan.logits_tokens = shape.rows * shape.completion
        plan.logits_chunk = ph.logits_chunk(
            config.hidden_size, config.vocab_size, autocast or dtype, plan.logits_tokens, device.kind,
            head_trains=peft is None,
        )  # fmt: skip
        between_steps = {"optimizer states": train.parts.get("optimizer states", 0), **resident}
        if g.backend == "hf":
            conversations = min(
                g.batch_size or geometry.local_completions_per_step, geometry.local_completions_per_step
            )
            generation = ph.generation_phase(
                "generation", config, dtype, conversations=conversations, prompt=prompt,
                length=prompt + completion, resident=between_steps, static=static,
            )  # fmt: skip
            generation.note = f"{conversations} conversations x {prompt + completion:,} tokens" + cache_note
            if g.num_batches_ahead and not g.base_url:
                # the generator process holds a copy of the policy and the batch's KV cache
                copy = generation.parts.get("policy weights", 0) + generation.parts.get("KV cache", 0)
                train.add("generator process", copy)
                notes.append(
                    "one batch ahead: grpo's policy server generates in a process of its own, with its own copy"
                )
            else:
                plan.phases.append(generation)
        if rm_configs:
            rm = settings.reward_model.backbone
            rows = int(settings.reward_model.training.score_batch_size)
            plan.phases.append(
                ph.scoring_phase(
                    rm_configs,
                    rows=rows,
                    length=min(int(rm.max_length), prompt + completion),
                    # the members' weights are the phase's own part
                    resident={"policy weights": weights, **_without(between_steps, "reward model")},
                )
            )
            plan.phases[-1].note = f"{rows} sequences at once"
    if "eval" in stages and g.backend == "hf":
        per_eval = settings.eval.num_examples * settings.eval.rollouts_per_example
        conversations = min(g.batch_size or per_eval, per_eval)
        evaluation = ph.generation_phase(
            "evaluation", config, dtype, conversations=conversations, prompt=prompt,
            length=prompt + completion, resident={}, static=static,
        )  # fmt: skip
        evaluation.note = f"{conversations} conversations x {prompt + completion:,} tokens" + cache_note
        plan.phases.append(evaluation)
    if "sft" in stages:
        plan.phases.append(_sft_phase(settings, config, dtype, device))
    if "reward_model" in stages:
        rm_config, rm_dtype = backbone_config(settings.reward_model.backbone)
        tr = settings.reward_model.training
        with ph.fake_tensors():
            model = fake_sequence_classifier(rm_config, rm_dtype)
            phase = ph.supervised_phase(
                "reward model training",
                model,
                {
                    "optim": "adamw_torch",
                    "learning_rate": float(tr.lr),
                    "weight_decay": float(tr.weight_decay),
                },
                rows=int(tr.batch_size_pairs),
                length=int(settings.reward_model.backbone.max_length),
                accumulation=int(tr.gradient_accumulation_steps),
                pairs=True,
            )
        phase.note = f"{tr.batch_size_pairs} pairs x {settings.reward_model.backbone.max_length:,} tokens"
        plan.phases.append(phase)
    if not plan.phases:
        raise PlanSkipped("the run's stages hold nothing the plan measures on this device")
    plan.notes = notes
    plan.seconds = time.perf_counter() - started
    return plan


def _without(parts: dict[str, int], name: str) -> dict[str, int]:
    return {k: v for k, v in parts.items() if k != name}


def _optimizer_kwargs(kwargs: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The transformers TrainingArguments fields that choose and set up the run's optimizer."""
    optim = kwargs["optim"]
    if optim == "adamw_bnb_8bit":
        optim = "adamw_torch"
        notes.append(
            "optimizer=adamw_8bit is planned as AdamW (bitsandbytes keeps its states in fewer bytes: an upper bound)"
        )
    fields = {
        "optim": optim,
        "learning_rate": kwargs["learning_rate"],
        "weight_decay": kwargs["weight_decay"],
        "adam_beta1": kwargs["adam_beta1"],
        "adam_beta2": kwargs["adam_beta2"],
    }
    if kwargs.get("optim_args"):
        fields["optim_args"] = kwargs["optim_args"]
    return fields


def _sft_phase(settings: GrpoConfig, config: Any, dtype: Any, device: Device) -> Phase:
    """The SFT stage's micro-step: padding-free, a micro-batch is one row of batch_size x max_length
    tokens (the longest it can be), the loss on every token through TRL's fused head."""
    from grpo.memory import phases as ph
    from grpo.models.lora import lora_config

    f = settings.sft
    rows, length = (1, f.batch_size * f.max_length) if f.padding_free else (f.batch_size, f.max_length)
    with ph.fake_tensors(), ph.head_kernels(device.kind):
        from trl.trainer.utils import add_fused_lm_head

        peft = lora_config(settings.model.lora) if f.lora else None
        model = ph.fake_causal_lm(config, dtype, peft)
        add_fused_lm_head(model.get_base_model() if peft is not None else model)
        phase = ph.supervised_phase(
            "SFT",
            model,
            {"optim": "adamw_torch", "learning_rate": float(f.lr), "weight_decay": float(f.weight_decay)},
            rows=rows,
            length=length,
            accumulation=int(f.gradient_accumulation_steps),
        )
    phase.note = f"{f.batch_size} conversations x {f.max_length:,} tokens" + (
        ", padding-free" if f.padding_free else ""
    )
    return phase
