"""The schema of a run: one typed dataclass per config group, and the values each field allows.

The dataclasses are the one source of every default and of its comment. They are registered in
Hydra's ConfigStore as `grpo_schema`; conf/config.yaml starts from it and every group option file
(conf/<group>/<option>.yaml) holds only what that option changes, so a typo in an override
(`trainer.lrr=1`) or a wrong type (`eval.num_examples=abc`) fails at composition time. The `env`
group is typed `Any`: its keys are the arguments of the environment class it names.

`to_settings(cfg)` turns a composed DictConfig into these dataclasses (the `env` group becomes a
plain dict): stages and builders take those typed settings, never a DictConfig. Rules that span
fields live next to what they check, in grpo/<package>/checks.py (walked by grpo/cli/checks.py).

This module imports no other grpo module, and nothing heavy: it sits at the bottom of the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

# ---- allowed values (grpo/<package>/checks.py checks them; the builders map them) --------------------

STAGES = ("reward_model", "sft", "eval", "train")
MODEL_SOURCES = ("pretrained", "random")
# model.dtype spellings -> torch dtype name ("auto": the checkpoint's own)
DTYPES = {
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
# our optimizer name -> transformers `optim`
OPTIMIZERS = {"adamw": "adamw_torch", "sgd": "sgd", "adafactor": "adafactor", "adamw_8bit": "adamw_bnb_8bit"}
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo")
COLLAPSE_ACTIONS = ("rollback", "stop", "none")
SCALE_REWARDS = ("group", "batch", "none")
# transformers.SchedulerType values (kept literal so that validation imports no transformers;
# tests/test_validation.py checks the list against the installed transformers)
LR_SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
)
GENERATION_BACKENDS = ("hf", "openai", "vllm_colocate", "vllm_server")
# vLLM backends -> TRL's vllm_mode
VLLM_MODES = {"vllm_colocate": "colocate", "vllm_server": "server"}
TRACKING_BACKENDS = ("mlflow", "none")
REWARD_MODEL_KINDS = ("rubric", "learned", "ensemble", "learned_only")
REWARD_MODEL_COMBINES = ("mean", "min", "mean_minus_std")
# a learned RM's score against the row's reference episode (grpo/rewards/learned.py)
REWARD_MODEL_REFERENCES = ("cap", "relative", "none")
# who labels the pairs of a preference round (grpo/reward_model/labelers.py)
LABELERS = ("rubric", "judge")
# how a learned RM's raw Bradley-Terry score is normalised (grpo/reward_model/calibration.py)
REWARD_MODEL_NORMALIZATIONS = ("per_language", "global", "none")
# corruptions of a reference answer: small edits of a good answer ...
EDIT_CORRUPTIONS = ("swap", "drop", "duplicate", "format", "language")
# ... and hard negatives: how a policy's answers break down under optimisation (a fragment repeated to
# the token budget, an answer cut with its tag left open, the answer in another script, an empty
# answer, a copy of the prompt), which an RM trained on small edits alone has never seen
HARD_NEGATIVES = ("repeat", "unclosed", "script", "empty", "copy_prompt")
CORRUPTIONS = EDIT_CORRUPTIONS + HARD_NEGATIVES


# ---- model --------------------------------------------------------------------------------------


@dataclass
class LoraConfig:
    # train a LoRA adapter (peft) instead of every weight; the reference model is then the
    # adapter-disabled base
    enabled: bool = False
    # adapter rank; the update is scaled by alpha / r
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class ModelConfig:
    # preset name (conf/model/<name>.yaml)
    name: str = MISSING
    # pretrained: load `path` (hub id or local dir); random: build `architecture` with random weights
    source: str = "pretrained"
    # hub id or local dir of a pretrained model (source=pretrained only); or a grpo run folder
    # (outputs/runs/<day>/<time>), evaluated at its `checkpoint` (grpo/run/trained.py)
    path: str | None = None
    # model.path=<run folder>: final (its latest complete checkpoint) | best (by validation reward,
    # trainer.keep_best)
    checkpoint: str = "final"
    # a LoRA adapter dir (a LoRA run's checkpoint) merged into these weights when loaded; set by
    # model.path=<run folder> for a LoRA run, whose base weights these settings then describe
    adapter: str | None = None
    # Qwen3Config fields for source=random (hidden_size, num_hidden_layers, ...); vocab_size
    # defaults to the tokenizer's
    architecture: dict[str, Any] | None = None
    # tokenizer hub id or local dir; null = the model's own (pretrained) or the built-in offline one (random)
    tokenizer: str | None = None
    # float32 | bfloat16 | float16 | auto (the checkpoint's own)
    dtype: str = "float32"
    # run Python code shipped with the checkpoint (keep off unless you trust it)
    trust_remote_code: bool = False
    # extra kwargs for tokenizer.apply_chat_template, e.g. {enable_thinking: false} for Qwen3
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # the random weights (source=random) are a function of this seed only
    seed: int = 0
    lora: LoraConfig = field(default_factory=LoraConfig)


# ---- language -----------------------------------------------------------------------------------


@dataclass
class LanguageConfig:
    # ISO 639-1 code carried by every dataset row ("mix" for language=mix)
    code: str = "en"
    name: str = "English"
    # Unicode scripts (ISO 15924 names: Latin Han Hiragana Katakana Hangul Arabic Devanagari
    # Cyrillic) whose words count as this language in the consistency reward; Latin-script
    # languages are told apart by an offline language identifier, sentence by sentence
    scripts: list[str] = field(default_factory=lambda: ["Latin"])
    # ICU locale of the collation, e.g. sv_SE or zh@collation=pinyin; null with sort_key=codepoint
    icu_locale: str | None = None
    # how names sort: codepoint (plain Python order, alphabet-sort 0.1.5) | icu | icu_reading
    # (ICU order of the name's reading: ja kana)
    sort_key: str = "codepoint"
    # ICU strength: primary | secondary | tertiary | quaternary | identical
    collation_strength: str = "tertiary"
    # faker locale of the built-in given/family names; null = no built-in names
    name_locale: str | None = "en_US"
    # full names are written family name first (zh ja ko)
    family_first: bool = False
    # between the two parts of a full name ("" for zh ko and for en's "MarcoEllero")
    full_name_separator: str = " "
    # weight of the language-consistency reward; 0 disables it
    consistency_weight: float = 0.0
    # language=mix: {code: sampling weight}; empty for a single language
    mix: dict[str, float] = field(default_factory=dict)
    # language=mix: the languages to use, e.g. [en, zh] (a dict override merges into `mix` instead of
    # replacing it); null = every language of `mix`; a code missing from `mix` gets weight 1
    members: list[str] | None = None
    # language=mix: sample every language equally often, whatever its weight
    balance: bool = False


# ---- reward model -------------------------------------------------------------------------------


@dataclass
class RewardModelBackboneConfig:
    # preset name (conf/reward_model/backbone/<name>.yaml)
    name: str = "tiny"
    # random: a Qwen3 sequence-classification model built from `architecture` with random weights and
    # a tokenizer trained on the training pairs (see tokenizer_vocab_size); pretrained: `path` (hub id or local dir) loaded with
    # AutoModelForSequenceClassification (a causal LM gets a new score head)
    source: str = "random"
    path: str | None = None
    # Qwen3Config fields for source=random (hidden_size, num_hidden_layers, ...); vocab_size = the
    # tokenizer's (plus the language tag tokens)
    architecture: dict[str, Any] | None = None
    # tokenizer hub id or local dir; null = the backbone's own (pretrained) or, for source=random, one
    # trained on the training pairs (tokenizer_vocab_size)
    tokenizer: str | None = None
    # source=random, tokenizer=null, >= 1000 training pairs: the RM's byte-level BPE is trained on the
    # pairs' text, up to this many tokens, so names and tags are whole tokens (sequences ~2x shorter,
    # training ~3x faster than with the built-in tokenizer; fewer pairs keep the built-in one, whose
    # name pieces a small set can teach); 0 = always the built-in tokenizer
    tokenizer_vocab_size: int = 8192
    dtype: str = "float32"
    trust_remote_code: bool = False
    # tokens of prompt + completion the RM reads; a longer conversation loses its middle
    max_length: int = 1024
    # the random weights (source=random) and the new score head are a function of this seed
    seed: int = 0


@dataclass
class RewardModelSyntheticConfig:
    # environment the pairs come from: a conf/env option name; null = the run's env
    env: str | None = None
    # preference pairs per language, each from its own env row: a from-scratch RM needs thousands
    # (they cost seconds to make)
    n: int = 2000
    # languages of the pairs; null = the run's language (language=mix: its members)
    languages: list[str] | None = None
    # corruption strength of the rejected answer in [0, 1]: 0 = one small change, 1 = most of it broken
    severity: float = 0.5
    # corruption kinds drawn for the rejected answer (any of CORRUPTIONS)
    corruptions: list[str] = field(default_factory=lambda: list(CORRUPTIONS))


@dataclass
class RewardModelDataConfig:
    # a preference JSONL file (or a dir of *.jsonl): {prompt|instruction, chosen, rejected, language}
    # per line; null = synthetic pairs from an environment
    path: str | None = None
    synthetic: RewardModelSyntheticConfig = field(default_factory=RewardModelSyntheticConfig)
    # share of each language's pairs held out for accuracy and normalisation statistics
    heldout_fraction: float = 0.2
    # the train / held-out split and the synthetic corruptions are a function of this seed
    seed: int = 0


@dataclass
class RewardModelTrainingConfig:
    # the tiny random backbone's rate (pretrained backbone presets set their own)
    lr: float = 2e-3
    # passes over the training pairs (ignored when max_steps > 0)
    epochs: float = 1.0
    # optimizer steps; -1 = from epochs
    max_steps: int = -1
    # per-device micro-batch counted in PAIRS (each pair is two sequences: chosen and rejected)
    batch_size_pairs: int = 8
    gradient_accumulation_steps: int = 1
    weight_decay: float = 0.0
    # warmup length: a fraction of the steps when < 1, a number of optimizer steps when >= 1
    warmup: float = 0.05
    # any transformers SchedulerType
    lr_scheduler: str = "linear"
    max_grad_norm: float = 1.0
    # mean-zero reward regulariser of Eisenstein et al. 2023 (TRL center_rewards_coefficient); null = off
    center_rewards_coefficient: float | None = None
    # optimizer steps between logged training metrics (rm/train/...)
    logging_steps: int = 10
    bf16: bool = False
    # recompute activations in the backward pass: less memory, ~20-30% slower (large backbones)
    activation_checkpointing: bool = False
    # completions per forward pass when scoring (held-out accuracy, calibration, GRPO rewards)
    score_batch_size: int = 64
    # any other trl.RewardConfig field, passed through as is
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardModelConditioningConfig:
    # prefix every sequence with a language tag token <lang:xx> (one added token per language)
    tag_token: bool = True
    # one scalar score head per language (the row's language picks it) instead of one shared head
    per_language_heads: bool = False


@dataclass
class RewardModelGuardsConfig:
    # trainer.beta of a run whose GRPO reward holds a learned RM, where trainer.beta is lower (said in
    # one line): the KL anchor keeps the policy near its start, where the RM's judgments were
    # learned; null = trainer.beta as set
    kl_beta: float | None = 0.04
    # the RM score against the row's reference episode (the env's reference_completion, scored by
    # the same RM): cap = min(score, reference's) (nothing is gained by scoring above a known-good
    # answer, which is where RM hacks win) | relative = score - reference's (a per-prompt offset:
    # under group-scaled advantages it changes nothing, it matters with scale_rewards=batch or when
    # mixed with rewards scaled elsewhere) | none = the score as is
    reference: str = "cap"


@dataclass
class JudgeConfig:
    # an OpenAI-compatible chat endpoint (.../v1) and the model it serves
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "judge"
    # environment variable holding the API key (none needed when unset)
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    max_tokens: int = 8


@dataclass
class RewardModelRoundsConfig:
    # GRPO steps between preference rounds on the policy's own samples (and one before the first
    # step); 0 = no rounds (the RM stays as trained)
    every: int = 40
    # rubric (the env's rubric stands in for human annotators) | judge (a model behind an
    # OpenAI-compatible endpoint, asked which of two answers is better, in the pair's language)
    labeler: str = "rubric"
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    # policy completions sampled per train prompt; with the reference episode they form the pairs
    samples_per_prompt: int = 4
    # pairs labelled per round, at most (the labels a round costs; ties are labelled and dropped)
    label_budget: int = 256
    # RM optimizer steps per round, over the new pairs together with the pairs it had
    steps: int = 100
    # the RM's learning rate in rounds; null = reward_model.training.lr
    lr: float | None = None


@dataclass
class RewardModelConfig:
    # rubric (env rewards only) | learned (one RM + rubric) | ensemble (several RMs + rubric) |
    # learned_only (RM(s) count, the rubric is only logged)
    kind: str = "rubric"
    # multiplies the environment's own rubric weights (0: the rubric is logged but does not count)
    rubric_weight: float = 1.0
    # trained RM dirs (a reward_model stage's output); empty = this run's reward_model stage output
    checkpoints: list[str] = field(default_factory=list)
    # weight of the (combined) normalised RM score in the GRPO reward (unit: standard deviations of
    # the RM's reference set; raw score units with normalization=none)
    weight: float = 1.0
    # how each RM's raw Bradley-Terry score is normalised with its rm_calibration.json (held-out
    # reference set), wherever the score is used (GRPO reward, rm_* columns, ensemble combination,
    # evaluation score columns): per_language (s - mean_lang) / std_lang, the default, as BT offsets
    # differ per language (a language without statistics gets no score) | global (s - mean) / std
    # pooled over all languages, any language | none (the raw score)
    normalization: str = "per_language"
    # how ensemble members' normalised scores combine: mean_minus_std (mean - k * std: where the
    # members disagree the reward is discounted, the conservative default) | mean | min
    combine: str = "mean_minus_std"
    # std multiplier of combine=mean_minus_std (lambda)
    k: float = 1.0
    guards: RewardModelGuardsConfig = field(default_factory=RewardModelGuardsConfig)
    rounds: RewardModelRoundsConfig = field(default_factory=RewardModelRoundsConfig)
    backbone: RewardModelBackboneConfig = field(default_factory=RewardModelBackboneConfig)
    data: RewardModelDataConfig = field(default_factory=RewardModelDataConfig)
    training: RewardModelTrainingConfig = field(default_factory=RewardModelTrainingConfig)
    conditioning: RewardModelConditioningConfig = field(default_factory=RewardModelConditioningConfig)


# ---- optimisation -------------------------------------------------------------------------------


@dataclass
class OptimizerConfig:
    # adamw | sgd | adafactor | adamw_8bit (bitsandbytes, CUDA GPU only)
    name: str = "adamw"
    # peak learning rate (after warmup); 1e-6 is the usual full-fine-tuning RL rate (the tiny model
    # needs ~1e-3 to move)
    lr: float = 1e-6
    weight_decay: float = 0.0
    # Adam beta1, beta2 (adamw, adamw_8bit)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    # SGD heavy-ball momentum (sgd only); 0 = plain SGD
    momentum: float = 0.0
    # clip the global gradient norm to this value; 0 disables clipping
    max_grad_norm: float = 1.0
    # any transformers SchedulerType: constant, constant_with_warmup, linear, cosine, ...
    lr_scheduler: str = "constant_with_warmup"
    # warmup length: a fraction of max_steps when < 1, a number of optimizer steps when >= 1
    warmup: float = 0.0


@dataclass
class TrainerConfig:
    # preset name (grpo | dr_grpo | dapo); the fields below are what TRL receives
    name: str = "grpo"
    # completions sampled per prompt: the group whose rewards are compared (G)
    num_generations: int = 4
    # completions per optimizer step, all processes together (prompts per step x num_generations):
    # the generation batch, sampled with one set of weights and trained on in one step; null =
    # per_device_batch_completions x gradient_accumulation_steps x processes (grpo/train/geometry.py)
    completions_per_step: int | None = None
    # the micro-batch: completions per forward/backward on each process, what memory allows (a
    # multiple of num_generations; prompts per micro-batch = this / num_generations)
    per_device_batch_completions: int = 8
    # micro-batches per optimizer step on each process; null = completions_per_step /
    # (per_device_batch_completions x processes), or 1 without completions_per_step
    gradient_accumulation_steps: int | None = None
    # optimizer steps of the run
    max_steps: int = 8
    # how token losses are aggregated (TRL loss_type): grpo | dr_grpo | dapo | bnpo | cispo | sapo
    loss_type: str = "grpo"
    # KL coefficient against the reference model (the adapter-disabled base under LoRA); a reference
    # model is only built when > 0
    beta: float = 0.04
    # PPO clip range: the probability ratio is clipped to [1 - epsilon, 1 + epsilon_high]
    epsilon: float = 0.2
    # DAPO clip-higher upper range; null = epsilon
    epsilon_high: float | None = None
    # advantage = (reward - group mean) / std, with std of the group | batch; none = no division (Dr. GRPO)
    scale_rewards: str = "group"
    # optimisation passes over each generated batch (mu); > 1 reuses rollouts with importance ratios
    num_iterations: int = 1
    # sampling temperature and nucleus of training rollouts
    temperature: float = 1.0
    top_p: float = 1.0
    # tokens of the whole completion: every model turn AND the environment turns between them
    max_completion_length: int = 1024
    # truncated completions get no gradient (TRL's DAPO overlong masking): those whose last model turn
    # was cut by a token limit (it does not end with EOS). Their reward still counts in their group's
    # mean and std (see truncated_reward)
    mask_truncated_completions: bool = True
    # the training reward of a truncated completion (a model turn cut by a token limit, Rollout.truncated),
    # from every reward function that counts (weight != 0; a weight-0 metric is logged as it scores, as
    # in evaluation): 0 = an answer the model did not end earns nothing, so the completions
    # that end get the advantage and EOS is rewarded; null = scored as it stands (a rubric that reads
    # the answer block and ignores what follows then pays a cut, junk-filled completion like an ended
    # one, and GRPO teaches the policy to stop ending its answers). Evaluation scores as the env does
    truncated_reward: float | None = 0.0
    # optimizer steps between metric logs / between checkpoints (a final checkpoint is always written)
    logging_steps: int = 1
    save_steps: int = 50
    # checkpoints kept under <run_dir>/checkpoints (oldest deleted first); null keeps all
    save_total_limit: int | None = 2
    # bf16 mixed precision: on for GPUs, off on CPU
    bf16: bool = False
    # recompute each layer's activations in the backward pass: the micro-batch's activations shrink
    # to the layers' inputs (the memory plan says by how much), the backward does a second forward
    gradient_checkpointing: bool = False
    # also write each logged batch's completions and per-function rewards to
    # <run_dir>/checkpoints/completions/*.parquet
    log_completions: bool = False
    seed: int = 0
    # validation during training: every eval_steps optimizer steps (0 = off) the current policy is
    # evaluated on a fixed held-out subset of the env's eval split, val_num_examples x
    # val_rollouts_per_example rollouts (sampled as eval.*), logged as val/... at the global step
    eval_steps: int = 0
    val_num_examples: int = 8
    val_rollouts_per_example: int = 2
    # keep the checkpoint with the best validation reward (marked; save_total_limit never deletes it)
    keep_best: bool = False
    # a collapse (loss, KL, reward, truncated / wrong-language / repeated shares jumping together,
    # grpo/train/collapse.py): rollback = back to the last calm policy and on at a lower lr; stop =
    # back to it and stop there; none = say so and go on (the run ends on its last policy)
    on_collapse: str = "rollback"
    # rollback's remedy: the learning rate times this at each rollback
    collapse_lr_factor: float = 0.5
    # rollbacks before a further collapse stops the run (as on_collapse=stop)
    collapse_max_rollbacks: int = 2
    # any other trl.GRPOConfig field, as is, e.g. {top_entropy_quantile: 0.2, importance_sampling_level: sequence}
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class DemonstratorConfig:
    """Who writes the synthesised demonstrations: by default the run's own env (its reference
    episodes, what the rubric scores 1.0). Set either field and they come from a differently
    configured env instead, a demonstrator that is wrong in a known way, while GRPO and every
    evaluation still score with the run's env."""

    # env arguments merged over the run's env for the demonstrations only, e.g. {collation: codepoint}
    # (on the command line: +sft.demonstrator.env.collation=codepoint; alphabet_sort: names in
    # code-point order, what Python's sorted() gives, not the language's rule)
    env: dict[str, Any] = field(default_factory=dict)
    # the demonstrations' language (a code of conf/language, or mix); null = the run's
    language: str | None = None


