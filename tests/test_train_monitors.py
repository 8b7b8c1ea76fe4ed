"""Reward-hacking monitors (grpo/train/monitors.py): each metric on scripted rollouts of known
length, repetition, format and language; the environments' answer checks; and, on the real
trainer, the monitors reaching TRL's per-step log and the zero-signal hint printed once."""

from __future__ import annotations

import copy

import pytest
from helpers.packaged_env import packaged_env
from transformers import TrainerCallback

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.envs.base import Row
from grpo.languages.spec import spec_from_config
from grpo.rewards.consistency import language_monitor
from grpo.rollout import Rollout
from grpo.train.monitors import (
    TRUNCATION_CLIMB,
    ShortAnswerWatch,
    TruncationWatch,
    batch_monitors,
    repeated_ngrams,
    repetition,
    tokens_per_turn,
    truncated_shares,
    words,
)
from grpo.train.progress import truncation_hint, zero_signal_hint
from grpo.train.trainer import build_trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def assistant(text):
    return {"role": "assistant", "content": text}


def user(text):
    return {"role": "user", "content": text}


def rollout(completion, env_mask=(), language="en", row=None, info=None, truncated=False):
    """A scripted rollout: only what the monitors read is real (row, completion, env mask, cut)."""
    row = row or Row(id=0, prompt=[user("q")], info=dict(info or {}, language=language), language=language)
    return Rollout(
        row=row,
        rollout_index=0,
        completion=list(completion),
        state={},
        prompt_ids=[1],
        completion_ids=[7] * len(env_mask),
        env_mask=list(env_mask),
        logprobs=[0.0] * len(env_mask),
        truncated=truncated,
        cut_turns=int(truncated),
    )


# ---- the metrics, one by one ------------------------------------------------------------------------


def test_tokens_per_turn_counts_model_tokens_only():
    two_turns = rollout([assistant("a"), user("x"), assistant("b")], env_mask=[1, 1, 1, 0, 0, 1, 1])
    one_turn = rollout([assistant("c")], env_mask=[1, 1, 1, 1])
    assert tokens_per_turn([two_turns]) == 5 / 2
    # a batch ratio: 9 model tokens over 3 model turns (not the mean of 2.5 and 4)
    assert tokens_per_turn([two_turns, one_turn]) == 3.0
    assert tokens_per_turn([rollout([], env_mask=[])]) is None
    assert batch_monitors([two_turns, one_turn])["monitor/tokens_per_turn"] == 3.0


def test_repetition_is_the_share_of_repeated_ngrams_within_each_turn():
    assert words("The CAT, the cat! 42x") == ["the", "cat", "the", "cat", "42", "x"]
    # trigrams abc bca cab abc: the last repeats the first
    assert repeated_ngrams("a b c a b c") == (1, 4)
    assert repetition([assistant("a b c a b c")]) == 1 / 4
    assert repetition([assistant("The cat sat. the CAT sat")]) == 1 / 4  # case-folded
    # Han characters are words of their own: 你好 x3 -> 你好你 好你好 你好你 好你好
    assert repetition([assistant("你好你好你好")]) == 2 / 4
    assert repetition([assistant("one two three four")]) == 0.0
    # a later turn restating an earlier one is not repetition; n-grams pool over the turns
    assert repetition([assistant("x y z"), user("more"), assistant("x y z")]) == 0.0
    assert repetition([assistant("a b c a b c"), user("more"), assistant("d e f")]) == 1 / 5
    assert repetition([assistant("too short")]) is None
    assert repetition([assistant(None)]) is None

    degenerate = rollout([assistant("go " * 12)])  # 10 trigrams, 9 repeat the first
    fine = rollout([assistant("a b c d")])
    short = rollout([assistant("hi")])  # no trigram: left out of the mean
    assert batch_monitors([degenerate, fine, short])["monitor/repetition"] == pytest.approx((0.9 + 0.0) / 2)
    assert "monitor/repetition" not in batch_monitors([short])


# ---- format failure: the environments' answer checks ---------------------------------------------------


