"""Preference rounds on the policy's own samples: a round samples the real tiny policy, asks a
scripted labeler with known answers about the pairs (within the label budget), adds the labelled
pairs to the RM's training data, and continues the RM from its last weights (never re-initialised);
the judge labeler asks an OpenAI-compatible endpoint (a scripted one on a real socket) and reads
its verdicts, position swaps included."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from grpo.compose import load_settings
from grpo.config import JudgeConfig
from grpo.envs import build_env
from grpo.errors import UserError
from grpo.generation import make_backend
from grpo.models import load_policy
from grpo.reward_model.data import load_pairs
from grpo.reward_model.labelers import JudgeLabeler, Labeler, RubricLabeler, parse_verdict
from grpo.reward_model.rounds import (
    POLICY_KIND,
    REFERENCE_KIND,
    Candidate,
    PreferenceRounds,
    candidate_pairs,
    label_pairs,
)
from grpo.reward_model.train import train_reward_model
from grpo.rewards.learned import learned_reward_funcs
from grpo.run.layout import TRAIN_PAIRS_FILE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

BASE = [
    "+env=alphabet_sort",
    "env.max_turns=1",
    "reward_model=learned_only",
    "reward_model.data.synthetic.n=24",
    "reward_model.training.max_steps=3",
    "trainer.max_completion_length=24",
    "generation.max_tokens_per_turn=24",
    "trainer.truncated_reward=null",
    "reward_model.rounds.label_budget=14",
    "reward_model.rounds.samples_per_prompt=3",
    "reward_model.rounds.steps=2",
    "tracking=none",
]


def text(episode) -> str:
    return "".join(m["content"] for m in episode)


class LongerWins(Labeler):
    """A scripted annotator: the longer episode is better, equal lengths tie; counts its calls."""

    name = "scripted"
    description = "scripted"

    def __init__(self):
        self.calls = 0

    def prefer(self, row, a, b) -> int:
        self.calls += 1
        return (len(text(a)) > len(text(b))) - (len(text(a)) < len(text(b)))


def test_pairs_skip_identical_episodes_and_cut_completions_lose_by_rule():
    a, b, c = ([{"role": "assistant", "content": t}] for t in ("x", "y", "zz"))
    cands = [
        Candidate(a, reference=True),
        Candidate(b, truncated=True),
        Candidate(list(a)),
        Candidate(c, truncated=True),
    ]
    pairs = candidate_pairs(cands, truncated_loses=True)
    # (0, 2) are the same episode; (1, 3) are both cut
    assert pairs == [(0, 1, 1), (0, 3, 1), (1, 2, -1), (2, 3, 1)]
    assert candidate_pairs(cands, truncated_loses=False) == [(0, 1, None), (0, 3, None), (1, 2, None), (1, 3, None), (2, 3, None)]  # fmt: skip


def test_labels_stop_at_the_budget_and_ties_cost_a_label():
    env = build_env(load_settings(BASE).env, "en")
    rows = env.rows("train", 3)
    episodes = [[{"role": "assistant", "content": s}] for s in ("a", "bb", "cc", "ddd")]
    cands = [[Candidate(e) for e in episodes] for _ in rows]
    labeler = LongerWins()
    pairs, labels, ties, by_rule = label_pairs(
        rows, cands, labeler, budget=8, truncated_loses=True, round_index=0
    )
    assert labels == labeler.calls == 8 and by_rule == 0
    # the first row's 6 pairs (bb vs cc ties), then 2 of the second row's: its tie is past the budget
    assert ties == 1
    assert len(pairs) == labels - ties
    for p in pairs:
        assert len(text(p.chosen)) > len(text(p.rejected))
        assert p.kind == POLICY_KIND and p.meta["source"] == "round:0:scripted"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("rounds")
    settings = load_settings(BASE)
    env = build_env(settings.env, "en")
    rm = train_reward_model(settings, root / "reward_model")
    model, tokenizer = load_policy(settings.model)
    return settings, env, rm, model, tokenizer, root


def _rounds(settings, env, rm_path, run_dir, labeler, logged=None):
    (func,) = learned_reward_funcs(settings, device="cpu", checkpoints=[str(rm_path)], env=env)
    learned = func.fn.source
    rounds = PreferenceRounds(
        settings, env, learned, run_dir, labeler,
        log_metrics=(lambda m, step: logged.append((step, dict(m)))) if logged is not None else None,
    )  # fmt: skip
    return rounds, learned


def _weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_a_round_adds_the_labelled_policy_pairs_and_continues_the_rm(setup, tmp_path):
    settings, env, rm, model, tokenizer, _ = setup
    labeler = LongerWins()
    logged = []
    rounds, learned = _rounds(settings, env, rm.path, tmp_path, labeler, logged)
    scorer = learned.scorers[0]
    before = _weights(scorer.rm.model)
    backend = make_backend(settings.generation, model, tokenizer, settings.model)

    report = rounds.run(step=0, backend=backend)

    assert 0 < report.labels == labeler.calls <= settings.reward_model.rounds.label_budget
    assert report.pairs and len(report.pairs) == report.labels - report.ties
    # (3 samples + the reference) -> 6 pairs per prompt: 14 labels need 3 prompts
    assert report.prompts == 3
    for p in report.pairs:
        assert len(text(p.chosen)) > len(text(p.rejected))  # labelled as the labeler said
    assert {p.kind for p in report.pairs} <= {POLICY_KIND, REFERENCE_KIND}
    # the member's training data now holds the stage's pairs and the new ones
    member = tmp_path / "reward_model_rounds" / "round_0" / "member_0"
    trained_on = load_pairs(member / TRAIN_PAIRS_FILE)
    stage = load_pairs(rm.path / TRAIN_PAIRS_FILE)
    assert len(trained_on) == len(stage) + len(report.pairs)
    assert [p.to_json() for p in trained_on[len(stage) :]] == [p.to_json() for p in report.pairs]
    assert scorer.rm.path == member  # the reward scores with the round's RM
    after = _weights(scorer.rm.model)
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    # the accuracy on the fresh pairs before learning them, logged at the round's step
    step, metrics = logged[0]
    assert step == 0 and metrics["rm/round/labels"] == report.labels and "rm/round/acc/en" in metrics
    assert json.loads((member.parent / "round.json").read_text())["labels"] == report.labels


def test_the_rm_continues_from_its_last_weights_not_from_scratch(setup, tmp_path):
    base, env, rm, model, tokenizer, _ = setup
    import dataclasses

    settings = dataclasses.replace(
        base,
        reward_model=dataclasses.replace(
            base.reward_model, rounds=dataclasses.replace(base.reward_model.rounds, lr=0.0)
        ),
    )
    rounds, learned = _rounds(settings, env, rm.path, tmp_path, LongerWins())
    before = _weights(learned.scorers[0].rm.model)
    backend = make_backend(settings.generation, model, tokenizer, settings.model)
    rounds.run(step=0, backend=backend)
    rounds.run(step=5, backend=backend)
    # at lr 0 the steps change nothing: a re-initialised RM would differ
    after = _weights(learned.scorers[0].rm.model)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    second = load_pairs(tmp_path / "reward_model_rounds" / "round_1" / "member_0" / TRAIN_PAIRS_FILE)
    first = load_pairs(tmp_path / "reward_model_rounds" / "round_0" / "member_0" / TRAIN_PAIRS_FILE)
    assert len(second) > len(first)  # every round's pairs accumulate


def test_the_rubric_labeler_prefers_the_reference_over_a_broken_answer():
    env = build_env(load_settings(BASE).env, "en")
    row = env.rows("train", 1)[0]
    good = env.reference_completion(row)
    bad = [{"role": "assistant", "content": "no idea"}]
    labeler = RubricLabeler(env)
    assert labeler.prefer(row, good, bad) == 1 and labeler.prefer(row, bad, good) == -1
    assert labeler.prefer(row, good, good) == 0
    assert "stand" in labeler.description


class Judge(BaseHTTPRequestHandler):
    """A scripted OpenAI-compatible judge: the answer holding 'GOOD' wins; 'garbage' otherwise."""

    seen: list[str] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        Judge.seen.append(prompt)
        a = prompt.split("### Answer A")[1].split("### Answer B")[0]
        b = prompt.split("### Answer B")[1]
        verdict = "A" if "GOOD" in a else "B" if "GOOD" in b else "I cannot decide"
        reply = {"choices": [{"message": {"role": "assistant", "content": f"**{verdict}**"}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_the_judge_labeler_reads_verdicts_through_position_swaps():
    server = HTTPServer(("127.0.0.1", 0), Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = JudgeConfig(base_url=f"http://127.0.0.1:{server.server_port}/v1", model="scripted")
        labeler = JudgeLabeler(cfg, seed=0)
        env = build_env(load_settings([*BASE, "language=sv"]).env, "sv")
        row = env.rows("train", 1)[0]
        good = [{"role": "assistant", "content": "GOOD"}]
        bad = [{"role": "assistant", "content": "bad"}]
        verdicts = [labeler.prefer(row, good, bad) for _ in range(8)] + [
            labeler.prefer(row, bad, good) for _ in range(8)
        ]
        assert verdicts == [1] * 8 + [-1] * 8
        shown_first = [p.split("### Answer A")[1].split("### Answer B")[0] for p in Judge.seen]
        assert any("GOOD" in s for s in shown_first) and any("bad" in s for s in shown_first)  # order varies
        assert "Swedish (sv)" in Judge.seen[0]  # the pair's language, named
        assert labeler.prefer(row, bad, [{"role": "assistant", "content": "worse"}]) == 0  # no verdict: a tie
    finally:
        server.shutdown()
        server.server_close()  # the port refuses connections now (shutdown alone leaves it listening)
    with pytest.raises(UserError, match="cannot be reached"):
        labeler.prefer(row, good, bad)


def test_parse_verdict():
    assert parse_verdict("A") == "A" and parse_verdict("**B**.") == "B" and parse_verdict("Answer: b") == "B"
    assert parse_verdict("neither") is None and parse_verdict("") is None


def test_ctrl_c_during_a_round_stops_grpo_at_its_next_step_with_a_checkpoint(tmp_path):
    """A real `python -m grpo` process: SIGINT while the round before GRPO trains the RM. The round
    ends early, GRPO stops after its step 1 with a complete checkpoint (not at once: the stage and
    step the signal handler reads are GRPO's again after the round), exit 130."""
    import re
    import signal
    import time

    from helpers.grpo_process import start_grpo

    run_dir = tmp_path / "run"
    args = [
        *[a for a in BASE if a != "tracking=none"],
        "stages=[reward_model,train]",
        "trainer.num_generations=4",
        "trainer.per_device_batch_completions=8",
        "trainer.max_steps=4",
        "reward_model.rounds.steps=2000",  # a long RM training inside the round: the signal lands in it
        "tracking=none",
        f"hydra.run.dir={run_dir}",
    ]
    log, err_path = tmp_path / "out.log", tmp_path / "err.log"
    with open(log, "w") as out, open(err_path, "w") as err:
        proc = start_grpo(args, root=tmp_path, cwd=tmp_path, stdout=out, stderr=err)
        deadline = time.monotonic() + 300
        while "preference rounds:" not in log.read_text():
            assert proc.poll() is None, err_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "no round in time"
            time.sleep(0.05)
        time.sleep(4)  # past the sampling, into the RM's 2000 steps
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    err = err_path.read_text()
    assert proc.returncode == 130, err[-3000:]
    assert "stopping after the preference round and step 1 of train" in err
    assert re.search(
        r"interrupted at step 1; resume with: python -m grpo resume=\S+", err.strip().splitlines()[-1]
    )
    assert (run_dir / "checkpoints" / "checkpoint-1").is_dir()
    rounds = json.loads((run_dir / "reward_model_rounds" / "rounds.json").read_text())
    assert 0 < rounds["rounds"][0]["rm_steps"] < 2000  # the round's RM training ended early


def test_a_resumed_run_goes_on_from_the_rounds_its_checkpoint_had_seen(tmp_path):
    """Real `python -m grpo` processes: a run with rounds at steps 0 and 2 loses its checkpoints after
    step 1 (as if killed after round 1 ran, before checkpoint-2 was saved). `resume=` continues at
    step 1 with round 0's RM weights and pairs, says so in one line, and its round 1 (redone at
    step 2) is the interrupted run's round 1: the same samples, labels, accuracies and RM weights.
    Without them it would number its next round 0 and train the stage's RM on its pairs alone."""
    import shutil

    from helpers.grpo_process import run_grpo
    from safetensors.torch import load_file

    args = [
        *BASE,
        "stages=[reward_model,train]",
        "trainer.num_generations=4",
        "trainer.per_device_batch_completions=8",
        "trainer.max_steps=3",
        "reward_model.rounds.every=2",
        "trainer.save_steps=1",
        "trainer.save_total_limit=null",
    ]
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    proc = run_grpo([*args, f"hydra.run.dir={first}"], root=tmp_path, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rounds = first / "reward_model_rounds"
    assert json.loads((rounds / "round_1" / "round.json").read_text())["step"] == 2
    for step in (2, 3):
        shutil.rmtree(first / "checkpoints" / f"checkpoint-{step}")

    proc = run_grpo(
        [*args, f"resume={first}", f"hydra.run.dir={resumed}"], root=tmp_path, cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    redone = resumed / "reward_model_rounds"
    assert sorted(p.name for p in redone.glob("round_*")) == ["round_1"]
    before, again = (json.loads((d / "round_1" / "round.json").read_text()) for d in (rounds, redone))
    for key in ("index", "step", "labels", "ties", "pairs", "accuracy_before", "rm_steps"):
        assert before[key] == again[key], key
    assert (rounds / "round_1" / "pairs.jsonl").read_text() == (
        redone / "round_1" / "pairs.jsonl"
    ).read_text()
    member = "member_0"
    assert (rounds / "round_1" / member / TRAIN_PAIRS_FILE).read_text() == (
        redone / "round_1" / member / TRAIN_PAIRS_FILE
    ).read_text()
    weights = [load_file(d / "round_1" / member / "model.safetensors") for d in (rounds, redone)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    summary = json.loads((redone / "rounds.json").read_text())
    assert [r["step"] for r in summary["rounds"]] == [0, 2]
    carried = len(load_pairs(rounds / "round_0" / "pairs.jsonl"))
    assert carried > 0
    assert (
        f"[reward_model] resumed at step 1: the RM goes on as preference round 0 (step 0) left it "
        f"({rounds / 'round_0'}); {carried} labelled pair{'s' if carried != 1 else ''} of 1 round carried on"
    ) in proc.stdout.splitlines()
