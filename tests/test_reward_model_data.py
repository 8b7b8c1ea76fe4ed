"""Preference data: JSONL validation (every bad row, by line), synthetic pairs from environments,
the held-out split, the reward_model config rules, and one-line errors through `python -m grpo`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo
from helpers.packaged_env import packaged_env

from grpo.cli.checks import check
from grpo.cli.synthetic import main
from grpo.compose import load_settings
from grpo.envs.alphabet_sort import AlphabetSortEnv
from grpo.errors import UserError
from grpo.files import MAX_REPORTED
from grpo.reward_model.data import PreferencePair, load_pairs, split_heldout, write_pairs
from grpo.reward_model.synthetic import (
    corrupt_episode,
    corrupt_format,
    corrupt_items,
    env_pairs,
    synthetic_pairs,
)
from grpo.run.layout import RM_META_FILE

REPO = Path(__file__).resolve().parents[1]
GOOD = {"prompt": "Sort: b, a", "chosen": "a\nb", "rejected": "b\na", "language": "en"}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---- JSONL validation -------------------------------------------------------------------------


def test_every_kind_of_bad_row_is_reported_with_its_line_number(tmp_path):
    path = write_lines(
        tmp_path / "p.jsonl",
        [
            json.dumps(GOOD),  # 1 fine
            json.dumps({k: v for k, v in GOOD.items() if k != "chosen"}),  # 2 missing key
            "",  # 3 blank lines are skipped
            json.dumps({**GOOD, "rejected": "   "}),  # 4 empty text
            json.dumps({**GOOD, "language": "xx"}),  # 5 unknown language
            '{"prompt": "hi", "chosen": ',  # 6 bad JSON
            json.dumps({**GOOD, "chosen": [{"role": "assistant"}]}),  # 7 malformed messages
            json.dumps([1, 2]),  # 8 not an object
            json.dumps({**GOOD, "rejected": GOOD["chosen"]}),  # 9 identical pair
        ],
    )
    with pytest.raises(UserError) as info:
        load_pairs(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"reward_model.data.path {path}: 7 bad row(s), nothing was trained")
    for expected in (
        "line 2: missing 'chosen'",
        "line 4: empty 'rejected'",
        "line 5: unknown language 'xx'",
        "line 6: bad JSON (",
        "line 7: 'chosen'[0] must be a {role, content} message",
        "line 8: expected a JSON object",
        "line 9: 'chosen' and 'rejected' are identical",
    ):
        assert expected in message
    assert "line 1:" not in message and "line 3:" not in message
    assert "languages: " in message and " sv" in message  # the fix: which codes exist


def test_instruction_and_chat_messages_are_accepted(tmp_path):
    rows = [
        {
            "instruction": "Reverse: abc",
            "chosen": "cba",
            "rejected": "abc",
            "language": "en",
            "source": "hand",
        },
        {
            "prompt": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Sortera: b, a"},
            ],
            "chosen": [{"role": "assistant", "content": "a\nb"}],
            "rejected": [{"role": "assistant", "content": "b\na"}],
            "language": "sv",
        },
    ]
    path = write_lines(tmp_path / "p.jsonl", [json.dumps(r, ensure_ascii=False) for r in rows])
    first, second = load_pairs(path)
    assert first.prompt == [{"role": "user", "content": "Reverse: abc"}]
    assert first.chosen == [{"role": "assistant", "content": "cba"}]
    assert first.meta == {"source": "hand"}
    assert second.prompt[0]["role"] == "system" and second.language == "sv"
    # round trip through write_pairs
    again = load_pairs(write_pairs(tmp_path / "out.jsonl", [first, second]))
    assert [p.to_json() for p in again] == [first.to_json(), second.to_json()]


def test_the_list_of_bad_rows_is_capped_and_a_directory_reports_file_names(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_lines(data / "a.jsonl", [json.dumps(GOOD)] + ["{bad"] * (MAX_REPORTED + 5))
    write_lines(data / "b.jsonl", [json.dumps({**GOOD, "language": "tlh"})])
    with pytest.raises(UserError) as info:
        load_pairs(data)
    message = str(info.value)
    assert f"{MAX_REPORTED + 6} bad row(s)" in message
    assert "a.jsonl: line 2: bad JSON" in message and "... and 6 more" in message
    assert message.count("bad JSON") == MAX_REPORTED
    with pytest.raises(UserError, match="no such file"):
        load_pairs(tmp_path / "missing.jsonl")
    with pytest.raises(UserError, match="no preference rows"):
        load_pairs(write_lines(tmp_path / "empty.jsonl", ["", "  "]))


def test_heldout_split_is_stratified_by_language_and_deterministic():
    pairs = [
        PreferencePair([{"role": "user", "content": f"q{i}"}], [], [], "en" if i < 30 else "sv")
        for i in range(40)
    ]
    train, heldout = split_heldout(pairs, 0.2, seed=3)
    assert sorted(p.language for p in heldout) == ["en"] * 6 + ["sv"] * 2
    assert len(train) + len(heldout) == 40
    assert {id(p) for p in train}.isdisjoint({id(p) for p in heldout})
    train2, heldout2 = split_heldout(pairs, 0.2, seed=3)
    assert [p.prompt for p in heldout2] == [p.prompt for p in heldout]
    assert [p.prompt for p in split_heldout(pairs, 0.2, seed=4)[1]] != [p.prompt for p in heldout]


# ---- synthetic pairs ----------------------------------------------------------------------------


def test_item_and_format_corruptions():
    import random

    rng = random.Random(0)
    items = ["a", "b", "c", "d", "e", "f"]
    swapped = corrupt_items(items, "swap", 0.2, rng)
    assert sorted(swapped) == items and swapped != items
    assert len(corrupt_items(items, "drop", 0.5, rng)) == 3
    assert len(corrupt_items(items, "drop", 1.0, rng)) == 1  # at least one item stays
    duplicated = corrupt_items(items, "duplicate", 1.0, rng)
    assert sorted(duplicated) == sorted(items * 2)
    assert corrupt_items(["a", "a"], "swap", 1.0, rng) is None  # nothing to swap
    text = "<t>\na\nb\n</t>"
    assert corrupt_format(text, 0.0, random.Random(1)) in ("<t>\na\nb\n", "a\nb", "a, b")
    levels = {corrupt_format(text, s, random.Random(i)) for s in (0.0, 0.5, 1.0) for i in range(20)}
    assert levels == {"<t>\na\nb\n", "a\nb", "a, b"}  # lost closing tag, no tags, items on one line
    assert corrupt_format("no tags here", 1.0, rng) is None


@pytest.mark.parametrize(
    "env",
    [
        packaged_env("alphabet_sort", seed=1, num_train_examples=40),
        packaged_env("reverse_text", seed=1, num_train_examples=40),
        packaged_env("arithmetic", seed=1, num_train_examples=40),
    ],
    ids=lambda e: e.name,
)
def test_synthetic_pairs_are_reference_vs_worse_by_the_rubric(env):
    pairs = env_pairs(env, 40, 0.5, ["swap", "drop", "duplicate", "format"], seed=0)
    assert len(pairs) >= 30
    rows = {json.dumps(r.prompt): r for r in env.rows("train", 40)}
    kinds = set()
    for pair in pairs:
        row = rows[json.dumps(pair.prompt)]
        assert pair.chosen == env.reference_completion(row)
        chosen = env.rubric.total(env.score(row, pair.chosen))
        rejected = env.rubric.total(env.score(row, pair.rejected))
        assert rejected < chosen, pair.meta
        assert pair.language == "en" and pair.meta["source"] == f"synthetic:{env.name}"
        kinds.add(pair.meta["corruption"])
    assert len(kinds) >= 3
    again = env_pairs(env, 40, 0.5, ["swap", "drop", "duplicate", "format"], seed=0)
    assert [p.to_json() for p in again] == [p.to_json() for p in pairs]
    assert [p.rejected for p in env_pairs(env, 40, 0.5, ["swap", "drop", "duplicate", "format"], seed=1)] != [
        p.rejected for p in pairs
    ]


def test_severity_controls_how_much_of_the_answer_breaks():
    env = packaged_env("alphabet_sort", seed=2, num_train_examples=60, max_turns=3)

    def mean_rejected(severity: float) -> float:
        pairs = env_pairs(env, 60, severity, ["swap", "drop", "duplicate"], seed=0)
        rows = {json.dumps(r.prompt): r for r in env.rows("train", 60)}
        scores = [env.rubric.total(env.score(rows[json.dumps(p.prompt)], p.rejected)) for p in pairs]
        return sum(scores) / len(scores)

    mild, harsh = mean_rejected(0.0), mean_rejected(1.0)
    assert 0.5 < mild < 1.0 and harsh < mild - 0.2


def test_two_languages_and_the_wrong_language_corruption():
    def make_env(code: str) -> AlphabetSortEnv:
        return packaged_env("alphabet_sort", code, seed=0, num_train_examples=30, max_turns=1)

    pairs = synthetic_pairs(make_env, ["en", "sv"], n=30, severity=0.5, corruptions=["language"], seed=0)
    assert sorted({p.language for p in pairs}) == ["en", "sv"]
    en_env = make_env("en")
    en_answers = {json.dumps(en_env.reference_completion(r)) for r in en_env.rows("train", 30)}
    sv_pairs = [p for p in pairs if p.language == "sv"]
    assert sv_pairs and all(p.meta["corruption"] == "language" for p in sv_pairs)
    # an sv prompt answered with an English episode: the sv rubric scores it lower
    assert all(json.dumps(p.rejected) in en_answers for p in sv_pairs)
    assert corrupt_episode([{"role": "assistant", "content": "x"}], "language", 1.0, None, None) is None


def test_synthetic_cli_writes_a_jsonl_the_loader_accepts(tmp_path, capsys):
    out = tmp_path / "prefs.jsonl"
    main(
        [
            str(out),
            "+env=reverse_text",
            "reward_model.data.synthetic.n=12",
            "reward_model.data.synthetic.severity=1",
        ]
    )
    assert "wrote 12 preference pairs (en 12)" in capsys.readouterr().out
    pairs = load_pairs(out)
    assert len(pairs) == 12 and all(p.meta["severity"] == 1.0 for p in pairs)


def test_the_synthetic_command_writes_pairs_and_refuses_an_unknown_env(tmp_path):
    """A real process: `python -m grpo.cli.synthetic`."""
    command = "grpo.cli.synthetic"
    out = tmp_path / "prefs.jsonl"
    args = [str(out), "+env=arithmetic", "reward_model.data.synthetic.n=4"]
    done = subprocess.run(
        [sys.executable, "-m", command, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 4 preference pairs (en 4)" in done.stdout
    assert len(load_pairs(out)) == 4
    bad = subprocess.run(
        [sys.executable, "-m", command, str(out), "+env=nope"], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown env 'nope'")


# ---- config rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["reward_model=learned", "stages=[train]"],
            "needs a trained reward model: set reward_model.checkpoints",
        ),
        (["reward_model=learned", "stages=[train,reward_model]"], "needs a trained reward model"),
        # an evaluation would report no RM score column, silently
        (["reward_model=learned", "stages=[eval]"], "with stages=[eval] has no reward model to score with"),
        (["reward_model=learned_only", "stages=[eval,eval]"], "stages=[reward_model,eval]"),
        (
            ["reward_model=ensemble", "stages=[reward_model,train]"],
            "needs two or more reward_model.checkpoints",
        ),
        (["reward_model=learned", "reward_model.checkpoints=[a,b]"], "takes one checkpoint, got 2"),
        (["reward_model=learned", "reward_model.combine=max"], "reward_model.combine='max' is not one of"),
        (["reward_model.kind=lerned"], "reward_model.kind='lerned' is not one of"),
        (["stages=[reward_model]", "reward_model.data.synthetic.severity=2"], "severity=2.0 must be in"),
        (
            ["stages=[reward_model]", "reward_model.data.synthetic.corruptions=[typo]"],
            "use a non-empty subset",
        ),
        (
            ["stages=[reward_model]", "reward_model.data.synthetic.languages=[en,xx]"],
            "unknown language(s) xx",
        ),
        (["stages=[reward_model]", "reward_model.data.path=/no/such.jsonl"], "no such file"),
        (["stages=[reward_model]", "reward_model.data.heldout_fraction=1"], "must be in (0, 1)"),
        (
            [
                "stages=[reward_model]",
                "reward_model=learned",
                "reward_model.backbone.tokenizer_vocab_size=100",
            ],
            "tokenizer_vocab_size=100 must be 0 or >= 512",
        ),
    ],
)
def test_reward_model_config_rules(overrides, message):
    settings = load_settings(["+env=alphabet_sort", *overrides])
    with pytest.raises(UserError) as info:
        check(settings)
    assert message in str(info.value)


def test_a_run_that_trains_its_rm_first_needs_no_checkpoint():
    check(load_settings(["+env=alphabet_sort", "reward_model=learned", "stages=[reward_model,eval,train]"]))
    check(load_settings(["+env=alphabet_sort", "reward_model=learned", "stages=[reward_model,eval]"]))
    check(load_settings(["+env=alphabet_sort", "stages=[eval]"]))  # the rubric needs no RM


# ---- through the entry point --------------------------------------------------------------------


# the processes import this checkout's grpo whatever is installed
THIS_CHECKOUT = {"PYTHONPATH": str(REPO)}


@pytest.mark.slow
def test_bad_preference_rows_stop_the_run_before_training(tmp_path):
    data = write_lines(
        tmp_path / "prefs.jsonl",
        [
            json.dumps(GOOD),
            json.dumps({**GOOD, "chosen": ""}),
            "not json",
            json.dumps({**GOOD, "language": "xx"}),
        ],
    )
    proc = run_grpo(
        [
            "+env=alphabet_sort",
            "stages=[reward_model]",
            f"reward_model.data.path={data}",
            f"output_root={tmp_path / 'out'}",
            "hydra.run.dir=" + str(tmp_path / "out" / "run"),
        ],
        cwd=tmp_path,
        env_extra=THIS_CHECKOUT,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: reward_model.data.path"), proc.stderr
    for expected in ("line 2: empty 'chosen'", "line 3: bad JSON", "line 4: unknown language 'xx'"):
        assert expected in lines[0]
    rm_dir = tmp_path / "out" / "run" / "reward_model"
    assert not (rm_dir / RM_META_FILE).exists() and not (rm_dir / "model.safetensors").exists()


def test_a_missing_checkpoint_is_a_one_line_error(tmp_path):
    proc = run_grpo(
        [
            "+env=alphabet_sort",
            "reward_model=learned",
            f"reward_model.checkpoints=[{tmp_path / 'no_rm'}]",
            "stages=[train]",
            f"output_root={tmp_path / 'out'}",
        ],
        cwd=tmp_path,
        env_extra=THIS_CHECKOUT,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"error: reward_model.checkpoints[0]={tmp_path / 'no_rm'}: no such directory; point it at a reward_model "
        "stage's output (outputs/runs/<date>/<time>/reward_model)"
    ]
