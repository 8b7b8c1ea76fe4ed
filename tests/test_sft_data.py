"""SFT demonstrations: JSONL validation (every kind of bad row, by file and line, through
`python -m grpo` too), env reference episodes, the replay through the rollout engine (GRPO's exact
token layout, user and environment tokens masked out), cutting at sft.max_length, and the sft
config rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo
from helpers.packaged_env import packaged_env

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.errors import UserError
from grpo.files import MAX_REPORTED
from grpo.rollout import TurnTokenizer
from grpo.run.layout import SFT_DIR, SFT_META_FILE
from grpo.sft.data import Demonstration, env_demonstrations, load_conversations, load_demonstrations
from grpo.sft.replay import build_examples, replay

REPO = Path(__file__).resolve().parents[1]
CONVERSATION = {
    "messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Sort: b, a"},
        {"role": "assistant", "content": "a\nb"},
        {"role": "user", "content": "Now add c."},
        {"role": "assistant", "content": "a\nb\nc"},
    ],
    "language": "en",
}
# one row of every kind the loader refuses, with the text its line must show
BAD_ROWS = [
    ('{"messages": [', "bad JSON ("),
    (json.dumps([1, 2]), "expected a JSON object, got list"),
    (json.dumps({"language": "en"}), "missing 'messages'"),
    (json.dumps({"messages": []}), "'messages' must be a non-empty list"),
    (json.dumps({"messages": [{"role": "user"}]}), "'messages'[0] must be a {role, content} message"),
    (
        json.dumps({"messages": [{"role": "robot", "content": "hi"}, {"role": "assistant", "content": "x"}]}),
        "'messages'[0] has role 'robot' (use one of system, user, assistant, tool)",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " "}]}),
        "'messages'[1] has empty content",
    ),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}]}), "no assistant message"),
    (
        json.dumps({"messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]}),
        "'messages'[0] is an assistant message",
    ),
    (
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "a"},
                    {"role": "assistant", "content": "b"},
                ]
            }
        ),
        "'messages'[2] follows another assistant message",
    ),
    (json.dumps({**CONVERSATION, "language": "xx"}), "unknown language 'xx'"),
]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def bad_file(tmp_path: Path) -> Path:
    """A good row on line 1, then one bad row of every kind (lines 2, 3, ...)."""
    return write_lines(tmp_path / "demos.jsonl", [json.dumps(CONVERSATION)] + [row for row, _ in BAD_ROWS])


# ---- JSONL conversations -------------------------------------------------------------------------


def test_every_kind_of_bad_row_is_reported_with_its_line_number_in_one_line(tmp_path):
    path = bad_file(tmp_path)
    with pytest.raises(UserError) as info:
        load_conversations(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"sft.data_path {path}: {len(BAD_ROWS)} bad row(s), nothing was trained: ")
    assert "line 1:" not in message
    # MAX_REPORTED rows are listed, in line order; the rest are counted
    for number, (_, expected) in enumerate(BAD_ROWS[:MAX_REPORTED], 2):
        assert f"line {number}: {expected}" in message, expected
    assert f"... and {len(BAD_ROWS) - MAX_REPORTED} more" in message
    # every kind has its own message at its own line (the last ones are past the cap above)
    for number, (row, expected) in enumerate(BAD_ROWS, 2):
        single = write_lines(tmp_path / f"single{number}.jsonl", [json.dumps(CONVERSATION), "", row])
        with pytest.raises(UserError, match="1 bad row") as one:
            load_conversations(single)
        assert f"line 3: {expected}" in str(one.value)
    assert "languages: ar, de, en" in str(one.value)  # the unknown-language row says which codes exist


def test_conversations_split_into_prompt_and_turns(tmp_path):
    trailing = {"messages": [*CONVERSATION["messages"], {"role": "user", "content": "thanks"}]}
    data = tmp_path / "data"
    data.mkdir()
    write_lines(data / "a.jsonl", [json.dumps(CONVERSATION)])
    write_lines(data / "b.jsonl", [json.dumps(trailing), json.dumps({**CONVERSATION, "language": "sv"})])
    first, second, third = load_conversations(data)
    messages = CONVERSATION["messages"]
    assert first.prompt == messages[:2] and first.completion == messages[2:]
    assert first.answers == ["a\nb", "a\nb\nc"] and first.language == "en"
    assert first.where == "a.jsonl line 1" and third.where == "b.jsonl line 2"
    # what follows the last assistant message has nothing to learn from: left out
    assert second.completion == messages[2:] and second.language == ""
    assert third.language == "sv"
    write_lines(data / "c.jsonl", [json.dumps({"messages": []})])
    with pytest.raises(UserError, match="c.jsonl: line 1: 'messages' must be a non-empty list"):
        load_conversations(data)  # in a directory, each bad row names its file
    with pytest.raises(UserError, match="no conversations"):
        load_conversations(write_lines(tmp_path / "empty.jsonl", ["", " "]))
    (tmp_path / "nothing").mkdir()
    with pytest.raises(UserError, match="the directory has no \\*.jsonl files"):
        load_conversations(tmp_path / "nothing")


def test_the_source_follows_sft_data_path(tmp_path):
    path = write_lines(tmp_path / "d.jsonl", [json.dumps(CONVERSATION)])
    env = packaged_env("reverse_text", num_train_examples=5)
    from_file = load_demonstrations(load_settings(["+env=reverse_text", f"sft.data_path={path}"]), env)
    assert [d.where for d in from_file] == ["d.jsonl line 1"]
    from_env = load_demonstrations(load_settings(["+env=reverse_text", "sft.num_examples=3"]), env)
    assert [d.where for d in from_env] == ["train row 0", "train row 1", "train row 2"]


# ---- env reference episodes ----------------------------------------------------------------------


def test_env_demonstrations_are_the_reference_episodes_of_the_train_rows_in_their_languages(capsys):
    from grpo.languages.spec import get_spec

    env = packaged_env("alphabet_sort", language=get_spec("mix"), num_train_examples=12)
    demos = env_demonstrations(env, 20)
    assert "sft.num_examples=20 but alphabet_sort's train split has 12 rows" in capsys.readouterr().err
    rows = env.rows("train")
    assert len(demos) == 12
    assert len({d.language for d in demos}) > 1  # language=mix: every row in its own language
    for demo, row in zip(demos, rows, strict=True):
        assert demo.row is not None and demo.row.id == row.id and demo.language == row.language
        assert demo.prompt == row.prompt and demo.completion == env.reference_completion(row)
        # the reference scores full marks: what SFT imitates is right
        assert env.rubric.total(env.score(row, demo.completion)) == pytest.approx(1.0)


def test_a_codepoint_demonstrator_writes_the_wrong_zh_order_and_the_rubric_knows_it(capsys):
    """+sft.demonstrator.env.collation=codepoint: the demonstrations come from the env in plain
    code-point order; the run's env (pinyin) still scores. A zh row whose two orders differ: the
    demonstration has the code-point order, the rubric scores it below 1 and the reference 1.0."""
    from grpo.sft.data import demonstration_env

    settings = load_settings(
        [
            "+env=alphabet_sort",
            "language=zh",
            "env.max_turns=1",
            "stages=[sft]",
            "+sft.demonstrator.env.collation=codepoint",
        ]  # fmt: skip
    )
    check(settings)
    from grpo.envs import build_env

    env = build_env(settings.env, settings.language)
    demonstrator, differs = demonstration_env(settings, env)
    assert differs == "env.collation=codepoint" and demonstrator is not env
    demos = load_demonstrations(settings, demonstrator)
    rows = env.rows("train", len(demos))
    wrong = 0
    for demo, row in zip(demos, rows, strict=True):
        names = row.info["turn_names"][0]
        pinyin = row.info["ground_truths"][0]
        assert demo.prompt == row.prompt  # the same rows: only the answer differs
        (answer,) = [m["content"] for m in demo.completion if m["role"] == "assistant"]
        assert answer.splitlines()[1:-1] == sorted(names)  # Python's order, not the language's
        reference = env.rubric.total(env.score(row, env.reference_completion(row)))
        assert reference == pytest.approx(1.0)
        if sorted(names) != pinyin:
            wrong += 1
            assert env.rubric.total(env.score(row, demo.completion)) < 1.0
    assert wrong >= len(demos) // 2, "code-point order differs from pinyin in most zh rows"
    # the default demonstrator is the run's env itself
    assert demonstration_env(load_settings(["+env=alphabet_sort"]), env) == (env, None)


MIX3 = ["+env=alphabet_sort", "language=mix", "language.members=[en,sv,zh]", "env.num_train_examples=60"]


def test_n_demonstrations_per_language_of_a_mix():
    from grpo.envs import build_env

    settings = load_settings([*MIX3, "stages=[sft]", "sft.num_examples_per_language=7"])
    check(settings)
    env = build_env(settings.env, settings.language)
    demos = load_demonstrations(settings, env)
    counts = {code: sum(d.language == code for d in demos) for code in ("en", "sv", "zh")}
    assert counts == {"en": 7, "sv": 7, "zh": 7} and len(demos) == 21
    # the first rows of each language, in row order
    for code in counts:
        firsts = [row.id for row in env.rows("train") if row.language == code][:7]
        assert [d.row.id for d in demos if d.language == code] == firsts
    # a mapping: the listed languages get theirs, the others none (said in one line)
    mapped = load_settings([*MIX3, "sft.num_examples_per_language={zh:3,sv:1}"])
    demos = load_demonstrations(mapped, env)
    assert sorted(d.language for d in demos) == ["sv", "zh", "zh", "zh"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sft.num_examples_per_language=-1", "sft.num_examples_per_language=-1: expected a count >= 0"),
        ("sft.num_examples_per_language={fr:3}", "fr is not a language of the demonstrations (en, sv)"),
        ("sft.num_examples_per_language={sv:0}", "no demonstration in any language"),
        ("sft.demonstrator.language=xx", "sft.demonstrator.language: "),
    ],
)
def test_bad_demonstration_settings_are_one_line(override, message):
    settings = load_settings(
        ["+env=alphabet_sort", "language=mix", "language.members=[en,sv]", "stages=[sft]", override]
    )
    with pytest.raises(UserError) as err:
        check(settings)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_demonstrator_env_argument_names_the_setting():
    from grpo.envs import build_env
    from grpo.sft.data import demonstration_env

    settings = load_settings(
        ["+env=alphabet_sort", "stages=[sft]", "+sft.demonstrator.env.colation=codepoint"]
    )
    check(settings)
    with pytest.raises(UserError, match=r"^sft\.demonstrator: env\.colation"):
        demonstration_env(settings, build_env(settings.env, settings.language))


# ---- replay through the rollout engine -----------------------------------------------------------


@pytest.fixture(scope="module")
def tokens():
    """The token side GRPO's rollouts use: the hf backend of the tiny policy (generates nothing here)."""
    from grpo.generation.hf import HFBackend
    from grpo.models import load_policy

    model, tokenizer = load_policy(load_settings(["+env=alphabet_sort"]).model)
    return HFBackend(model, tokenizer)