@dataclass
class SftConfig:
    # demonstrations: a JSONL file (or a dir of *.jsonl) of conversations, {"messages": [...],
    # "language": optional} per line; null = synthesised from the run's env (the reference episodes
    # of its train rows, environment turns included; language=mix: each row in its own language)
    data_path: str | None = None
    # demonstrations synthesised from the env: its first n train rows
    num_examples: int = 1000
    # synthesised demonstrations per language instead (scarce native data): N for every language of
    # the run (language=mix: each member), or {code: N} (a language left out gets none); the first
    # train rows of each language are taken. null = num_examples rows in the mix's proportions
    num_examples_per_language: Any = None
    # who writes the synthesised demonstrations (DemonstratorConfig); the default is the run's env
    demonstrator: DemonstratorConfig = field(default_factory=DemonstratorConfig)
    # passes over the demonstrations (ignored when max_steps > 0)
    epochs: float = 1.0
    # optimizer steps; -1 = from epochs
    max_steps: int = -1
    lr: float = 2e-5
    # per-device micro-batch counted in conversations
    batch_size: int = 8
    gradient_accumulation_steps: int = 1
    weight_decay: float = 0.0
    # warmup length: a fraction of the steps when < 1, a number of optimizer steps when >= 1
    warmup: float = 0.0
    # any transformers SchedulerType
    lr_scheduler: str = "linear"
    max_grad_norm: float = 1.0
    # tokens of one conversation (prompt + completion); longer ones are cut at the end
    max_length: int = 1024
    # padding-free batches: the micro-batch's conversations back to back in one row, no padding
    # tokens, each attending only to itself (grpo/models/packed_attention.py); the same per-token
    # losses and batches as padded ones, fewer tokens through the linear layers. false = padded
    padding_free: bool = True
    # train a LoRA adapter (model.lora's r, alpha, dropout, target_modules) and merge it into the
    # saved weights, instead of every weight
    lora: bool = False
    # optimizer steps between logged metrics (sft/loss, sft/mean_token_accuracy)
    logging_steps: int = 10
    bf16: bool = False
    seed: int = 0
    # any other trl.SFTConfig field, passed through as is
    extra: dict[str, Any] = field(default_factory=dict)