def test_alphabet_sort_answer_check_wants_every_turn_answered():
    env = packaged_env("alphabet_sort", min_turns=2, max_turns=2)
    row = env.rows("eval", 1)[0]
    perfect = env.reference_completion(row)
    assert env.has_answer(row, perfect) is True
    assert env.has_answer(row, perfect[:1]) is False  # turn 2 never answered
    wrong_tag = [*perfect[:2], assistant(perfect[2]["content"].replace("combined_", ""))]
    assert env.has_answer(row, wrong_tag) is False
    empty_block = [assistant("<alphabetical_sorted>\n \n</alphabetical_sorted>"), *perfect[1:]]
    assert env.has_answer(row, empty_block) is False
    assert env.has_answer(row, [assistant(None), user("x"), assistant(12)]) is False
    # a wrong but parsable answer is no format failure
    scrambled = [assistant("<alphabetical_sorted>\nZed\n</alphabetical_sorted>"), *perfect[1:]]
    assert env.has_answer(row, scrambled) is True and env.score(row, scrambled)["alphabet_sort_reward"] < 1

    batch = [rollout(c, row=row) for c in (perfect, perfect[:1], wrong_tag, scrambled)]
    assert batch_monitors(batch, env.has_answer)["monitor/format_failure"] == 2 / 4


def test_an_alphabet_sort_answer_that_leaves_a_name_out_is_short():
    """What GRPO learned in the collapse benchmark (docs/results.md): listing fewer names than given,
    which the similarity score pays. Padding, a wrong order and a missing block are not short."""
    env = packaged_env("alphabet_sort", min_turns=2, max_turns=2, min_names_per_turn=3)
    row = env.rows("eval", 1)[0]
    perfect = env.reference_completion(row)
    first, follow_up, second = perfect
    lines = first["content"].split("\n")  # <tag>, names..., </tag>
    dropped = assistant("\n".join([lines[0], *lines[2:]]))
    assert env.short_answer(row, perfect) is False
    assert env.short_answer(row, [dropped, follow_up, second]) is True
    reversed_ = assistant("\n".join([lines[0], *reversed(lines[1:-1]), lines[-1]]))
    assert env.short_answer(row, [reversed_, follow_up, second]) is False  # wrong, not short
    padded = assistant("\n".join([lines[0], lines[1], *lines[1:]]))
    assert env.short_answer(row, [padded, follow_up, second]) is False
    second_lines = second["content"].split("\n")
    short_second = assistant("\n".join([second_lines[0], *second_lines[2:]]))
    assert env.short_answer(row, [first, follow_up, short_second]) is True  # any turn
    assert env.short_answer(row, perfect[:1]) is False  # an unanswered turn is a format failure
    assert env.short_answer(row, [assistant(None), user("x"), assistant(12)]) is False
    # the score does pay the short answer more than the wrong full one: why the monitor exists
    assert (
        env.score(row, [dropped, follow_up, second])["alphabet_sort_reward"]
        > env.score(row, [reversed_, follow_up, second])["alphabet_sort_reward"]
    )
    batch = [
        rollout(c, row=row) for c in (perfect, [dropped, follow_up, second], [reversed_, follow_up, second])
    ]
    assert batch_monitors(batch, env.has_answer, None, env.short_answer)["monitor/short_answer"] == 1 / 3
    # an env that does not say has no metric
    char_target = packaged_env("char_target")
    assert char_target.short_answer(char_target.rows("eval", 1)[0], [assistant("abc")]) is None
    assert "monitor/short_answer" not in batch_monitors(batch, None, None, char_target.short_answer)