def spans(ids: list[int], mask: list[int], bit: int) -> list[list[int]]:
    """The maximal runs of ids whose mask bit is `bit`."""
    runs: list[list[int]] = []
    previous = None
    for token, b in zip(ids, mask, strict=True):
        if b == bit:
            if previous != bit:
                runs.append([])
            runs[-1].append(token)
        previous = b
    return runs


def test_a_two_turn_alphabet_sort_demonstration_trains_only_the_assistant_turns(tokens):
    env = packaged_env("alphabet_sort", min_turns=2, max_turns=2, num_train_examples=4)
    demo = env_demonstrations(env, 1)[0]
    (example,) = build_examples([demo], env, tokens, max_length=4096)
    ids, mask = example.input_ids, example.assistant_mask
    assert len(ids) == len(mask) and not example.cut
    answers = demo.answers
    assert len(answers) == 2
    # the trained tokens are exactly the two answers, each closed by the stop token GRPO's model emits
    trained = [tokens.decode(run, skip_special_tokens=False) for run in spans(ids, mask, 1)]
    assert trained == [answer + "<|im_end|>" for answer in answers]
    # the masked tokens: the prompt, then the env's follow-up turn between the answers
    masked = [tokens.decode(run, skip_special_tokens=False) for run in spans(ids, mask, 0)]
    follow_up = demo.completion[1]
    assert (
        follow_up["role"] == "user"
        and masked[1] == f"\n<|im_start|>user\n{follow_up['content']}<|im_end|>\n<|im_start|>assistant\n"
    )
    # the whole sequence is the chat template's rendering of the conversation (no trailing "\n":
    # the model's turn ends at its stop token), tokenised the way the rollout engine does
    rendered = tokens.render(demo.prompt + demo.completion, add_generation_prompt=False)
    assert tokens.decode(ids, skip_special_tokens=False) == rendered.rstrip("\n")
    assert ids[: mask.index(1)] == TurnTokenizer(tokens).prompt_ids(demo.prompt)


