"""Build the warm-start model shipped in the package: grpo/assets/small_alphabet_sort_sft.

It is the SFT stage of +experiment=alphabet_sort_cpu_full (model=small from its seeded random
weights, 22,400 English one-turn alphabet-sort reference episodes, sft.* of that recipe), run through
the stage's own code (grpo.sft.train.train_sft), then saved with its tokenizer and sft_meta.json in
float16 (half the bytes; conf/model/small_alphabet_sort.yaml loads it as float32). The same seed,
data and thread count give the same weights; another thread count changes float sums and so the
weights slightly (see docs/results.md, "See it learn").

    python scripts/build_warm_start.py [--out=DIR] [overrides ...]      (~9 min on 2 CPU cores)
    python scripts/build_warm_start.py --from=RUN_DIR/sft                (convert an SFT of the recipe)

--from takes the sft dir of a run of the same recipe (e.g. the one benchmarks/learning_alphabet_sort.py
trains; its sft_meta.json must name the recipe's data) instead of training again.

+experiment=alphabet_sort_cpu then starts GRPO from it: `model=small_alphabet_sort`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

RECIPE = "+experiment=alphabet_sort_cpu_full"
NAME = "small_alphabet_sort_sft"


def main(argv: list[str]) -> None:
    import torch

    from grpo.cli.checks import check
    from grpo.compose import load_settings
    from grpo.config import ModelConfig
    from grpo.envs import build_env
    from grpo.files import ASSETS_DIR, replace_dir, write_json_atomic
    from grpo.models import load_policy
    from grpo.run.layout import SFT_META_FILE
    from grpo.sft.train import train_sft

    options = {a[2:].split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a}
    overrides = [a for a in argv if not a.startswith("--")]
    out = Path(options.get("out", ASSETS_DIR / NAME))
    settings = load_settings([RECIPE, "tracking=none", "stages=[sft]", *overrides])
    check(settings)
    with tempfile.TemporaryDirectory(prefix="grpo-warm-start-") as tmp:
        if "from" in options:
            sft_dir = Path(options["from"]).resolve()
            meta = json.loads((sft_dir / SFT_META_FILE).read_text())
            wanted = f"its first {settings.sft.num_examples} train rows"
            if not str(meta.get("data", "")).endswith(wanted):
                raise SystemExit(
                    f"--from={sft_dir}: its data is {meta.get('data')!r}, the recipe's is {wanted!r}"
                )
            model, tokenizer = load_policy(ModelConfig(name="sft", source="pretrained", path=str(sft_dir)))
        else:
            result = train_sft(settings, build_env(settings.env, settings.language), Path(tmp) / "sft")
            model, tokenizer, sft_dir = result.model, result.tokenizer, result.path
            meta = json.loads((sft_dir / SFT_META_FILE).read_text())
        partial = Path(tmp) / "half"
        model.to(torch.float16).save_pretrained(str(partial))
        tokenizer.save_pretrained(str(partial))
        meta.update(
            {
                "recipe": " ".join([RECIPE, *overrides]),
                "saved_dtype": "float16",
                "torch_threads": torch.get_num_threads(),
                "built_by": "scripts/build_warm_start.py",
            }
        )
        write_json_atomic(partial / SFT_META_FILE, meta)
        out.parent.mkdir(parents=True, exist_ok=True)
        replace_dir(partial, out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(
        f"warm start: {out} ({size / 1e6:.1f} MB, {meta['global_step']} SFT steps in {meta['seconds']:.0f} s)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
