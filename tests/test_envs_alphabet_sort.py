"""alphabet_sort: prompts, expected answers and scores written out by hand, the multi-turn protocol,
determinism, and the names sources."""

from __future__ import annotations

import difflib
import json
import random
import re

import pytest
from helpers.packaged_env import packaged_config, packaged_env

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.envs.alphabet_sort import AlphabetSortEnv
from grpo.envs.base import Row
from grpo.envs.names import second_capital_split
from grpo.errors import UserError
from grpo.languages.names import Name

# a fixed 3-turn row: "adaLovelace" (lower-case first letter) sorts after every capitalised name
TURN_NAMES = [["ZoeAdams", "adaLovelace", "BobBrown"], ["AliceCooper"], ["CarlDavis", "BethEvans"]]
SHOWN = [["adaLovelace", "ZoeAdams", "BobBrown"], ["AliceCooper"], ["CarlDavis", "BethEvans"]]

PROMPT_1 = (
    "Sort these names in alphabetical order by FIRST name: adaLovelace, ZoeAdams, BobBrown\n"
    "\n"
    "Use exactly this format:\n"
    "<alphabetical_sorted>\n"
    "Name1\n"
    "Name2\n"
    "Name3\n"
    "</alphabetical_sorted>"
)
PROMPT_2 = (
    "Now sort ALL of these names alphabetically by FIRST name: AliceCooper\n"
    "\n"
    "These are in addition to the prior list. Mark any NEW names (that weren't in the prior list) "
    "with `// new name!` at the end.\n"
    "\n"
    "Use exactly this format:\n"
    "<combined_alphabetical_sorted>\n"
    "Name1\n"
    "Name2\n"
    "Name3\n"
    "Name4 // new name!\n"
    "</combined_alphabetical_sorted>"
)
PROMPT_3 = (
    "Now sort ALL of these names alphabetically by FIRST name: CarlDavis, BethEvans\n"
    "\n"
    "These are in addition to the prior list. Mark any NEW names (that weren't in the prior list) "
    "with `// new name!` at the end. Follow the same format as before."
)
TRUTH_1 = ["BobBrown", "ZoeAdams", "adaLovelace"]
TRUTH_2 = ["AliceCooper // new name!", "BobBrown", "ZoeAdams", "adaLovelace"]
TRUTH_3 = [
    "AliceCooper",
    "BethEvans // new name!",
    "BobBrown",
    "CarlDavis // new name!",
    "ZoeAdams",
    "adaLovelace",
]
ANSWER_1 = "<alphabetical_sorted>\nBobBrown\nZoeAdams\nadaLovelace\n</alphabetical_sorted>"
ANSWER_2 = (
    "<combined_alphabetical_sorted>\nAliceCooper // new name!\nBobBrown\nZoeAdams\nadaLovelace\n"
    "</combined_alphabetical_sorted>"
)
ANSWER_3 = (
    "<combined_alphabetical_sorted>\nAliceCooper\nBethEvans // new name!\nBobBrown\nCarlDavis // new name!\n"
    "ZoeAdams\nadaLovelace\n</combined_alphabetical_sorted>"
)


@pytest.fixture(scope="module")
def env() -> AlphabetSortEnv:
    return packaged_env("alphabet_sort", seed=0, num_train_examples=50, num_eval_examples=20)


def fixed_row() -> Row:
    return Row(
        id=0,
        prompt=[{"role": "user", "content": PROMPT_1}],
        info={
            "turn_names": TURN_NAMES,
            "ground_truths": [TRUTH_1, TRUTH_2, TRUTH_3],
            "follow_ups": [PROMPT_2, PROMPT_3],
            "num_turns": 3,
        },
    )


def episode(*answers: str) -> list[dict[str, str]]:
    """Assistant answers with the fixed row's follow-up user turns between them."""
    messages: list[dict[str, str]] = []
    for turn, answer in enumerate(answers):
        if turn:
            messages.append({"role": "user", "content": [PROMPT_2, PROMPT_3][turn - 1]})
        messages.append({"role": "assistant", "content": answer})
    return messages


def reward(env: AlphabetSortEnv, completion: list[dict[str, str]]) -> float:
    return env.score(fixed_row(), completion)["alphabet_sort_reward"]


def ratio(pred: str, exp: str) -> float:
    return difflib.SequenceMatcher(None, pred, exp).ratio()


# ---- prompts and expected answers ------------------------------------------------------------


def test_prompts_of_turns_1_2_3_written_out(env):
    assert env.turn_prompts(TURN_NAMES, SHOWN) == [PROMPT_1, PROMPT_2, PROMPT_3]