def test_a_jsonl_conversation_masks_system_and_user_turns(tokens, tmp_path):
    (demo,) = load_conversations(write_lines(tmp_path / "c.jsonl", [json.dumps(CONVERSATION)]))
    (example,) = build_examples([demo], None, tokens, max_length=4096)
    ids, mask = example.input_ids, example.assistant_mask
    trained = [tokens.decode(run, skip_special_tokens=False) for run in spans(ids, mask, 1)]
    assert trained == ["a\nb<|im_end|>", "a\nb\nc<|im_end|>"]
    masked = [tokens.decode(run, skip_special_tokens=False) for run in spans(ids, mask, 0)]
    assert masked == [
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nSort: b, a<|im_end|>\n<|im_start|>assistant\n",
        "\n<|im_start|>user\nNow add c.<|im_end|>\n<|im_start|>assistant\n",
    ]


def test_long_conversations_are_cut_at_the_end_with_the_mask_aligned(tokens, tmp_path, capsys):
    env = packaged_env("alphabet_sort", min_turns=2, max_turns=2, num_train_examples=4)
    demos = env_demonstrations(env, 2)
    (full_a, full_b) = build_examples(demos, env, tokens, max_length=4096)
    first_answer = full_a.assistant_mask.index(1)
    limit = first_answer + 5
    cut = build_examples(demos, env, tokens, max_length=limit)
    assert [e.cut for e in cut] == [True, True]
    for short, full in zip(cut, (full_a, full_b), strict=True):
        assert (
            short.input_ids == full.input_ids[:limit] and short.assistant_mask == full.assistant_mask[:limit]
        )
    assert "2 of 2 demonstrations are longer than sft.max_length" in capsys.readouterr().out
    # a limit inside every prompt leaves nothing to train on
    shortest_prompt = min(e.assistant_mask.index(1) for e in (full_a, full_b))
    with pytest.raises(UserError, match=f"sft.max_length={shortest_prompt} cuts every demonstration"):
        build_examples(demos, env, tokens, max_length=shortest_prompt)