# ---- generation, tracking, evaluation -----------------------------------------------------------


@dataclass
class GenerationConfig:
    # hf | openai (evaluation only: text, no token ids) | vllm_colocate | vllm_server
    backend: str = "hf"
    # new tokens of one model turn, at most (the whole completion: trainer.max_completion_length)
    max_tokens_per_turn: int = 128
    # hf: conversations per generate() call (1 = one at a time); null = all active conversations at once
    batch_size: int | None = None
    # hf: keep each conversation's KV cache from one model turn to its next, so a turn encodes only
    # the tokens added since (the env's reply), not the whole conversation again. Used when one
    # generate() call holds every active conversation (batch_size null, no lockstep)
    reuse_kv_cache: bool = True
    # hf: a static KV cache per generate() call (the longest conversation rounded up to 256 positions,
    # the batch padded to a power of two), so transformers compiles the decode step into CUDA graphs;
    # each turn then encodes its whole conversation. null = on for a model on a CUDA GPU, off on CPU
    # (no graphs there); true / false force it
    static_cache: bool | None = None
    # openai / vllm_server endpoint, e.g. http://127.0.0.1:8000/v1 (vllm_server: overrides host/port);
    # hf with num_batches_ahead > 0: a running `python -m grpo.serve` to generate on (its root URL,
    # http://HOST:PORT), instead of the generator process the run starts itself
    base_url: str | None = None
    # openai: the served model name (required there)
    model: str | None = None
    # NAME of the environment variable holding the API key (never the key itself); null = no auth
    api_key_var: str | None = None
    # openai: requests in flight at once (every conversation of a turn is sent together)
    max_concurrency: int = 32
    # openai: seconds one request may take before it is retried / fails; vllm_server and the
    # generator of num_batches_ahead > 0: seconds to wait for the server to come up
    timeout_s: float = 120.0
    # openai: retries on connection errors, timeouts, HTTP 429 and 5xx, with exponential backoff
    max_retries: int = 3
    # vllm_server
    host: str = "127.0.0.1"
    port: int = 8000
    # vllm_colocate: share of GPU memory vLLM may take (weights + KV cache)
    gpu_memory_utilization: float = 0.3
    # vllm_colocate on vLLM's CPU build: GiB of memory for its KV cache (VLLM_CPU_KVCACHE_SPACE);
    # null = $VLLM_CPU_KVCACHE_SPACE if set, else sized from the run (its conversations x the
    # model's context, at most a quarter of the machine), said in one line
    vllm_cpu_kv_cache_gb: int | None = None
    # hf, several processes: every rank makes the same number of generate() calls per turn (ranks
    # whose episodes ended run idle turns), which a collective generate needs; null = when the
    # parameters are sharded (FSDP, ZeRO-3 without ds3_gather_for_generation), true / false force it
    lockstep: bool | None = None
    # backend extras: openai sends them in every request body (e.g. top_k for a vLLM server);
    # vllm_colocate reads max_model_length, tensor_parallel_size
    extra: dict[str, Any] = field(default_factory=dict)
    # ---- generation apart from training (the train stage; the Environments Hub recipe's names) ----
    # generation batches made ahead of training: 0 = synchronous (each step generates its own
    # rollouts in the trainer, then trains on them); 1 = the rollouts of step k+1 are generated while
    # step k trains, on a generator process apart from the trainer (hf: grpo's policy server, started
    # by the run or at base_url; vllm_server: the vLLM server), with the generator's sampling
    # logprobs correcting the loss for the lag (truncated importance sampling)
    num_batches_ahead: int = 0
    # episodes in flight at once on the generator: a batch's episodes go to it in chunks of this many
    max_concurrent: int = 1024
    # seconds the trainer waits for a generation batch; past it: one line, a checkpoint, exit code 3
    async_generation_timeout: float = 300.0
    # optimizer steps between two pushes of the trainer's weights to the generator
    weight_sync_steps: int = 1
    # a batch generated with weights older than this many optimizer steps is dropped (async/dropped)
    # and generated again with the current weights; must be >= num_batches_ahead
    max_off_policy_steps: int = 4
    # CPU threads of the generator process the run starts (generation=hf, no base_url); the trainer
    # keeps the machine's other cores. null = half the cores (at least one each)
    generator_threads: int | None = None