def test_single_turn_answer_checks_follow_their_parsers():
    reverse = packaged_env("reverse_text")
    row = reverse.rows("eval", 1)[0]
    assert reverse.has_answer(row, [assistant("<think>hm</think><answer>olleh</answer>")]) is True
    assert reverse.has_answer(row, [assistant("<answer>olleh")]) is False
    assert reverse.has_answer(row, []) is False

    arithmetic = packaged_env("arithmetic")
    row = arithmetic.rows("eval", 1)[0]
    assert arithmetic.has_answer(row, [assistant("so \\boxed{\\frac{8}{2}}")]) is True
    assert arithmetic.has_answer(row, [assistant("\\boxed{four}")]) is False
    assert arithmetic.has_answer(row, [assistant("4")]) is False

    # char_target has no answer format: no verdict, no metric
    char_target = packaged_env("char_target")
    row = char_target.rows("eval", 1)[0]
    assert char_target.has_answer(row, [assistant("abc")]) is None
    assert "monitor/format_failure" not in batch_monitors(
        [rollout([assistant("x")], row=row)], char_target.has_answer
    )


# ---- wrong language ------------------------------------------------------------------------------------


def test_wrong_language_counts_answers_below_half_in_the_run_language():
    cfg = load_settings(["+env=alphabet_sort", "language=zh"])
    env = build_env(cfg.env, cfg.language)
    score = language_monitor(spec_from_config(cfg.language), env)
    row = env.rows("eval", 1)[0]
    names_only = env.reference_completion(row)  # the answer blocks hold only names: nothing to judge
    chinese = [assistant("我按照姓氏的拼音顺序排列了这些名字。")]
    english = [assistant("I sorted these names by their family name.")]
    mostly_english = [assistant("I sorted these names by their family name, 好的。")]
    assert score(completion=names_only, info=row.info) is None
    assert score(completion=chinese, info=row.info) == 1.0
    assert score(completion=english, info=row.info) == 0.0
    batch = [rollout(c, row=row) for c in (names_only, chinese, english, mostly_english)]
    monitors = batch_monitors(batch, env.has_answer, score)
    assert monitors["monitor/wrong_language"] == 2 / 3  # english and mostly_english, of 3 judged

    # an English run has no wrong-language monitor
    cfg_en = load_settings(["+env=alphabet_sort"])
    assert language_monitor(spec_from_config(cfg_en.language), build_env(cfg_en.env, cfg_en.language)) is None


@pytest.mark.parametrize("code", ["sv", "de"])
def test_a_list_of_names_is_no_vote_on_the_language(code):
    """Names carry little language signal: an answer that lists names (the row's, as first or family
    names alone, outside the answer tags; or names the row does not hold) is not wrong-language, while
    a sentence in another language still is."""
    cfg = load_settings(["+env=alphabet_sort", f"language={code}"])
    env = build_env(cfg.env, cfg.language)
    score = language_monitor(spec_from_config(cfg.language), env)
    rows = env.rows("eval", 6)
    other = {"sv": ["Hans Müller", "Jürgen Schmidt", "Anke Weber", "Uwe Fischer"],
             "de": ["Lars Svensson", "Karin Lindqvist", "Åsa Berg", "Björn Ek"]}[code]  # fmt: skip
    lists = []
    for row in rows:
        names = [name for turn in row.info["turn_names"] for name in turn]
        lists += [
            (row, "<sorted>" + ", ".join(name.split()[0] for name in names) + "</sorted>"),  # first names
            (row, "\n".join(name.split()[-1] for name in names)),  # family names
            (row, ", ".join(other)),  # names of another country, not the row's
        ]
    judged = [(text, score(completion=[assistant(text)], info=row.info)) for row, text in lists]
    assert [(text, s) for text, s in judged if s is not None and s < 0.5] == []
    english = [assistant("I sorted these names by their first name, as you asked me to.")]
    assert score(completion=english, info=rows[0].info) == 0.0
    batch = [rollout([assistant(text)], row=row, language=code) for row, text in lists[:3]]
    assert "monitor/wrong_language" not in batch_monitors(batch, env.has_answer, score)