def test_an_env_whose_reference_disagrees_with_its_env_response_is_named(tokens):
    env = packaged_env("alphabet_sort", min_turns=2, max_turns=2, num_train_examples=4)
    demo = env_demonstrations(env, 1)[0]
    wrong_follow_up = Demonstration(
        demo.prompt,
        [demo.completion[0], {"role": "user", "content": "something else"}, demo.completion[2]],
        demo.language,
        demo.where,
        demo.row,
    )
    with pytest.raises(
        UserError, match="env alphabet_sort: train row 0: the replayed episode differs .* message 1"
    ):
        replay([wrong_follow_up], env, tokens)
    one_turn_short = Demonstration(demo.prompt, demo.completion[:1], demo.language, demo.where, demo.row)
    with pytest.raises(UserError, match="env_response continues the episode after the reference's last"):
        replay([one_turn_short], env, tokens)


# ---- config rules and the entry point ------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["stages=[train,sft]"], "sft must come before train"),
        (["stages=[sft]", "sft.data_path=/no/such.jsonl"], "sft.data_path=/no/such.jsonl: no such file"),
        (["stages=[sft]", "sft.max_length=8"], "sft.max_length=8 must be >= 16"),
        (
            ["stages=[sft]", "sft.lora=true", "model.lora.r=0"],
            "sft.lora=true trains an adapter shaped by model.lora",
        ),
        (["stages=[sft,eval]", "generation=openai", "generation.model=m"], "generation=openai"),
    ],
)
def test_sft_config_rules(overrides, message):
    with pytest.raises(UserError, match=message.replace("[", "\\[").replace("]", "\\]")):
        check(load_settings(["+env=alphabet_sort", *overrides]))