def test_expected_answers_sorted_by_code_point_with_new_names_marked(env):
    assert env.ground_truths(TURN_NAMES) == [TRUTH_1, TRUTH_2, TRUTH_3]


def test_generated_rows_are_consistent_with_their_prompts(env):
    for row in env.rows("train"):
        turns = row.info["turn_names"]
        assert (
            row.info["num_turns"]
            == len(turns)
            == len(row.info["ground_truths"])
            == len(row.info["follow_ups"]) + 1
        )
        assert 1 <= len(turns) <= 3 and all(1 <= len(t) <= 5 for t in turns)
        everyone = [n for t in turns for n in t]
        assert len(set(everyone)) == len(everyone) and all(" " not in n for n in everyone)
        # the names shown in each prompt are exactly that turn's names
        texts = [row.prompt[0]["content"], *row.info["follow_ups"]]
        for names, text in zip(turns, texts, strict=True):
            shown = re.match(r".*? by FIRST name: (.*)\n", text).group(1).split(", ")
            assert sorted(shown) == sorted(names)
        assert row.info["ground_truths"][-1] == sorted(
            [n + " // new name!" if n in turns[-1] and len(turns) > 1 else n for n in everyone],
            key=lambda line: line.removesuffix(" // new name!"),
        )
        json.dumps(row.info)  # goes to results.jsonl


def test_turn_count_and_names_per_turn_follow_the_bounds():
    env = packaged_env(
        "alphabet_sort",
        min_turns=2,
        max_turns=2,
        min_names_per_turn=4,
        max_names_per_turn=4,
        num_train_examples=30,
    )
    for row in env.rows("train"):
        assert row.info["num_turns"] == 2 and [len(t) for t in row.info["turn_names"]] == [4, 4]
    counts = {
        r.info["num_turns"] for r in packaged_env("alphabet_sort", num_train_examples=100).rows("train")
    }
    assert counts == {1, 2, 3}


# ---- determinism ---------------------------------------------------------------------------------


def test_rows_deterministic_per_seed_and_splits_differ():
    a = packaged_env("alphabet_sort", seed=3, num_train_examples=10, num_eval_examples=10)
    b = packaged_env("alphabet_sort", seed=3, num_train_examples=10, num_eval_examples=10)
    c = packaged_env("alphabet_sort", seed=4, num_train_examples=10, num_eval_examples=10)
    assert a.rows("train") == b.rows("train")
    assert a.rows("train") != c.rows("train")
    assert a.rows("train") != a.rows("eval")
    assert a.rows("train", 4) == a.rows("train")[:4]
    assert all(r.language == "en" for r in a.rows("eval"))