def test_each_monitor_per_language_when_the_batch_has_several():
    en = [rollout([assistant("a b c a b c")], env_mask=[1] * 6, language="en") for _ in range(2)]
    sv = [rollout([assistant("a b c d")], env_mask=[1] * 2, language="sv")]
    monitors = batch_monitors([*en, *sv])
    assert monitors == {
        "monitor/tokens_per_turn": 14 / 3,
        "monitor/repetition": pytest.approx((0.25 + 0.25 + 0.0) / 3),
        "monitor/truncated": 0.0,
        "monitor/tokens_per_turn/en": 6.0,
        "monitor/repetition/en": 0.25,
        "monitor/truncated/en": 0.0,
        "monitor/tokens_per_turn/sv": 2.0,
        "monitor/repetition/sv": 0.0,
        "monitor/truncated/sv": 0.0,
    }
    assert not any("/en" in k for k in batch_monitors(en))  # one language: no breakdown


ANSWER = "<alphabetical_sorted>\nAda\nBob\n</alphabetical_sorted>"


def test_truncated_is_the_share_of_completions_cut_by_a_token_limit_per_language():
    ended = rollout([assistant(ANSWER)], env_mask=[1] * 9, language="en")
    # the answer, then junk to the token budget: the rubric reads the block, the monitor sees the cut
    junk = rollout([assistant(ANSWER + " zz <alphabetical_sorted> zz zz")], env_mask=[1] * 16, truncated=True)
    cut_in_block = rollout(
        [assistant("<alphabetical_sorted>\nAda\nB")], [1] * 16, language="zh", truncated=True
    )
    ended_zh = rollout([assistant(ANSWER)], env_mask=[1] * 9, language="zh")
    monitors = batch_monitors([ended, junk, cut_in_block, ended_zh])
    assert monitors["monitor/truncated"] == 0.5
    assert (monitors["monitor/truncated/en"], monitors["monitor/truncated/zh"]) == (0.5, 0.5)
    assert batch_monitors([ended, ended_zh])["monitor/truncated"] == 0.0
    assert truncated_shares({**monitors, "monitor/truncated_x": 1.0, "reward": 0.3}, "monitor/truncated") == {
        "all": 0.5,
        "en": 0.5,
        "zh": 0.5,
    }


def test_a_climb_of_truncated_rollouts_is_one_warning_line_per_language_once():
    settings = load_settings(["+env=alphabet_sort", "generation.max_tokens_per_turn=80"])
    watch = TruncationWatch("[train]", settings)
    assert watch.update({"all": 0.0, "en": 0.0, "zh": 0.0}, 10) is None  # the first measurement
    assert watch.update({"all": 0.1, "en": 0.0, "zh": TRUNCATION_CLIMB - 0.01}, 20) is None
    line = watch.update({"all": 0.3, "en": 0.05, "zh": 0.6}, 30)
    assert line is not None and "\n" not in line
    assert line.startswith(
        "[train] warning: truncated rollouts climbing (all 0% at step 10 -> 30% at step 30, "
    )
    assert "zh 0% at step 10 -> 60% at step 30" in line and "en " not in line
    assert "generation.max_tokens_per_turn=80" in line
    # the default masks cut completions already: the advice says what else to look at
    assert settings.trainer.mask_truncated_completions and "cut completions get no gradient" in line
    assert watch.update({"all": 0.9, "en": 0.1, "zh": 1.0}, 40) is None  # said once per language
    assert "en 0% at step 10 -> 50% at step 50" in watch.update({"en": 0.5}, 50)
    unmasked = load_settings(["+env=alphabet_sort", "trainer.mask_truncated_completions=false"])
    line = TruncationWatch("[val]", unmasked)
    line.update({"all": 0.0}, 20)
    assert "trainer.mask_truncated_completions=true keeps" in line.update({"all": 0.5}, 40)


