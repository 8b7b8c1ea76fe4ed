"""The reward_model stage on the offline tiny backbone: it learns (held-out accuracy per language
from chance to >= 0.9), logs to a real MLflow store, saves a loadable checkpoint, and its
per-language calibration normalises scores (an injected language offset disappears)."""

from __future__ import annotations

import json
import statistics

import pytest
import torch
from mlflow import MlflowClient

from grpo.compose import load_settings
from grpo.reward_model.backbone import inner_model, lang_tag, load_reward_model
from grpo.reward_model.calibration import Calibration
from grpo.reward_model.data import load_pairs
from grpo.reward_model.synthetic import pairs_from_config
from grpo.reward_model.train import train_reward_model
from grpo.rewards.learned import RewardModelScorer
from grpo.run.layout import (
    HELDOUT_PAIRS_FILE,
    RM_CALIBRATION_FILE,
    RM_META_FILE,
    RM_METRICS_FILE,
    TRAIN_PAIRS_FILE,
)
from grpo.stages import RunResults
from grpo.tracking import make_tracker
from grpo.tracking.store import metric_curve, tracking_uri

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

# synthetic alphabet-sort pairs in English and Swedish, single-turn, with the corruptions a tiny
# model learns within a CPU minute (a lost / duplicated name shows in the answer's length and
# repetitions; a broken format in its tags): 240 train + 60 held-out pairs per language. So few pairs
# take the built-in tokenizer (backbone.MIN_PAIRS_FOR_OWN_TOKENIZER)
LEARN = [
    "+env=alphabet_sort",
    "env.max_turns=1",
    "stages=[reward_model]",
    "reward_model=learned",
    "reward_model.data.synthetic.languages=[en,sv]",
    "reward_model.data.synthetic.n=300",
    "reward_model.data.synthetic.severity=1.0",
    "reward_model.data.synthetic.corruptions=[drop,duplicate,format]",
    "reward_model.training.epochs=2",
    "reward_model.training.batch_size_pairs=8",
    "reward_model.training.logging_steps=20",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("rm")
    cfg = load_settings([*LEARN, "tracking=mlflow", f"output_root={root}"])
    run_dir = root / "runs" / "rm"
    tracker = make_tracker(cfg, run_dir)
    with tracker:
        tracker.log_config(cfg)
        result = train_reward_model(cfg, run_dir / "reward_model", tracker=tracker)
    return cfg, result, tracker.run_id


def test_held_out_accuracy_rises_from_chance_to_090_in_both_languages(trained):
    cfg, result, run_id = trained
    assert result.languages == ["en", "sv"]
    assert result.num_train_pairs == 480 and result.num_heldout_pairs == 120
    # a random backbone ranks pairs at chance ...
    assert 0.3 <= result.initial.overall_accuracy <= 0.7, result.initial.accuracy
    assert all(0.2 <= acc <= 0.8 for acc in result.initial.accuracy.values()), result.initial.accuracy
    # ... the trained one ranks the reference answer first
    assert result.final.accuracy["en"] >= 0.9 and result.final.accuracy["sv"] >= 0.9, result.final.accuracy
    assert result.final.overall_loss < result.initial.overall_loss - 0.3
    assert result.global_step == 120  # 2 epochs x 480 pairs / 8 pairs per step

    out = result.path
    for name in (
        RM_META_FILE,
        RM_CALIBRATION_FILE,
        RM_METRICS_FILE,
        TRAIN_PAIRS_FILE,
        HELDOUT_PAIRS_FILE,
        "config.json",
    ):
        assert (out / name).is_file(), name
    assert not (out / "trainer").exists()
    report = json.loads((out / RM_METRICS_FILE).read_text())
    assert report["final"]["accuracy"] == result.final.accuracy
    assert report["initial"]["accuracy"] == result.initial.accuracy
    # the per-kind table of the corruptions drawn, at init and after training
    assert list(result.final.accuracy_by_kind) == ["drop", "duplicate", "format"]
    assert sum(result.final.pairs_by_kind.values()) == 120
    for when in ("initial", "final"):
        metrics = getattr(result, when)
        assert report[when]["accuracy_by_kind"] == metrics.accuracy_by_kind
        assert report[when]["accuracy_by_language_kind"] == metrics.accuracy_by_language_kind
    assert len(load_pairs(out / HELDOUT_PAIRS_FILE)) == 120
    # a later train stage of this run scores with the fresh RM (handed on as the stage's result)
    assert cfg.reward_model.checkpoints == []
    assert RunResults(reward_model=result).reward_model_checkpoints(cfg) == [str(out.resolve())]

    client = MlflowClient(tracking_uri(cfg))
    for lang in ("en", "sv"):
        curve = metric_curve(client, run_id, f"rm/acc/{lang}")
        assert curve == [
            (0, pytest.approx(result.initial.accuracy[lang])),
            (120, pytest.approx(result.final.accuracy[lang])),
        ]
    for name, initial, final in (
        (
            "rm/acc/kind/format",
            result.initial.accuracy_by_kind["format"],
            result.final.accuracy_by_kind["format"],
        ),
        (
            "rm/acc/sv/drop",
            result.initial.accuracy_by_language_kind["sv"]["drop"],
            result.final.accuracy_by_language_kind["sv"]["drop"],
        ),
    ):
        assert metric_curve(client, run_id, name) == [
            (0, pytest.approx(initial)),
            (120, pytest.approx(final)),
        ]
    assert [s for s, _ in metric_curve(client, run_id, "rm/loss")] == [0, 120]
    train_loss = metric_curve(client, run_id, "rm/train/loss")
    assert [s for s, _ in train_loss] == [20, 40, 60, 80, 100, 120] and train_loss[-1][1] < train_loss[0][1]
    assert client.get_run(run_id).data.tags["grpo.reward_model.path"] == str(out.resolve())
    artifacts = {a.path for a in client.list_artifacts(run_id, "reward_model")}
    assert artifacts >= {
        f"reward_model/{RM_METRICS_FILE}",
        f"reward_model/{RM_CALIBRATION_FILE}",
        f"reward_model/{RM_META_FILE}",
    }


def test_calibration_gives_each_language_mean_0_std_1(trained):
    cfg, result, _ = trained
    scorer = RewardModelScorer(str(result.path), device="cpu")
    heldout = load_pairs(result.path / HELDOUT_PAIRS_FILE)
    for lang in ("en", "sv"):
        pairs = [p for p in heldout if p.language == lang]
        prompts = [p.prompt for p in pairs] * 2
        completions = [p.chosen for p in pairs] + [p.rejected for p in pairs]
        normalized = scorer.normalized(prompts, completions, [lang] * len(completions))
        # the reference set the statistics were fitted on: exactly standardised
        assert statistics.fmean(normalized) == pytest.approx(0.0, abs=1e-5)
        assert statistics.pstdev(normalized) == pytest.approx(1.0, rel=1e-4)
        # the scorer reproduces the stage's own scores of these completions
        raw = scorer.raw(prompts, completions, [lang] * len(completions))
        stats = Calibration.load(result.path / RM_CALIBRATION_FILE).languages[lang]
        assert statistics.fmean(raw) == pytest.approx(stats.mean, abs=1e-4)
    # fresh pairs from the same distribution (another seed) come out near mean 0, std 1 as well
    fresh_cfg = load_settings([*LEARN, "reward_model.data.seed=7", "reward_model.data.synthetic.n=60"])
    fresh = pairs_from_config(fresh_cfg)
    for lang in ("en", "sv"):
        pairs = [p for p in fresh if p.language == lang]
        normalized = scorer.normalized(
            [p.prompt for p in pairs] * 2,
            [p.chosen for p in pairs] + [p.rejected for p in pairs],
            [lang] * 2 * len(pairs),
        )
        assert abs(statistics.fmean(normalized)) < 0.4 and 0.6 < statistics.pstdev(normalized) < 1.5


def test_an_injected_language_offset_is_removed(trained):
    _, result, _ = trained
    scorer = RewardModelScorer(str(result.path), device="cpu")
    heldout = load_pairs(result.path / HELDOUT_PAIRS_FILE)
    prompts = [p.prompt for p in heldout] * 2
    completions = [p.chosen for p in heldout] + [p.rejected for p in heldout]
    languages = [p.language for p in heldout] * 2
    raw = scorer.raw(prompts, completions, languages)
    # a model whose Swedish scores all sit 7 higher (the arbitrary per-language offset of a BT model)
    shifted = [s + 7.0 if lang == "sv" else s for s, lang in zip(raw, languages, strict=True)]

    def mean_of(values, lang):
        return statistics.fmean(v for v, code in zip(values, languages, strict=True) if code == lang)

    assert mean_of(shifted, "sv") - mean_of(shifted, "en") > 5.0
    plain = Calibration.fit(raw, languages).normalize(raw, languages)
    offset = Calibration.fit(shifted, languages).normalize(shifted, languages)
    assert offset == pytest.approx(plain, abs=1e-9)  # the offset is gone, nothing else changed
    assert mean_of(offset, "sv") == pytest.approx(0.0, abs=1e-9) and mean_of(offset, "en") == pytest.approx(
        0.0, abs=1e-9
    )
    # a language the model was not calibrated on gets no score rather than a wrong one
    assert Calibration.fit(raw, languages).normalize([1.0], ["de"]) == [None]


def test_per_language_heads_without_tag_tokens(tmp_path):
    cfg = load_settings(
        [
            *LEARN,
            "reward_model.data.synthetic.n=24",
            "reward_model.training.max_steps=3",
            "reward_model.conditioning.per_language_heads=true",
            "reward_model.conditioning.tag_token=false",
        ]
    )
    result = train_reward_model(cfg, tmp_path / "rm")
    assert result.global_step == 3
    loaded = load_reward_model(result.path, device="cpu")
    assert (
        loaded.meta.per_language_heads and not loaded.meta.tag_token and loaded.meta.languages == ["en", "sv"]
    )
    assert lang_tag("sv") not in loaded.tokenizer.get_vocab()
    inner = inner_model(loaded.model)
    assert inner is not loaded.model and inner.config.num_labels == 2

    scorer = RewardModelScorer(str(result.path), device="cpu")
    prompt = [{"role": "user", "content": "Sortera: Östen, Åsa"}]
    completion = [
        {"role": "assistant", "content": "<alphabetical_sorted>\nÅsa\nÖsten\n</alphabetical_sorted>"}
    ]
    en, sv = scorer.raw([prompt, prompt], [completion, completion], ["en", "sv"])
    ids = scorer.encoder.encode([prompt], [completion], ["en"])
    with torch.inference_mode():
        both = inner(input_ids=torch.tensor(ids)).logits[0].tolist()
    # the same text, scored by each language's own head
    assert (en, sv) == (pytest.approx(both[0], abs=1e-5), pytest.approx(both[1], abs=1e-5))
    assert en != pytest.approx(sv)


def test_a_pretrained_backbone_from_a_local_dir(tmp_path):
    from grpo.models import save_pretrained_tiny

    local = save_pretrained_tiny(load_settings(["+env=alphabet_sort"]).model, tmp_path / "causal_lm")
    overrides = [
        *LEARN,
        "reward_model.data.synthetic.n=12",
        "reward_model.training.max_steps=2",
        "reward_model.backbone.source=pretrained",
        f"reward_model.backbone.path={local}",
    ]
    # a causal LM checkpoint: loaded as a sequence classifier with a new score head and the tag tokens
    result = train_reward_model(load_settings(overrides), tmp_path / "rm")
    loaded = load_reward_model(result.path, device="cpu")
    assert type(loaded.model).__name__ == "Qwen3ForSequenceClassification"
    assert loaded.tokenizer.convert_tokens_to_ids(lang_tag("sv")) == len(loaded.tokenizer) - 1
    assert loaded.model.get_input_embeddings().weight.shape[0] == len(loaded.tokenizer)

    missing = [*overrides[:-1], f"reward_model.backbone.path={tmp_path / 'nope'}"]
    from grpo.errors import UserError

    with pytest.raises(UserError, match=r"reward_model.backbone.path=.*nope' does not exist"):
        train_reward_model(load_settings(missing), tmp_path / "rm2")


def test_an_encoder_backbone_without_chat_template(tmp_path):
    """An encoder (BERT-style: [CLS] text [SEP], bidirectional attention, no chat template), saved
    locally: conversations render as role lines, truncation keeps [CLS] + tag and [SEP], and the
    padding mask is honoured (batched scores equal one-at-a-time scores)."""
    from tokenizers import processors
    from transformers import BertConfig, BertForSequenceClassification

    from grpo.models import tiny_tokenizer
    from grpo.reward_model.scoring import score_ids

    tokenizer = tiny_tokenizer("right")
    tokenizer.chat_template = None
    cls, sep = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A <|im_end|>", special_tokens=[("<|im_start|>", cls), ("<|im_end|>", sep)]
    )
    local = tmp_path / "encoder"
    tokenizer.save_pretrained(local)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
    )
    BertForSequenceClassification(config).save_pretrained(local)
    overrides = [
        *LEARN,
        "reward_model.data.synthetic.n=12",
        "reward_model.training.max_steps=2",
        "reward_model.backbone.source=pretrained",
        f"reward_model.backbone.path={local}",
        "reward_model.backbone.max_length=64",
    ]
    result = train_reward_model(load_settings(overrides), tmp_path / "rm")
    scorer = RewardModelScorer(str(result.path), device="cpu")
    assert (scorer.encoder.n_prefix, scorer.encoder.n_suffix) == (1, 1)
    prompt = [{"role": "user", "content": "Sort: " + ", ".join(f"Name{i}" for i in range(60))}]
    completion = "<alphabetical_sorted>\nAda\nBo\n</alphabetical_sorted>"
    text = scorer.encoder.text(prompt, completion, "sv")
    # the tag at both ends
    assert text.startswith(f"{lang_tag('sv')}user: Sort: Name0")
    assert text.endswith("assistant: " + completion + lang_tag("sv"))
    (ids,) = scorer.encoder.encode([prompt], [completion], ["sv"])
    tag = scorer.rm.tokenizer.convert_tokens_to_ids(lang_tag("sv"))
    assert len(ids) == 64 and ids[:2] == [cls, tag] and ids[-2:] == [tag, sep]
    assert scorer.rm.tokenizer.decode(ids[-12:-2]).endswith("</alphabetical_sorted>")  # the end survives

    short = [[cls, tag, 100 + i, sep] for i in range(3)] + [ids]
    batched = score_ids(scorer.rm.model, short, scorer.rm.tokenizer.pad_token_id, batch_size=8)
    alone = [
        score_ids(scorer.rm.model, [s], scorer.rm.tokenizer.pad_token_id, batch_size=1)[0] for s in short
    ]
    assert batched == pytest.approx(alone, abs=1e-5)