@dataclass
class TrackingConfig:
    # mlflow | none
    backend: str = "none"
    # null = $MLFLOW_TRACKING_URI if set, else sqlite:///<absolute output_root>/mlflow.db (no server);
    # or a sqlite:///path.db / http://host:port tracking server
    uri: str | None = None
    # null = one experiment per environment: "grpo-<env name>"
    experiment: str | None = None
    # null = what ran, on what, and the overrides that differ: `train alphabet_sort sv · lr=1e-5 steps=200`
    # (a sweep job: the overrides that vary between its jobs); the whole command line is the tag grpo.overrides
    run_name: str | None = None
    # where the MLflow UI is, for the links a run prints; null = the tracking server itself (an http
    # uri), or http://127.0.0.1:5000 for a SQLite store (`mlflow ui`'s default; another host / port:
    # tracking.ui_url=http://HOST:PORT)
    ui_url: str | None = None
    # artifact root of a NEW experiment (fixed at its creation); null = <dir of the SQLite db>/mlartifacts/
    # <experiment> for a SQLite store, the server's own choice for a tracking server
    artifact_location: str | None = None
    # evaluation rollouts logged as a table of sample completions with their rewards (0 = none)
    log_samples: int = 16
    # GRPO training: rows of the completions table per logging step (train/completions.json: step, language,
    # prompt, completion, reward, each function's score, advantage, model tokens; a few per language; 0 = none)
    log_completions: int = 8
    # PNG plots at the end of a run: reward and KL over steps, baseline vs final eval per reward function
    log_plots: bool = True
    # MLflow's system metrics (system/cpu_utilization_percentage, memory, disk, network; GPU when a GPU
    # and pynvml are present), sampled every system_metrics_interval seconds by rank 0
    system_metrics: bool = True
    system_metrics_interval: float = 10.0
    # log the trained models through MLflow's transformers flavour, with tokenizer and chat template:
    # the final policy (its LoRA adapter, or full weights) and a reward model the run trained
    log_model: bool = False
    # register them in the MLflow model registry: the policy as <name>, the reward model as
    # <name>-reward-model (implies log_model); null = not registered
    register_as: str | None = None