def test_a_climb_of_short_answers_is_one_warning_line_per_language_once():
    """A language's share over two logged windows in a row 20 points above its first: one line."""
    watch = ShortAnswerWatch("[train]")
    assert watch.update({"all": 0.0, "ja": 0.0}, 10) is None
    assert watch.update({"all": 0.1, "ja": 0.45}, 20) is None  # one window: not yet
    line = watch.update({"all": 0.1, "ja": 0.6}, 30)
    assert line == (
        "[train] warning: answers leaving items out climbing (ja 0% at step 10 -> 60% at step 30): the "
        "score pays a partial answer more than a wrong full one, and the policy is learning that, not the "
        "task; a score that charges for what is left out (alphabet_sort: env.count_names=true) or a KL "
        "anchor (trainer.beta=0.04) stopped it where it was measured (docs/results.md), and the "
        "language's held-out reward against the SFT model's says what it costs (trainer.eval_steps)"
    )
    assert watch.update({"all": 0.3, "ja": 0.9}, 40) is None  # all: its first window above
    assert watch.update({"all": 0.35, "ja": 0.9}, 50).startswith(
        "[train] warning: answers leaving items out climbing (all 0%"
    )
    assert watch.update({"all": 0.9, "ja": 1.0}, 60) is None


def test_a_short_answer_blip_is_no_warning_and_a_score_that_charges_is_not_called_paying():
    """Measured, learning_where_rl_helps.py's scarce setting with count_names on (the per-language
    shares of its 12 logging windows): seed 0's zh went 2% -> 23% -> 3% (no warning), seed 1's ru
    stayed up for three windows (one, which says the score charges for what is left out, as
    env.count_names does: the rule the score tests hold)."""
    zh = [0.02, 0.02, 0.00, 0.23, 0.03, 0.00, 0.02, 0.02, 0.12, 0.00, 0.02, 0.00]
    ru = [0.01, 0.00, 0.03, 0.00, 0.00, 0.07, 0.02, 0.46, 0.50, 0.26, 0.01, 0.11]
    cfg = load_settings(["+experiment=alphabet_sort_multilingual"])
    env = build_env(cfg.env, cfg.language)
    assert env.count_names and env.pays_short_answers() is False
    cfg = load_settings(["+env=alphabet_sort"])
    hub = build_env(cfg.env, cfg.language)
    assert hub.pays_short_answers() is True
    watch = ShortAnswerWatch("[train]", env.pays_short_answers())
    lines = [
        watch.update({"zh": z, "ru": r}, 10 * (i + 1)) for i, (z, r) in enumerate(zip(zh, ru, strict=True))
    ]
    assert [i for i, line in enumerate(lines) if line] == [8]
    assert lines[8] == (
        "[train] warning: answers leaving items out climbing (ru 1% at step 10 -> 50% at step 90): the score "
        "charges for an item left out (it pays no short answer more than the full one misplaced), so GRPO "
        "pushes back on it; the language's held-out reward against the SFT model's says what it costs "
        "(trainer.eval_steps), and a KL anchor (trainer.beta=0.04) keeps the policy nearer its SFT model"
    )


def test_a_raising_answer_check_costs_the_metric_not_the_run():
    def broken(row, completion):
        raise RuntimeError("third-party bug")

    assert "monitor/format_failure" not in batch_monitors([rollout([assistant("x")])], broken)


# ---- on the real trainer -------------------------------------------------------------------------------


class Logs(TrainerCallback):
    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.logs.append(dict(logs))


SMALL = [
    "stages=[train]",
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=8",
    "trainer.max_steps=2",
    "trainer.save_steps=1000",
    "trainer.beta=0",
    "generation.max_tokens_per_turn=16",
]