def test_a_resume_with_sft_in_stages_passes_the_checks(tmp_path):
    from grpo.run.checkpoints import mark_checkpoint_complete

    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 2}')
    (checkpoint / "model.safetensors").write_bytes(b"")
    mark_checkpoint_complete(checkpoint, 2)
    resumed = ["+env=alphabet_sort", f"resume={tmp_path / 'run'}"]
    check(load_settings([*resumed, "stages=[train,eval]"]))
    # the sft stage reuses the resumed run's SFT, or continues it (tests/test_interrupt_resume.py)
    check(load_settings([*resumed, "stages=[sft,train,eval]"]))
    # without a GRPO checkpoint, a run interrupted during its SFT can still be resumed
    empty = tmp_path / "interrupted_in_sft"
    empty.mkdir()
    check(load_settings(["+env=alphabet_sort", f"resume={empty}", "stages=[sft,eval,train,eval]"]))
    with pytest.raises(UserError, match="no complete checkpoint"):
        check(load_settings(["+env=alphabet_sort", f"resume={empty}", "stages=[train,eval]"]))


def test_valid_sft_configs_pass():
    check(load_settings(["+env=alphabet_sort", "stages=[sft,eval,train,eval]"]))
    check(load_settings(["+env=alphabet_sort", "stages=[sft]", "sft.lora=true", "language=mix"]))
    # sft is not checked when the run does not do it
    check(load_settings(["+env=alphabet_sort", "stages=[eval]", "sft.max_length=1"]))


@pytest.mark.slow
def test_bad_rows_stop_python_m_grpo_with_exit_2_one_line_and_nothing_trained(tmp_path):
    data = bad_file(tmp_path)
    run_dir = tmp_path / "out" / "run"
    proc = run_grpo(
        [
            "+env=alphabet_sort",
            "stages=[sft]",
            f"sft.data_path={data}",
            f"output_root={tmp_path / 'out'}",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        env_extra={"PYTHONPATH": str(REPO)},  # this checkout's grpo, whatever is installed
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: sft.data_path {data}: {len(BAD_ROWS)} bad row(s)"
    ), proc.stderr
    for number, (_, expected) in enumerate(BAD_ROWS[:MAX_REPORTED], 2):
        assert f"line {number}: {expected}" in lines[0]
    assert not (run_dir / SFT_DIR).exists() and not (run_dir / f"{SFT_DIR}.partial").exists()
    assert not list(run_dir.rglob(SFT_META_FILE))