@dataclass
class EvalConfig:
    # n examples x r rollouts, as vf-eval -n / -r: the first n rows of the env's eval split (the same
    # rows for the same env seed), each rolled out r times
    num_examples: int = 5
    rollouts_per_example: int = 3
    # sampling of evaluation rollouts (temperature 0 = greedy); tokens per model turn come from
    # generation.max_tokens_per_turn, the whole completion's budget from trainer.max_completion_length
    temperature: float = 1.0
    top_p: float = 1.0
    # seeds the evaluation sampling: the same seed gives the same rollouts (hf backend); null = unseeded
    seed: int | None = 0
    # print the per-example rewards table (rows = examples, columns = rollout index r0..r{r-1})
    show_examples: bool = True
    # also save each evaluation as a Hugging Face dataset (save_to_disk) in <eval dir>/dataset, with
    # vf-eval's columns: results.jsonl's plus answer and task, info as JSON text (grpo/evaluation/dataset.py)
    save_dataset: bool = False
    # push that dataset to this Hub dataset repo (namespace/name), one split per evaluation label
    # (baseline, final, ...); saves it first (implies save_dataset). null = no push
    push_to_hub: str | None = None
    # the pushed repo is private unless false
    hub_private: bool = True
    # the environment variable holding the Hub token; unset = huggingface_hub's saved login
    hub_token_env: str = "HF_TOKEN"