def test_monitors_reach_the_step_log_and_the_zero_signal_hint_prints_once(tmp_path, capsys):
    # a random model never writes the answer tags: every group gets reward 0 at every step
    cfg = load_settings(["+env=alphabet_sort", *SMALL, "trainer.max_completion_length=48"])
    env = build_env(cfg.env, cfg.language)
    logs = Logs()
    bundle = build_trainer(cfg, env, tmp_path, callbacks=[logs])
    bundle.trainer.train()
    out = capsys.readouterr().out

    last = logs.logs[-1]  # step 2, computed from the batch of step 2
    rollouts = bundle.rollout.last_rollouts
    assert last["monitor/tokens_per_turn"] == pytest.approx(
        sum(sum(r.env_mask) for r in rollouts) / sum(r.num_turns for r in rollouts)
    )
    failures = [not env.has_answer(r.row, r.completion) for r in rollouts]
    assert last["monitor/format_failure"] == pytest.approx(sum(failures) / len(failures)) == 1.0
    short = [env.short_answer(r.row, r.completion) for r in rollouts]
    assert last["monitor/short_answer"] == pytest.approx(sum(short) / len(short))
    assert "monitor/repetition" in last and "monitor/wrong_language" not in last  # English run
    cut = [r.truncated for r in rollouts]
    assert last["monitor/truncated"] == pytest.approx(sum(cut) / len(cut))
    assert all(log["frac_reward_zero_std"] == 1.0 for log in logs.logs)
    assert "| no-answer 1 |" in out  # the compact per-step line
    # at step 1 every completion ran into a token limit: each earned trainer.truncated_reward (0),
    # and the hint, once, says so rather than blaming the rubric
    assert logs.logs[0]["monitor/truncated"] == 1.0
    assert out.count("hint: ") == 1 and truncation_hint(1, cfg) in out
    assert "generation.max_tokens_per_turn=16" in truncation_hint(1, cfg)

    # scored as they stand, the groups are still flat (no tags, no reward): the model is the cause
    scored = load_settings(
        ["+env=alphabet_sort", *SMALL, "trainer.max_completion_length=48", "trainer.truncated_reward=null"]
    )
    build_trainer(scored, env, tmp_path / "scored").trainer.train()
    out = capsys.readouterr().out
    assert out.count("hint: every group") == 1 and zero_signal_hint(1, env) in out
    # the hint fits the env: alphabet_sort warms up on its reference answers, and has a CPU recipe
    assert "stages=[sft,eval,train,eval]" in zero_signal_hint(1, env)
    assert "+experiment=alphabet_sort_cpu" in zero_signal_hint(1, env)


def test_the_zero_signal_hint_fits_the_env():
    """An env without reference answers (a verifiers env, a third-party one) is not sent to an SFT
    on them nor to alphabet-sort's recipe; another env with them gets the SFT, not the recipe."""
    from helpers.fake_envs import PingEnv

    hint = zero_signal_hint(3, PingEnv(turns=1))  # no reference_completion
    assert "alphabet_sort_cpu" not in hint and "has no reference answers" in hint and "sft.data_path=" in hint
    char = build_env(load_settings(["+env=char_target"]).env, "en")
    assert "warm the model up" in zero_signal_hint(1, char) and "+experiment=" not in zero_signal_hint(
        1, char
    )


def test_no_hint_while_groups_differ(tmp_path, capsys):
    # char_target's reward is dense: a group's completions differ
    cfg = load_settings(
        ["+env=char_target", *SMALL, "trainer.max_steps=1", "trainer.max_completion_length=16"]
    )
    logs = Logs()
    build_trainer(cfg, build_env(cfg.env, cfg.language), tmp_path, callbacks=[logs]).trainer.train()
    assert logs.logs[0]["frac_reward_zero_std"] < 1.0
    assert "hint:" not in capsys.readouterr().out


def test_the_progress_line_keeps_each_function_and_one_short_language_part():
    from grpo.train.progress import reward_parts

    logs = {
        "rewards/alphabet_sort_reward/mean": 0.25,
        "rewards/alphabet_sort_reward/ja/mean": 0.5,
        "rewards/alphabet_sort_reward/en/mean": 0.125,
        "rewards/language_consistency/mean": 1.0,
        "rewards/language_consistency/en/mean": 1.0,
        "rewards/alphabet_sort_reward/std": 0.1,
        "reward": 0.3,
    }
    assert reward_parts(logs) == [
        "alphabet_sort_reward 0.2500",
        "language_consistency 1.0000",
        "by language en 0.12 ja 0.50",  # the first function's, sorted by code
    ]
    assert reward_parts({"rewards/f/mean": 0.5}) == ["f 0.5000"]


