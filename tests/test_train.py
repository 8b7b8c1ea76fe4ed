"""GRPO training through TRL's GRPOTrainer on the real tiny model: config mapping, presets and the
Qwen3 recipe, multi-turn training with the env mask, reward wiring, LoRA / reference model, and a
short run of every loss preset."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.env_mask_check import assert_env_mask_follows_the_template
from helpers.packaged_env import packaged_env
from helpers.random_model import TRAIN_ON_CUT_COMPLETIONS
from transformers import TrainerCallback

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.envs.base import Row
from grpo.envs.char_target import CharTargetEnv
from grpo.envs.parsers import assistant_turns
from grpo.envs.rubric import RewardFunc, Rubric
from grpo.errors import UserError
from grpo.models import load_policy
from grpo.train.geometry import step_geometry
from grpo.train.grpo_args import grpo_config_kwargs, make_grpo_config
from grpo.train.rollout_func import EnvRolloutFunc, PromptIndex
from grpo.train.trainer import build_trainer, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# a few quick steps: 2 prompts x 4 completions per step, short completions
SMALL = [
    "stages=[train]",
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=8",
    "trainer.max_steps=1",
    "trainer.save_steps=1000",
    "trainer.beta=0",
    "trainer.max_completion_length=16",
    "generation.max_tokens_per_turn=16",
    *TRAIN_ON_CUT_COMPLETIONS,
]


def small_cfg(env: str, *overrides: str):
    return load_settings([f"+env={env}", *SMALL, *overrides])


class LogCapture(TrainerCallback):
    """Keeps every log dict TRL emits (training metrics per logging step)."""

    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.logs.append({"step": state.global_step, **logs})


# ---- config -> TRL ----------------------------------------------------------------------------


def test_fewer_train_rows_than_one_generation_batch_is_a_user_error(tmp_path):
    """TRL would train 0 steps without a word: the trainer refuses, for any env (here the split's
    size is not in the settings the trainer sees, as with a verifiers env)."""
    cfg = load_settings(
        ["+env=char_target", "trainer.num_generations=2", "trainer.per_device_batch_completions=8"]
    )
    env = packaged_env("char_target", num_train_examples=3, num_eval_examples=1)
    with pytest.raises(UserError, match="has 3 train rows, fewer than the 4 distinct prompts") as info:
        build_trainer(cfg, env, tmp_path)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "checkpoints").exists()


def test_config_maps_onto_grpo_config(tmp_path):
    cfg = load_settings(
        [
            "+env=alphabet_sort",
            "trainer=dapo",
            "optimizer=sgd",
            "optimizer.warmup=0.1",
            "trainer.num_generations=8",
            "trainer.per_device_batch_completions=16",
            "trainer.gradient_accumulation_steps=2",
            "+trainer.extra.top_entropy_quantile=0.5",
        ]
    )
    kwargs = grpo_config_kwargs(cfg, tmp_path, [1.0, 0.5])
    assert kwargs["per_device_train_batch_size"] == 16  # completions, as TRL counts them
    assert kwargs["optim"] == "sgd" and kwargs["optim_args"] == "momentum=0.9"
    assert kwargs["warmup_steps"] == 0.1 and kwargs["lr_scheduler_type"] == "constant_with_warmup"
    assert kwargs["top_entropy_quantile"] == 0.5 and kwargs["reward_weights"] == [1.0, 0.5]
    args = make_grpo_config(cfg, tmp_path, [1.0, 0.5])
    assert (args.loss_type, args.epsilon_high, args.beta, args.mask_truncated_completions) == (
        "dapo",
        0.28,
        0.0,
        True,
    )
    # one generation per optimizer step, made of whole groups
    assert args.steps_per_generation == 2 and args.generation_batch_size == 32
    assert args.bf16 is False and args.activation_checkpointing is False and args.use_vllm is False

    bad = load_settings(["+env=alphabet_sort", "+trainer.extra.not_a_field=1"])
    with pytest.raises(UserError, match="trainer.extra: not_a_field is not a trl.GRPOConfig field"):
        make_grpo_config(bad, tmp_path, [1.0])


def test_presets_differ_only_where_the_papers_differ():
    trainers = {
        name: dataclasses.asdict(load_settings(["+env=alphabet_sort", f"trainer={name}"]).trainer)
        for name in ("grpo", "dr_grpo", "dapo")
    }
    base = trainers["grpo"]
    assert (base["loss_type"], base["scale_rewards"], base["beta"]) == ("grpo", "group", 0.04)

    def changed(name):
        return {k: v for k, v in trainers[name].items() if base[k] != v}

    assert changed("dr_grpo") == {
        "name": "dr_grpo",
        "loss_type": "dr_grpo",
        "scale_rewards": "none",
        "beta": 0.0,
    }
    assert changed("dapo") == {
        "name": "dapo",
        "loss_type": "dapo",
        "epsilon_high": 0.28,
        "beta": 0.0,
    }  # DAPO's overlong filtering (mask_truncated_completions) is every preset's default


def test_qwen3_recipe():
    cfg = load_settings(["+env=alphabet_sort", "model=qwen3_0_6b"])
    t, o = cfg.trainer, cfg.optimizer
    assert cfg.model.path == "Qwen/Qwen3-0.6B" and cfg.model.dtype == "bfloat16"
    # the Hub recipe's 64 completions per step (8 prompts x 8), in 8 micro-batches of 8 completions
    geometry = step_geometry(t, processes=1)
    assert (geometry.completions_per_step, geometry.prompts_per_step, t.num_generations) == (64, 8, 8)
    assert (geometry.micro_batch, geometry.accumulation, t.gradient_checkpointing) == (8, 8, True)
    assert (t.max_steps, t.logging_steps, t.save_steps, t.bf16) == (1000, 1, 100, True)
    assert (o.lr, o.lr_scheduler) == (1e-6, "constant_with_warmup")
    assert cfg.generation.backend == "vllm_colocate"
    # TRL receives the micro-batch as its per-device batch and one generation of 64 per step
    args = grpo_config_kwargs(cfg, Path("unused"), [1.0])
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (8, 8)
    assert args["activation_checkpointing"] is True
    # the algorithm preset and the command line still win
    cfg = load_settings(
        ["+env=alphabet_sort", "model=qwen3_0_6b", "trainer=dapo", "generation=hf", "optimizer.lr=3e-6"]
    )
    assert (cfg.trainer.loss_type, cfg.trainer.completions_per_step) == ("dapo", 64)
    assert (cfg.generation.backend, cfg.optimizer.lr) == ("hf", 3e-6)
    # a smaller micro-batch keeps the step: the accumulation follows
    cfg = load_settings(["+env=alphabet_sort", "model=qwen3_0_6b", "trainer.per_device_batch_completions=16"])
    assert step_geometry(cfg.trainer, processes=1).accumulation == 4
    assert step_geometry(cfg.trainer, processes=2).accumulation == 2


def test_step_geometry_in_grpos_words():
    def geometry(*overrides, processes=1):
        return step_geometry(load_settings(["+env=alphabet_sort", *overrides]).trainer, processes=processes)

    # without completions_per_step: micro-batch x accumulation x processes (the default: 8 x 1)
    plain = geometry()
    assert (plain.completions_per_step, plain.micro_batch, plain.accumulation) == (8, 8, 1)
    assert geometry("trainer.gradient_accumulation_steps=3", processes=2).completions_per_step == 48
    # with it: the accumulation follows, per process
    g = geometry("trainer.completions_per_step=32")
    assert (g.accumulation, g.prompts_per_step, g.local_completions_per_step) == (4, 8, 32)
    assert g.describe() == "32 completions per step (8 prompts x 4) in 4 micro-batch(es) of 8"
    assert geometry("trainer.completions_per_step=32", processes=4).accumulation == 1
    # numbers that do not fit together: one line each, naming the fix
    with pytest.raises(
        UserError, match=r"completions_per_step=20 is not a whole number of micro-batches.*set it to 16 or 24"
    ):
        geometry("trainer.completions_per_step=20")
    with pytest.raises(
        UserError, match=r"completions_per_step=8 is not a whole number of micro-batches.*x 2 processes.*16"
    ):
        geometry("trainer.completions_per_step=8", processes=2)
    with pytest.raises(
        UserError,
        match=r"gradient_accumulation_steps=2 disagrees with trainer.completions_per_step=32 \(= 4 micro-batches",
    ):
        geometry("trainer.completions_per_step=32", "trainer.gradient_accumulation_steps=2")
    assert (
        geometry("trainer.completions_per_step=32", "trainer.gradient_accumulation_steps=4").accumulation == 4
    )
    with pytest.raises(
        UserError, match="per_device_batch_completions=6 is not a multiple of trainer.num_generations=4"
    ):
        geometry("trainer.per_device_batch_completions=6")


class MicroBatchCount(TrainerCallback):
    """Counts the forward/backward micro-batches of each optimizer step (transformers calls
    on_substep_end after every micro-batch but a step's last, then on_step_end)."""

    def __init__(self):
        self.micro, self.per_step = 0, []

    def on_substep_end(self, args, state, control, **kwargs):
        self.micro += 1

    def on_step_end(self, args, state, control, **kwargs):
        self.per_step.append(self.micro + 1)
        self.micro = 0


def test_completions_per_step_train_in_micro_batches_and_resume(tmp_path):
    """completions_per_step=16 in micro-batches of 4: one generation of 16 completions (4 prompts
    x 4) per optimizer step, trained in 4 forward/backward passes; a resume goes on the same way."""
    overrides = [
        "trainer.completions_per_step=16",
        "trainer.per_device_batch_completions=4",
        "trainer.save_steps=1",
    ]

    def run(run_dir, max_steps, *extra):
        cfg = small_cfg("char_target", *overrides, f"trainer.max_steps={max_steps}", *extra)
        count = MicroBatchCount()
        bundle = build_trainer(cfg, build_env(cfg.env, cfg.language), run_dir, callbacks=[count])
        generated, rollout = [], bundle.trainer.rollout_func

        def counted(prompts, trainer):
            generated.append(len(prompts))
            return rollout(prompts, trainer)

        bundle.trainer.rollout_func = counted
        bundle.trainer.train(resume_from_checkpoint=str(bundle.resume_from) if bundle.resume_from else None)
        return bundle.trainer, generated, count.per_step

    trainer, generated, micro = run(tmp_path / "first", 2)
    assert trainer.state.global_step == 2
    assert trainer.args.per_device_train_batch_size == 4 and trainer.args.generation_batch_size == 16
    # TRL hands the rollout function the prompts of a whole generation batch: 16 = 4 prompts x 4
    assert generated == [16, 16] and micro == [4, 4]

    trainer, generated, micro = run(tmp_path / "second", 3, f"resume={tmp_path / 'first'}")
    assert trainer.state.global_step == 3 and generated == [16] and micro == [4]


def test_prompt_index_maps_prompts_back_to_rows():
    rows = [
        Row(0, [{"role": "user", "content": "a"}], {"k": 0}),
        Row(1, [{"role": "user", "content": "b"}], {"k": 1}),
        Row(2, [{"role": "user", "content": "a"}], {"k": 2}),
    ]
    index = PromptIndex(rows)
    assert index.ambiguous == 2
    # Arrow adds None-valued keys to messages that lack a key another message has
    assert index.row_for([{"role": "user", "content": "b", "name": None}]).id == 1
    # rows sharing a prompt are taken in turn
    assert [index.row_for([{"role": "user", "content": "a"}]).id for _ in range(3)] == [0, 2, 0]


# ---- multi-turn training ------------------------------------------------------------------------


@pytest.mark.slow
def test_multiturn_alphabet_sort_trains_and_masks_environment_tokens(tmp_path):
    cfg = small_cfg(
        "alphabet_sort",
        "env.min_turns=2",
        "trainer.max_steps=2",
        "trainer.max_completion_length=512",
        "generation.max_tokens_per_turn=12",
    )
    env = build_env(cfg.env, cfg.language)
    logs = LogCapture()
    bundle = build_trainer(cfg, env, tmp_path, callbacks=[logs])
    bundle.trainer.train()
    assert bundle.trainer.state.global_step == 2
    assert [log["step"] for log in logs.logs] == [1, 2]

    rollouts = bundle.rollout.last_rollouts  # the batch of step 2
    assert len(rollouts) == 8
    # TRL counts completion length over model tokens only (the env mask is its tool mask)
    model_tokens = [sum(r.env_mask) for r in rollouts]
    assert logs.logs[-1]["completions/mean_length"] == pytest.approx(sum(model_tokens) / len(model_tokens))
    assert sum(model_tokens) < sum(len(r.completion_ids) for r in rollouts)

    # token by token on one multi-turn rollout: mask-1 spans are the model's turns, mask-0 spans
    # exactly the text the chat template puts between them (end of turn, user turn, next prompt)
    rollout = next(r for r in rollouts if r.num_turns >= 2)
    assert_env_mask_follows_the_template(rollout, bundle.tokenizer, cfg.model.chat_template_kwargs)


# ---- reward wiring ------------------------------------------------------------------------------


def _text(completion) -> str:
    turns = assistant_turns(completion)
    return turns[-1] if turns else ""


def even_length(completion=None, **_):
    return float(len(_text(completion)) % 2 == 0)


def only_even_rows(completion=None, info=None, **_):
    """Applies to even rows only: None (not applicable) for odd ones."""
    if info["row"] % 2:
        return None
    return min(1.0, len(_text(completion)) / 40)


class WiredEnv(CharTargetEnv):
    """char_target with two more reward functions, one of them not applicable to odd rows."""

    name = "wired"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rubric = Rubric(
            [
                RewardFunc("target_char_fraction", self._fraction, 1.0),
                RewardFunc("even_length", even_length, 0.5),
                RewardFunc("only_even_rows", only_even_rows, 2.0),
            ]
        )

    def make_row(self, rng, index, split):
        row = super().make_row(rng, index, split)
        row.info["row"] = index
        return row


def test_reward_functions_reach_trl_named_and_weighted(tmp_path):
    cfg = small_cfg(
        "char_target",
        "trainer.per_device_batch_completions=16",
        "trainer.log_completions=true",
        "trainer.max_steps=1",
    )
    wired = {"_target_": "test_train.WiredEnv", "name": "wired"}
    env = packaged_env("char_target", **wired, num_train_examples=64, num_eval_examples=4)
    logs = LogCapture()
    bundle = build_trainer(cfg, env, tmp_path, callbacks=[logs])
    assert bundle.trainer.reward_func_names == ["target_char_fraction", "even_length", "only_even_rows"]
    assert bundle.trainer.reward_weights.tolist() == [1.0, 0.5, 2.0]
    bundle.trainer.train()
    (log,) = logs.logs

    table = pd.read_parquet(tmp_path / "checkpoints" / "completions" / "completions_00001.parquet")
    assert len(table) == 16
    rows = {row.id: row for row in env.rows("train")}
    infos = [r.row.info for r in bundle.rollout.last_rollouts]
    assert {i["row"] % 2 for i in infos} == {0, 1}, (
        "the batch should mix rows the function applies to and not"
    )
    for (_, logged), info in zip(table.iterrows(), infos, strict=True):
        completion = list(logged["completion"])
        assert rows[info["row"]].info == info
        assert logged["target_char_fraction"] == pytest.approx(
            env._fraction(completion=completion, info=info)
        )
        assert logged["even_length"] == even_length(completion=completion)
        expected = only_even_rows(completion=completion, info=info)
        if expected is None:
            assert math.isnan(logged["only_even_rows"])  # TRL: None -> NaN, left out below
        else:
            assert logged["only_even_rows"] == pytest.approx(expected)

    for name in ("target_char_fraction", "even_length", "only_even_rows"):
        assert log[f"rewards/{name}/mean"] == pytest.approx(table[name].mean(skipna=True), abs=1e-6)
    total = (
        1.0 * table["target_char_fraction"]
        + 0.5 * table["even_length"]
        + 2.0 * table["only_even_rows"].fillna(0.0)
    )
    assert log["reward"] == pytest.approx(total.mean(), abs=1e-6)


# ---- reference model, LoRA, loss presets --------------------------------------------------------


def test_beta_builds_a_frozen_reference_copy(tmp_path):
    cfg = small_cfg("char_target", "trainer.beta=0.04", "trainer.max_steps=2", "optimizer.lr=1e-2")
    model, tokenizer = load_policy(cfg.model)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    logs = LogCapture()
    bundle = build_trainer(
        cfg, build_env(cfg.env, cfg.language), tmp_path, model=model, tokenizer=tokenizer, callbacks=[logs]
    )
    trainer = bundle.trainer
    assert trainer.ref_model is not None and trainer.ref_model is not trainer.model
    # a random-weight policy is saved first so TRL can load the reference copy from disk
    assert (tmp_path / "initial_model" / "config.json").is_file()
    assert trainer.model.name_or_path == trainer.model.config._name_or_path == str(tmp_path / "initial_model")
    trainer.train()
    ref = trainer.ref_model.state_dict()
    assert all(torch.equal(ref[k], initial[k]) for k in initial)
    assert not all(torch.equal(trainer.model.state_dict()[k], initial[k]) for k in initial)
    assert logs.logs[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # step 1: policy == reference
    assert logs.logs[1]["kl"] > 0


def test_lora_reference_is_the_adapter_disabled_base(tmp_path):
    from peft import PeftModel

    cfg = small_cfg(
        "char_target",
        "model.lora.enabled=true",
        "model.lora.r=4",
        "model.lora.alpha=8",
        "trainer.beta=0.04",
        "trainer.max_steps=2",
        "optimizer.lr=5e-2",
    )
    model, tokenizer = load_policy(cfg.model)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    logs = LogCapture()
    bundle = build_trainer(
        cfg, build_env(cfg.env, cfg.language), tmp_path, model=model, tokenizer=tokenizer, callbacks=[logs]
    )
    trainer = bundle.trainer
    assert isinstance(trainer.model, PeftModel)
    assert trainer.ref_model is None  # no second copy: the reference is the policy, adapters off
    assert list(trainer.model.peft_config) == ["default"]
    assert not (tmp_path / "initial_model").exists()
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    trainer.train()
    result_base = trainer.model.get_base_model().state_dict()
    unwrapped = {k.replace(".base_layer", ""): v for k, v in result_base.items() if "lora_" not in k}
    assert unwrapped.keys() == base.keys()
    assert all(torch.equal(unwrapped[k], v) for k, v in base.items())  # LoRA never changes the base
    assert logs.logs[1]["kl"] > 0  # the adapter moved the policy away from the base


@pytest.mark.parametrize(
    ("override", "loss_type"),
    [("trainer=dr_grpo", "dr_grpo"), ("trainer=dapo", "dapo"), ("trainer.loss_type=bnpo", "bnpo")],
)
def test_each_loss_type_trains_a_step(override, loss_type, tmp_path):
    cfg = small_cfg("char_target", override, "trainer.beta=0")
    logs = LogCapture()
    result = train(cfg, build_env(cfg.env, cfg.language), tmp_path, callbacks=[logs])
    assert result.global_step == 1
    assert math.isfinite(logs.logs[0]["loss"])
    assert result.checkpoint_dir == Path(tmp_path) / "checkpoints" / "checkpoint-1"  # the final save


def test_rollout_func_rejects_misaligned_groups():
    env = packaged_env("char_target", num_train_examples=4, num_eval_examples=1)
    rows = env.rows("train")
    settings = load_settings(["+env=char_target"])
    func = EnvRolloutFunc(
        env, PromptIndex(rows), tokenizer=None, gen_cfg=settings.generation, model_cfg=settings.model
    )
    assert [r.id for r in func._rows([rows[0].prompt] * 2 + [rows[1].prompt] * 2, 2)] == [0, 1]
    with pytest.raises(RuntimeError, match="not a multiple of the group size"):
        func._rows([rows[0].prompt] * 3, 2)
    with pytest.raises(RuntimeError, match="group whose prompts differ"):
        func._rows([rows[0].prompt, rows[1].prompt], 2)


def test_rubric_adapter_values_and_per_language_metrics():
    from grpo.rewards import RubricReward, rubric_reward_funcs

    def scorer(completion=None, info=None, state=None, **_):
        value = info["value"]
        if value == "raise":
            raise ValueError("garbage")
        return value

    (reward,), weights = rubric_reward_funcs([RewardFunc("my_reward", scorer, 0.3)])
    assert isinstance(reward, RubricReward) and reward.__name__ == "my_reward" and weights == [0.3]
    logged: list[tuple[str, float]] = []
    values = [0.25, None, "raise", float("nan"), 7.0, -1.0]
    out = reward(
        prompts=[[{"role": "user", "content": "q"}]] * 6,
        completions=[[{"role": "assistant", "content": "flattened by TRL"}]] * 6,
        rollout_completion=[[{"role": "assistant", "content": "a"}]] * 6,
        rollout_state=[{}] * 6,
        row_info=[{"value": v} for v in values],
        language=["en", "en", "de", "de", "de", "de"],
        log_metric=lambda name, value: logged.append((name, value)),
    )
    # None passes through (TRL: not applicable); errors / NaN -> 0; values clipped to [0, 1]
    assert out == [0.25, None, 0.0, 0.0, 1.0, 0.0]
    # one completion raised ("garbage"): counted, then the per-language means
    assert logged == [
        ("rewards/my_reward/errors", 1.0),
        ("rewards/my_reward/de/mean", 0.25),
        ("rewards/my_reward/en/mean", 0.25),
    ]

    seen = []
    (plain,), _ = rubric_reward_funcs(
        [RewardFunc("plain", lambda completion=None, **_: seen.append(completion) or 1.0)]
    )
    assert plain(prompts=["p"], completions=["text"]) == [1.0]  # outside our rollout_func
    assert seen == [[{"role": "assistant", "content": "text"}]]
    with pytest.raises(UserError, match="repeated: x"):
        rubric_reward_funcs([RewardFunc("x", scorer), RewardFunc("x", scorer)])


def test_char_target_env():
    env = build_env(load_settings(["+env=char_target", "seed=3"]).env, "en")
    rows = env.rows("train", 50)
    assert [r.prompt for r in rows] == [
        r.prompt for r in build_env(load_settings(["+env=char_target", "seed=3"]).env, "en").rows("train", 50)
    ]
    assert [r.prompt for r in rows] != [r.prompt for r in env.rows("eval", 50)]
    assert len({str(r.prompt) for r in rows}) == 50  # prompts identify their rows
    row = rows[0]
    assert env.score(row, env.reference_completion(row)) == {"target_char_fraction": 1.0}

    def score(text):
        return env.score(row, [{"role": "assistant", "content": text}])["target_char_fraction"]

    assert score("ab1") == 2 / 8  # short answers count as padded to min_length=8
    assert score("abcdefghi!") == 9 / 10
    assert score("Hello world") == 10 / 11  # the capital is not in the default set, the space is
    assert score("") == 0.0 and env.score(row, [])["target_char_fraction"] == 0.0
    assert env.score(row, [{"role": "assistant", "content": None}])["target_char_fraction"] == 0.0
    with pytest.raises(UserError, match="env.target_chars"):
        packaged_env("char_target", target_chars="")
    with pytest.raises(UserError, match=r"env\.prompts\.sv: char_target has no prompts for language 'sv'"):
        packaged_env("char_target", language="sv")