@dataclass
class ServeConfig:
    # `python -m grpo.serve`: the policy server (grpo/serve/). 127.0.0.1 unless told otherwise;
    # any other host needs api_key_var
    host: str = "127.0.0.1"
    # 0 = a free port (printed at start-up)
    port: int = 8000
    # NAME of the environment variable holding the key clients must send (never the key itself);
    # null = no key (loopback only)
    api_key_var: str | None = None
    # the model id the server answers to on /v1/models (null: model.name)
    model_name: str | None = None
    # what one request may ask for (more: a 400 with the reason), and the batching
    max_prompt_tokens: int = 4096
    max_tokens: int = 1024
    max_batch: int = 32
    max_pending: int = 256
    batch_window_ms: float = 5.0
    # torch CPU threads of the server (null: torch's default, every core)
    threads: int | None = None
    # the server exits when the process with this pid is gone (a training run's generator never
    # outlives its trainer); null = it runs until Ctrl-C / SIGTERM
    parent_pid: int | None = None


@dataclass
class MemoryConfig:
    # the memory plan of the run (grpo/memory/): what each stage holds on the device at its peak,
    # measured on the run's real step under PyTorch's fake tensors before any model loads, printed
    # in the header; a run that cannot fit is refused. null = when the run is planned for a GPU (a
    # CUDA GPU is visible, or device_gib is set); true = also on CPU (against the host's memory);
    # false = never
    plan: bool | None = None
    # GiB of the device the run is planned for; null = the device's own (the first CUDA GPU, else
    # the host's memory). Set it to plan a GPU you do not have here (24, 48, 80, 141)
    device_gib: float | None = None
    # GiB the plan cannot see and keeps free on a GPU: the CUDA context and kernels (~0.5-1 GiB),
    # the caching allocator's fragmentation
    reserve_gib: float = 1.5