@pytest.mark.parametrize(
    ("overrides", "changes", "rewarded"),
    [
        ([], False, False),  # the defaults: no gradient from a cut completion, and it earns 0
        (["trainer.mask_truncated_completions=false", "trainer.truncated_reward=null"], True, True),
        (["trainer.truncated_reward=null"], False, True),
    ],
)
def test_completions_cut_by_the_token_limit_earn_nothing_and_get_no_gradient_by_default(
    tmp_path, overrides, changes, rewarded
):
    """A random model never ends within 4 tokens: every completion of the step is truncated.
    char_target's reward is dense, so scored as they stand the completions differ. By default
    (trainer.truncated_reward=0, trainer.mask_truncated_completions=true) each earns 0 in training
    and the step leaves every weight as it was; scored as they stand and unmasked, the same step
    changes the weights; masked, it does not."""
    import torch

    defaults = load_settings(["+env=char_target"]).trainer
    assert (defaults.mask_truncated_completions, defaults.truncated_reward) == (True, 0.0)
    cfg = load_settings(["+env=char_target", *SMALL, "trainer.max_steps=1", "trainer.max_completion_length=4",
                         "generation.max_tokens_per_turn=4", *overrides])  # fmt: skip
    env = build_env(cfg.env, cfg.language)
    logs = Logs()
    bundle = build_trainer(cfg, env, tmp_path, callbacks=[logs])
    model = bundle.trainer.model
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    bundle.trainer.train()
    rollouts = bundle.rollout.last_rollouts
    assert rollouts and all(r.truncated and r.cut_turns == 1 for r in rollouts)
    # what the env's rubric gives them as they stand (what evaluation reports)
    scores = [env.rubric.total(env.score(r.row, r.completion, r.state)) for r in rollouts]
    assert len(set(scores)) > 1
    assert (logs.logs[0]["reward"] > 0) == rewarded
    if rewarded:
        assert logs.logs[0]["reward"] == pytest.approx(sum(scores) / len(scores), rel=1e-4)
    changed = [name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())]
    assert bool(changed) == changes, changed[:3]


def test_the_truncated_reward_replaces_the_score_of_every_reward_function_that_counts():
    from grpo.envs.rubric import COMPLETION_FIELD, TRUNCATED_FIELD, RewardFunc
    from grpo.rewards.reward_funcs import rubric_reward_funcs

    def length(completion=None, **_):
        return min(1.0, len(completion[-1]["content"]) / 10)

    def not_for_b(completion=None, **_):
        return None if completion[-1]["content"].startswith("b") else 1.0

    def batched(prompts, completions, **kwargs):
        return [0.5] * len(prompts)

    batched.trl_batched = True

    def turns(completion=None, **_):
        return float(len(completion))

    funcs = [
        RewardFunc("length", length),
        RewardFunc("not_for_b", not_for_b),
        RewardFunc("rm", batched, 0.5),
        RewardFunc("num_turns", turns, 0.0),  # a weight-0 metric, as verifiers envs report
    ]
    episodes = [[assistant("aaaa")], [assistant("bbbbbbbb")], [assistant("aaaaaaaaaaaa")]]
    fields = {COMPLETION_FIELD: episodes, TRUNCATED_FIELD: [False, True, True]}
    prompts, completions = ["p"] * 3, ["c"] * 3
    (size, other, rm, metric), _ = rubric_reward_funcs(funcs, truncated_reward=0.0)
    assert size(prompts, completions, **fields) == [0.4, 0.0, 0.0]
    assert other(prompts, completions, **fields) == [1.0, None, 0.0]  # None: the function does not apply
    assert rm(prompts, completions, **fields) == [0.5, 0.0, 0.0] and rm.__name__ == "batched"
    assert rm.trl_batched is True  # the wrapped function's attributes show through
    assert copy.deepcopy(rm)(prompts, completions, **fields) == [0.5, 0.0, 0.0]
    # the metric scores as an evaluation scores it, truncated or not
    assert metric(prompts, completions, **fields) == [1.0, 1.0, 1.0]
    (size, other, rm, metric), _ = rubric_reward_funcs(funcs, truncated_reward=None)
    assert size(prompts, completions, **fields) == [0.4, 0.8, 1.0]
    assert rm is batched