def test_unsupported_language_is_a_user_error():
    with pytest.raises(UserError, match=r"^language: unknown language 'xx'; available: ar, de, en, "):
        packaged_env("alphabet_sort", language="xx")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_turns": 0}, "min_turns"),
        ({"min_turns": 3, "max_turns": 2}, "max_turns"),
        ({"max_names_per_turn": "many"}, "max_names_per_turn"),
        ({"similarity_power": 0}, "similarity_power"),
        ({"num_train_examples": 0}, "num_train_examples"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(UserError, match=rf"^env\.{field}: "):
        packaged_env("alphabet_sort", **kwargs)


# ---- the multi-turn protocol -----------------------------------------------------------------------


def test_env_response_gives_follow_ups_then_ends(env):
    row = fixed_row()
    state = env.initial_state(row)
    assert state == {"turn": 0, "num_turns": 3}
    messages = [*row.prompt, {"role": "assistant", "content": ANSWER_1}]
    assert env.env_response(messages, state, row) == [{"role": "user", "content": PROMPT_2}]
    assert state["turn"] == 1
    messages += [{"role": "user", "content": PROMPT_2}, {"role": "assistant", "content": ANSWER_2}]
    assert env.env_response(messages, state, row) == [{"role": "user", "content": PROMPT_3}]
    messages += [{"role": "user", "content": PROMPT_3}, {"role": "assistant", "content": ANSWER_3}]
    assert env.env_response(messages, state, row) is None
    assert state["turn"] == 3


def test_reference_completion_is_the_perfect_episode(env):
    assert env.reference_completion(fixed_row()) == episode(ANSWER_1, ANSWER_2, ANSWER_3)
    for row in env.rows("eval"):
        completion = env.reference_completion(row)
        assert env.score(row, completion) == {"alphabet_sort_reward": 1.0}
        assert sum(m["role"] == "assistant" for m in completion) == row.info["num_turns"]


# ---- scores of crafted completions, computed by hand with difflib on literal strings -------------


def test_perfect_episode_scores_one(env):
    assert reward(env, episode(ANSWER_1, ANSWER_2, ANSWER_3)) == 1.0


def test_one_swap_in_turn_3(env):
    swapped = ANSWER_3.replace("BethEvans // new name!\nBobBrown", "BobBrown\nBethEvans // new name!")
    r = ratio(
        "alicecooper\nbobbrown\nbethevans // new name!\ncarldavis // new name!\nzoeadams\nadalovelace",
        "alicecooper\nbethevans // new name!\nbobbrown\ncarldavis // new name!\nzoeadams\nadalovelace",
    )
    assert 0 < r < 1
    assert reward(env, episode(ANSWER_1, ANSWER_2, swapped)) == pytest.approx((1 + 1 + r**4) / 3, abs=1e-15)


def test_missing_tag_scores_that_turn_zero(env):
    untagged = "BobBrown\nZoeAdams\nadaLovelace"
    assert reward(env, episode(untagged, ANSWER_2, ANSWER_3)) == pytest.approx(2 / 3)
    # turn 1's tag in turn 2 is not turn 2's tag
    wrong_tag = ANSWER_2.replace("combined_alphabetical_sorted", "alphabetical_sorted")
    assert reward(env, episode(ANSWER_1, wrong_tag, ANSWER_3)) == pytest.approx(2 / 3)


def test_last_of_several_tags_counts(env):
    draft = "<alphabetical_sorted>\nZoeAdams\nBobBrown\n</alphabetical_sorted>"
    assert reward(env, episode(draft + "\nfixed:\n" + ANSWER_1, ANSWER_2, ANSWER_3)) == 1.0
    r = ratio("zoeadams\nbobbrown", "bobbrown\nzoeadams\nadalovelace")
    assert reward(env, episode(ANSWER_1 + "\n" + draft, ANSWER_2, ANSWER_3)) == pytest.approx(
        (r**4 + 2) / 3, abs=1e-15
    )


def test_case_and_surrounding_whitespace_do_not_matter(env):
    shouting = ANSWER_1.replace("BobBrown\nZoeAdams\nadaLovelace", "BOBBROWN\nzoeadams\nAdaLovelace")
    spaced = "<alphabetical_sorted>\n\n   BobBrown  \n\tZoeAdams\n\n adaLovelace\t\n\n</alphabetical_sorted>"
    assert reward(env, episode(shouting, ANSWER_2, ANSWER_3)) == 1.0
    assert reward(env, episode(spaced, ANSWER_2, ANSWER_3)) == 1.0


def test_missing_turns_count_zero(env):
    assert reward(env, episode(ANSWER_1, ANSWER_2)) == pytest.approx(2 / 3)
    assert reward(env, episode(ANSWER_1)) == pytest.approx(1 / 3)
    assert reward(env, []) == 0.0


def test_missing_new_name_marks_and_empty_block(env):
    unmarked = ANSWER_2.replace(" // new name!", "")
    r = ratio(
        "alicecooper\nbobbrown\nzoeadams\nadalovelace",
        "alicecooper // new name!\nbobbrown\nzoeadams\nadalovelace",
    )
    empty = "<alphabetical_sorted>\n \n</alphabetical_sorted>"
    assert reward(env, episode(ANSWER_1, unmarked, ANSWER_3)) == pytest.approx((1 + r**4 + 1) / 3, abs=1e-15)
    assert reward(env, episode(empty, ANSWER_2, ANSWER_3)) == pytest.approx(2 / 3)


def test_similarity_power_applies_per_turn():
    linear = packaged_env("alphabet_sort", similarity_power=1)
    missing_one = "<alphabetical_sorted>\nBobBrown\nadaLovelace\n</alphabetical_sorted>"
    r = ratio("bobbrown\nadalovelace", "bobbrown\nzoeadams\nadalovelace")
    assert reward(linear, episode(missing_one, ANSWER_2, ANSWER_3)) == pytest.approx((r + 2) / 3, abs=1e-15)


def test_turn_scores_for_logging(env):
    assert env.turn_scores(episode(ANSWER_1, "nothing"), fixed_row().info) == [1.0, 0.0, 0.0]


def spec_reward(completion: list[dict], info: dict, power: float, count_names: bool = False) -> float:
    """The spec written out independently with re + difflib (what an external grader does);
    `count_names`: grpo's option, the first n distinct lines, their similarity times the share of
    the n names they fill, to the power, times n / (n + the other lines)."""
    answers = [m["content"] for m in completion if m["role"] == "assistant"]
    total = 0.0
    for turn in range(1, info["num_turns"] + 1):
        tag = "alphabetical_sorted" if turn == 1 else "combined_alphabetical_sorted"
        found = (
            re.findall(f"<{tag}>(.*?)</{tag}>", answers[turn - 1], re.DOTALL) if turn <= len(answers) else []
        )
        lines = [s.strip().lower() for s in found[-1].split("\n") if s.strip()] if found else []
        if lines:
            expected = "\n".join(s.strip().lower() for s in info["ground_truths"][turn - 1])
            factor, filled = 1.0, 1.0
            if count_names:
                n = len(info["ground_truths"][turn - 1])
                kept = list(dict.fromkeys(lines))[:n]
                factor, filled, lines = n / (n + len(lines) - len(kept)), len(kept) / n, kept
            similarity = difflib.SequenceMatcher(None, "\n".join(lines), expected).ratio()
            total += (similarity * filled) ** power * factor
    return total / info["num_turns"]


def perturb(completion: list[dict], rng: random.Random) -> list[dict]:
    out = [dict(m) for m in completion]
    for m in out:
        if m["role"] != "assistant":
            continue
        lines = m["content"].split("\n")
        for _ in range(rng.randint(0, 3)):
            i = rng.randrange(1, max(2, len(lines) - 1))
            op = rng.randrange(5)
            if op == 0 and len(lines) > 3:
                del lines[i]
            elif op == 1 and i + 1 < len(lines) - 1:
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
            elif op == 2:
                lines.insert(i, rng.choice(["JohnDoe", "", "  x ", "<alphabetical_sorted>"]))
            elif op == 3:
                lines[i] = lines[i].replace(" // new name!", "")
            else:
                lines[i] = lines[i][: len(lines[i]) // 2]
        m["content"] = "\n".join(lines)
    return out[: rng.randint(0, len(out))] if rng.random() < 0.2 else out


@pytest.mark.parametrize("count_names", [True, False])
def test_matches_an_independent_implementation_of_the_spec(count_names):
    # long rows too: from 200 characters on, difflib's autojunk changes the ratio
    env = packaged_env(
        "alphabet_sort", min_turns=3, max_turns=3, max_names_per_turn=7, num_eval_examples=60, seed=11,
        count_names=count_names,
    )  # fmt: skip
    rng = random.Random(0)
    differ = 0
    for row in env.rows("eval"):
        for _ in range(10):
            completion = perturb(env.reference_completion(row), rng)
            got = env.score(row, completion)["alphabet_sort_reward"]
            assert got == pytest.approx(spec_reward(completion, row.info, 4, count_names), abs=1e-12)
            differ += got != pytest.approx(spec_reward(completion, row.info, 4, not count_names), abs=1e-12)
    assert differ > 50  # the perturbations insert lines: the two scorings part on many of them


def test_the_default_scores_as_the_hubs_0_1_5_with_padding_and_repeats():
    """+env=alphabet_sort as composed, no option set: scripted completions that pad, repeat names,
    add names never given and drop some score exactly as an independent implementation of 0.1.5
    (every line of the block in the similarity), and padding pays there as 0.1.5's did; the
    recipes that turn grpo's count_names on by name score otherwise."""
    settings = load_settings(
        ["+env=alphabet_sort", "env.min_turns=2", "env.max_turns=3", "env.num_eval_examples=30"]
    )
    assert settings.env["count_names"] is False
    env = build_env(settings.env, settings.language)
    counting = build_env({**settings.env, "count_names": True}, settings.language)
    parted = 0
    for row in env.rows("eval"):
        reference = env.reference_completion(row)
        scripted = []
        for edit in ("repeat last", "repeat first", "extra name", "drop one"):
            completion = [dict(m) for m in reference]
            for m in completion:
                if m["role"] != "assistant":
                    continue
                head, _, rest = m["content"].partition("\n")
                lines, _, tail = rest.rpartition("\n")
                names = lines.split("\n")
                if edit == "repeat last":
                    names.append(names[-1])
                elif edit == "repeat first":
                    names.insert(0, names[0])
                elif edit == "extra name":
                    names.append("Zelda Zimmerman")
                elif len(names) > 1:
                    names.pop(len(names) // 2)
                m["content"] = "\n".join([head, *names, tail])
            scripted.append(completion)
        for completion in scripted:
            got = env.score(row, completion)["alphabet_sort_reward"]
            assert got == pytest.approx(spec_reward(completion, row.info, 4, count_names=False), abs=1e-12)
        # grpo's count_names scores the same repeat otherwise: the default is not it
        counted = counting.score(row, scripted[0])["alphabet_sort_reward"]
        parted += counted != pytest.approx(env.score(row, scripted[0])["alphabet_sort_reward"], abs=1e-9)
    assert parted == len(env.rows("eval"))
    for recipe in ("alphabet_sort_cpu", "alphabet_sort_cpu_full", "alphabet_sort_multilingual"):
        assert load_settings([f"+experiment={recipe}"]).env["count_names"] is True, recipe
    for hub in ("alphabet_sort_hub_recipe", "alphabet_sort_hub_recipe_cpu"):
        assert load_settings([f"+experiment={hub}"]).env["count_names"] is False, hub


# ---- count_names: padding never pays, in any language ---------------------------------------------

LANGUAGES = ("en", "de", "fr", "es", "sv", "ru", "ar", "hi", "zh", "ja", "ko")


def one_turn_answer(lines: list[str]) -> list[dict]:
    return [
        {
            "role": "assistant",
            "content": "<alphabetical_sorted>\n" + "\n".join(lines) + "\n</alphabetical_sorted>",
        }
    ]


def weak_answers(truth: list[str], rng: random.Random) -> list[list[str]]:
    """Answers a weak model writes: names dropped, swapped, cut or garbled, in the row's script."""
    out = []
    for _ in range(12):
        lines = list(truth)
        for _ in range(rng.randint(0, 3)):
            i = rng.randrange(len(lines)) if lines else 0
            op = rng.randrange(4)
            if op == 0 and len(lines) > 1:
                del lines[i]
            elif op == 1 and len(lines) > 1:
                j = rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
            elif op == 2 and lines:
                lines[i] = lines[i][: max(1, len(lines[i]) // 2)]
            elif lines:
                lines[i] = lines[i][::-1]
        out.append(lines)
    return out


@pytest.mark.parametrize("language", LANGUAGES)
def test_repeated_or_extra_names_never_raise_the_score(language):
    env = packaged_env(
        "alphabet_sort", language=language, min_turns=1, max_turns=1, min_names_per_turn=2,
        max_names_per_turn=5, num_eval_examples=40, count_names=True,
    )  # fmt: skip
    legacy = packaged_env(  # the default: 0.1.5's scoring
        "alphabet_sort", language=language, min_turns=1, max_turns=1, min_names_per_turn=2,
        max_names_per_turn=5, num_eval_examples=40,
    )  # fmt: skip
    rng = random.Random(language)
    paid_before = 0
    for row in env.rows("eval"):
        truth = row.info["ground_truths"][0]
        assert env.score(row, one_turn_answer(truth))["alphabet_sort_reward"] == 1.0
        for lines in weak_answers(truth, rng):
            if not lines:
                continue

            def score(answer: list[str], scorer=env, row=row) -> float:
                return scorer.score(row, one_turn_answer(answer))["alphabet_sort_reward"]

            base = score(lines)
            repeated = [*lines, lines[-1]]  # the last line again: what GRPO learned under 0.1.5
            assert score(repeated) < base or base == 0.0
            paid_before += score(repeated, legacy) > score(lines, legacy)
            twice = lines[:1] + lines  # a repeat anywhere
            assert score(twice) < base or base == 0.0
            if len(set(lines)) >= len(truth):  # every name place filled: one more line is padding
                for extra in (truth[0], "x", rng.choice(truth)[::-1]):
                    assert score([*lines, extra]) < base or base == 0.0
    assert paid_before > 0  # 0.1.5's scoring did pay for repeating a line in this language


@pytest.mark.parametrize("language", LANGUAGES)
def test_leaving_a_name_out_never_pays_more_than_listing_it_anywhere(language):
    """GRPO learned to drop the names it could not place (docs/results.md): under count_names an
    answer missing one name scores below the same answer with that name at its worst place."""
    settings = dict(
        language=language, min_turns=1, max_turns=1, min_names_per_turn=2, max_names_per_turn=5,
        num_eval_examples=30,
    )  # fmt: skip
    env = packaged_env("alphabet_sort", count_names=True, **settings)
    hub = packaged_env("alphabet_sort", **settings)  # the default: 0.1.5's scoring
    paid_before = 0
    for row in env.rows("eval"):
        truth = row.info["ground_truths"][0]
        for i, name in enumerate(truth):
            short = truth[:i] + truth[i + 1 :]
            placed = [short[:j] + [name] + short[j:] for j in range(len(short) + 1) if j != i]

            def score(answer: list[str], scorer=env, row=row) -> float:
                return scorer.score(row, one_turn_answer(answer))["alphabet_sort_reward"]

            assert score(short) < min(score(answer) for answer in placed), (truth, name)
            paid_before += score(short, hub) > min(score(answer, hub) for answer in placed)
    assert paid_before > 0  # the similarity alone paid for leaving a name out in this language


# ---- names sources -----------------------------------------------------------------------------------

NAMES = [f"Person{c}{d} Surname{c}" for c in "ABCDEFGH" for d in "xyz"]  # 24 names with a space


def names_in_rows(env: AlphabetSortEnv) -> set[str]:
    return {n for row in env.rows("train") for turn in row.info["turn_names"] for n in turn}


def check_pool(env: AlphabetSortEnv) -> None:
    used = names_in_rows(env)
    assert used and used <= {n.replace(" ", "") for n in NAMES}


def test_names_from_txt_jsonl_json_csv(tmp_path):
    (tmp_path / "n.txt").write_text("\n".join(NAMES) + "\n\n")
    (tmp_path / "n.jsonl").write_text(
        "\n".join(json.dumps({"names": NAMES[i : i + 3]}) for i in range(0, 24, 3))
    )
    (tmp_path / "n.json").write_text(json.dumps([{"names": n} for n in NAMES]))
    (tmp_path / "n.csv").write_text("id,names\n" + "\n".join(f"{i},{n}" for i, n in enumerate(NAMES)))
    for name in ["n.txt", "n.jsonl", "n.json", "n.csv"]:
        check_pool(packaged_env("alphabet_sort", names_source=str(tmp_path / name), num_train_examples=20))


def test_names_from_a_saved_dataset_dir(tmp_path):
    from datasets import Dataset

    Dataset.from_dict({"names": [NAMES[i : i + 4] for i in range(0, 24, 4)]}).save_to_disk(
        str(tmp_path / "ds")
    )
    check_pool(packaged_env("alphabet_sort", names_source=str(tmp_path / "ds"), num_train_examples=20))


def test_missing_names_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=r"names_source .*missing\.txt.*file not found"):
        packaged_env("alphabet_sort", names_source=str(tmp_path / "missing.txt"))


def test_unreachable_hub_dataset_is_a_user_error():
    with pytest.raises(UserError, match=r"names_source 'nobody/no-such-names'.*hub"):
        packaged_env("alphabet_sort", names_source="nobody/no-such-names")


def test_bad_names_files_are_user_errors(tmp_path):
    (tmp_path / "few.txt").write_text("OnlyOne\nTwo Names\n")
    (tmp_path / "col.csv").write_text("name\nA\n")
    (tmp_path / "bad.jsonl").write_text('{"names": 3}\n')
    with pytest.raises(UserError, match=r"has 2 distinct names but a row can need 15"):
        packaged_env("alphabet_sort", names_source=str(tmp_path / "few.txt"))
    with pytest.raises(UserError, match=r"no `names` column"):
        packaged_env("alphabet_sort", names_source=str(tmp_path / "col.csv"))
    with pytest.raises(UserError, match=r"record 0: `names` must be a string or a list of strings"):
        packaged_env("alphabet_sort", names_source=str(tmp_path / "bad.jsonl"))


# ---- the Hub's later scoring options: multi_attempt (0.1.6 on), power_per_turn (0.1.8) ----------

WORSE_1 = "<alphabetical_sorted>\nZoeAdams\nBobBrown\nadaLovelace\n</alphabetical_sorted>"


def later_env(**options) -> AlphabetSortEnv:
    return packaged_env("alphabet_sort", seed=0, num_train_examples=5, num_eval_examples=5, **options)


def test_multi_attempt_improving_attempts_score_the_last_one():
    env = later_env(multi_attempt=True)
    r_worse = ratio("zoeadams\nbobbrown\nadalovelace", "bobbrown\nzoeadams\nadalovelace")
    assert 0 < r_worse < 1
    # worse then perfect: improving, the turn scores the last attempt (1.0); turns 2-3 unanswered
    assert reward(env, episode(WORSE_1 + "\n" + ANSWER_1)) == pytest.approx(1 / 3)
    # an empty block scores 0, so a real attempt after it improves on it
    empty = "<alphabetical_sorted>\n</alphabetical_sorted>"
    assert reward(env, episode(empty + ANSWER_1)) == pytest.approx(1 / 3)
    # one block: the same as 0.1.5
    assert reward(env, episode(WORSE_1)) == pytest.approx(r_worse**4 / 3)
    # with the default (0.1.5) the last block is the answer, whatever came before it
    assert reward(later_env(), episode(ANSWER_1 + WORSE_1)) == pytest.approx(r_worse**4 / 3)


def test_multi_attempt_non_improving_attempts_score_zero():
    env = later_env(multi_attempt=True)
    assert reward(env, episode(ANSWER_1 + "\n" + WORSE_1)) == 0.0  # perfect, then worse
    assert reward(env, episode(ANSWER_1 + ANSWER_1)) == 0.0  # equal is not an improvement
    # a non-improving turn 2 costs that turn only
    two = episode(ANSWER_1, ANSWER_2 + ANSWER_2)
    assert reward(env, two) == pytest.approx(1 / 3)
    assert reward(later_env(), two) == pytest.approx(2 / 3)


def test_power_per_turn_on_and_off():
    # turn 1 perfect, turn 2 a wrong order, turn 3 unanswered
    wrong_2 = ANSWER_2.replace("AliceCooper // new name!\nBobBrown", "BobBrown\nAliceCooper // new name!")
    r2 = ratio(
        "bobbrown\nalicecooper // new name!\nzoeadams\nadalovelace",
        "alicecooper // new name!\nbobbrown\nzoeadams\nadalovelace",
    )
    assert 0 < r2 < 1
    completion = episode(ANSWER_1, wrong_2)
    on = later_env(power_per_turn=True)
    off = later_env(power_per_turn=False)
    assert reward(on, completion) == pytest.approx((1.0 + r2**4 + 0.0) / 3)
    assert reward(off, completion) == pytest.approx(((1.0 + r2 + 0.0) / 3) ** 4)
    assert on.turn_scores(completion, fixed_row().info) == pytest.approx([1.0, r2**4, 0.0])
    assert off.turn_scores(completion, fixed_row().info) == pytest.approx([1.0, r2, 0.0])
    # a perfect episode scores 1 either way
    perfect = episode(ANSWER_1, ANSWER_2, ANSWER_3)
    assert reward(on, perfect) == reward(off, perfect) == 1.0


@pytest.mark.parametrize(("key", "value"), [("multi_attempt", "yes"), ("power_per_turn", 1)])
def test_scoring_options_take_booleans_only(key, value):
    with pytest.raises(UserError, match=rf"env\.{key}: expected true or false, got"):
        later_env(**{key: value})


# ---- sort by FIRST or LAST name (0.1.6 on), random templates (0.1.7), version presets -----------


def test_second_capital_split_of_first_last_names():
    assert second_capital_split("JohnMcDonald") == ("John", "McDonald")
    assert second_capital_split("DeAndreSmith") == ("De", "AndreSmith")
    assert second_capital_split("madonna") == ("madonna", "")


def test_english_sorts_by_last_name_split_at_the_second_capital():
    env = later_env(sort_by="last")
    names = ["JohnMcDonald", "AmyZane", "ZoeAdams", "DeAndreSmith"]
    # last names McDonald, Zane, Adams, AndreSmith in code-point order
    assert env.sort_names(names, by="last") == ["ZoeAdams", "DeAndreSmith", "JohnMcDonald", "AmyZane"]
    assert env.sort_names(names, by="first") == ["AmyZane", "DeAndreSmith", "JohnMcDonald", "ZoeAdams"]
    assert env.sort_names(names) == ["AmyZane", "DeAndreSmith", "JohnMcDonald", "ZoeAdams"]  # 0.1.5


def test_other_languages_sort_by_given_or_family_name_in_their_collation():
    de = packaged_env("alphabet_sort", language="de", num_train_examples=5, num_eval_examples=5)
    names = ["Anna Zimmer", "Bert Adler", "Carla Meier"]
    assert de.sort_names(names, by="last") == ["Bert Adler", "Carla Meier", "Anna Zimmer"]
    assert de.sort_names(names, by="first") == names
    sv = packaged_env("alphabet_sort", language="sv", num_train_examples=5, num_eval_examples=5)
    names = ["Åsa Berg", "Olle Ås", "Anna Öberg"]  # sv: å ä ö after z
    assert sv.sort_names(names, by="last") == ["Åsa Berg", "Olle Ås", "Anna Öberg"]
    assert sv.sort_names(names, by="first") == ["Anna Öberg", "Olle Ås", "Åsa Berg"]
    # ja writes the family name first; both parts sort by their kana reading
    ja = packaged_env("alphabet_sort", language="ja", num_train_examples=5, num_eval_examples=5)
    names = ["後藤 治", "加藤 舞"]  # ゴトウ オサム, カトウ マイ
    assert ja.sort_names(names, by="last") == ["加藤 舞", "後藤 治"]
    assert ja.sort_names(names, by="first") == ["後藤 治", "加藤 舞"]


def test_chinese_parts_come_from_the_drawn_names():
    zh = packaged_env("alphabet_sort", language="zh", num_train_examples=5, num_eval_examples=5)

    def full(family: str, given: str) -> Name:
        return Name(family + given, family + given, (Name(family, family), Name(given, given)))

    wang_an, li_wei = full("王", "安"), full("李", "伟")  # wáng ān, lǐ wěi
    assert zh.sort_names([wang_an, li_wei], by="last") == ["李伟", "王安"]
    assert zh.sort_names([wang_an, li_wei], by="first") == ["王安", "李伟"]
    # a plain string written without a separator cannot be split: one clear line
    with pytest.raises(
        UserError, match=r"env\.sort_by: cannot tell the given from the family name in '王安'"
    ):
        zh.sort_names(["王安", "李伟"], by="first")


@pytest.mark.parametrize("language", ["en", "de", "ja", "zh"])
def test_random_sort_rows_say_which_name_and_sort_by_it(language):
    env = packaged_env(
        "alphabet_sort", language=language, sort_by="random", num_train_examples=40, num_eval_examples=5
    )
    prompts = env.prompts_for(env.spec)
    seen = set()
    for row in env.rows("train"):
        by = row.info["sort_by"]
        seen.add(by)
        key = "first_turn_by_family" if by == "last" else "first_turn"
        head = prompts[key].split("{names}")[0]
        assert row.prompt[0]["content"].startswith(head)
        cumulative = [n for names in row.info["turn_names"] for n in names]
        last_truth = [line.removesuffix(" // new name!") for line in row.info["ground_truths"][-1]]
        if language != "zh":  # zh names have no separator: their parts live in the drawn Names
            assert last_truth == env.sort_names(cumulative, row_language(env, row), by=by)
        assert sorted(last_truth) == sorted(cumulative)
        # the reference answer scores 1
        assert env.score(row, env.reference_completion(row))["alphabet_sort_reward"] == 1.0
    assert seen == {"first", "last"}


def row_language(env, row):
    return env.row_spec("train", row.id)


def test_rows_never_share_the_sorted_part():
    env = later_env(sort_by="last", max_turns=3, max_names_per_turn=5)
    for row in env.rows("train"):
        everyone = [n for names in row.info["turn_names"] for n in names]
        lasts = [second_capital_split(n)[1] for n in everyone]
        assert len(set(lasts)) == len(lasts)


def test_random_template_counts():
    env = later_env(random_template_count=True, min_turns=2, max_turns=2)
    differs = 0
    for row in env.rows("train"):
        first = row.prompt[0]["content"]
        lines = re.findall(r"^Name(\d+)$", first, re.MULTILINE)
        assert 1 <= len(lines) <= 5
        differs += len(lines) != len(row.info["turn_names"][0])
        second = row.info["follow_ups"][0]
        template = re.findall(r"^Name(\d+)( // new name!)?$", second, re.MULTILINE)
        so_far = len(row.info["turn_names"][0]) + len(row.info["turn_names"][1])
        assert 1 <= len(template) <= so_far and template[-1][1]  # the last line is always marked new
    assert differs > 0  # not the real counts (0.1.5 shows exactly them)
    plain = later_env(min_turns=2, max_turns=2)
    for row in plain.rows("train"):
        lines = re.findall(r"^Name(\d+)$", row.prompt[0]["content"], re.MULTILINE)
        assert len(lines) == len(row.info["turn_names"][0])


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("alphabet_sort_v0_1_6", (True, "random", False, True, False)),
        ("alphabet_sort_v0_1_7", (True, "random", True, True, False)),
        ("alphabet_sort_v0_1_8", (True, "random", True, True, False)),
    ],
)
def test_version_presets(preset, expected):
    cfg = packaged_config(preset)
    assert (
        cfg["multi_attempt"],
        cfg["sort_by"],
        cfg["random_template_count"],
        cfg["power_per_turn"],
        cfg["count_names"],
    ) == expected
    assert cfg["name"] == preset and cfg["prompts"]["sv"]  # every language's prompts come along
    for language in ("en", "ko"):
        env = packaged_env(preset, language=language, num_train_examples=10, num_eval_examples=5)
        for row in env.rows("train"):
            assert env.score(row, env.reference_completion(row))["alphabet_sort_reward"] == 1.0


def test_sort_by_takes_known_values_only():
    with pytest.raises(
        UserError, match=r"env\.sort_by: expected one of null, first, last, random, got 'given'"
    ):
        later_env(sort_by="given")