@dataclass
class GrpoConfig:
    # what the entry point does, in order: reward_model (train an RM), sft (supervised warm start on
    # demonstrations), eval, train; an eval before train is the baseline, one after it the final
    # evaluation
    stages: list[str] = field(default_factory=lambda: ["eval", "train", "eval"])
    # feeds the env rows, the model's random init, sampling and the trainer (conf/config.yaml)
    seed: int = 0
    # a previous run's output dir (outputs/runs/...) to resume training from (its latest checkpoint)
    resume: str | None = None
    # resume= keeps the resumed run's settings and refuses overrides that change its optimisation or
    # data (grpo/run/resume.py); true applies them anyway
    resume_force: bool = False
    # where runs, sweeps and the MLflow store go (made absolute at start-up)
    output_root: str = "outputs"
    # the environment: `_target_` (its class) and the class's arguments
    env: Any = None
    model: ModelConfig = field(default_factory=ModelConfig)
    language: LanguageConfig = field(default_factory=LanguageConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    sft: SftConfig = field(default_factory=SftConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)


_schema_registered = False


def register_schema() -> None:
    """Store the schema in Hydra's ConfigStore, once per process (a store converts the whole
    dataclass tree again: ~25 ms a time, paid by every composition that asked)."""
    global _schema_registered
    from hydra.core.config_store import ConfigStore

    if not _schema_registered or "grpo_schema.yaml" not in ConfigStore.instance().repo:
        ConfigStore.instance().store(name="grpo_schema", node=GrpoConfig)
        _schema_registered = True


def to_settings(cfg: Any) -> GrpoConfig:
    """The typed settings of a composed config: every group as its dataclass, interpolations
    resolved, `env` as a plain dict. Hydra's own `hydra` node (present in callbacks) is left out."""
    from omegaconf import OmegaConf, open_dict

    if "hydra" in cfg:
        cfg = cfg.copy()
        with open_dict(cfg):
            del cfg["hydra"]
    settings = OmegaConf.to_object(cfg)
    if not isinstance(settings, GrpoConfig):
        raise TypeError(f"expected a config composed on grpo_schema, got {type(settings).__name__}")
    return settings
