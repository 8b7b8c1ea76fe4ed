"""The hf backend's decode step against transformers' own sampling loop, on one left-padded batch.

Ours: HFBackend.generate (temperature 1, top-p 1): generate() runs greedy over our processors, the
token is drawn with one uniform number per row against the cumulative probabilities, its log-prob
is recorded, and the KV cache writes into preallocated room. Theirs: `model.generate(do_sample=True)`
with transformers' DynamicCache (a torch.cat per layer and step) and `torch.multinomial` (one
exponential number per vocabulary entry), recording nothing. Same model, prompts (first turns of
3-turn alphabet_sort rows) and number of new tokens; each round runs both, alternating which goes
first. A side's cost is seconds per decode step of the whole batch; the ratio is the median of
the per-round ratios (theirs over ours), with the min-max.

    python benchmarks/decode_loop.py [--model tiny|small] [--batch 16] [--new-tokens 384]
                                     [--rounds 5] [--threads 1]

Last line: `ratio: X`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--batch", type=int, default=16, help="rows decoded together")
    parser.add_argument("--new-tokens", type=int, default=384, help="decode steps per call")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)"
    )
    args = parser.parse_args()

    import torch
    from transformers import GenerationConfig

    torch.set_num_threads(args.threads)
    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.generation.base import GenRequest, Sampling
    from grpo.generation.hf import HFBackend, _left_padded
    from grpo.models import load_policy

    cfg = load_settings(["+env=alphabet_sort", f"model={args.model}", "env.min_turns=3", "env.max_turns=3"])
    env = build_env(cfg.env, cfg.language)
    model, tokenizer = load_policy(cfg.model)
    model.eval()
    backend = HFBackend(model, tokenizer, chat_template_kwargs=cfg.model.chat_template_kwargs)
    rows = env.rows("eval", args.batch)
    prompts = [backend.encode(backend.render(row.prompt, add_generation_prompt=True)) for row in rows]
    input_ids, attention_mask = _left_padded(prompts, backend.pad_token_id)
    theirs_config = GenerationConfig(
        max_new_tokens=args.new_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        eos_token_id=sorted(backend.eos_token_ids),
        pad_token_id=backend.pad_token_id,
    )

    def ours() -> float:
        requests = [GenRequest(prompt_ids=p, max_new_tokens=args.new_tokens) for p in prompts]
        start = time.perf_counter()
        results = backend.generate(requests, Sampling(temperature=1.0, seed=0))
        seconds = time.perf_counter() - start
        return seconds / max(len(r.token_ids) for r in results)

    def theirs() -> float:
        torch.manual_seed(0)
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids, attention_mask=attention_mask, generation_config=theirs_config
            )
        return (time.perf_counter() - start) / (out.shape[1] - input_ids.shape[1])

    sides = {"ours": ours, "transformers": theirs}
    for side in sides.values():  # warm-up
        side()
    ratios, per_step = [], {name: [] for name in sides}
    for r in range(args.rounds):
        for name in list(sides) if r % 2 == 0 else list(reversed(sides)):
            per_step[name].append(sides[name]())
        ratios.append(per_step["transformers"][-1] / per_step["ours"][-1])
        print(
            f"round {r + 1}: ours {per_step['ours'][-1] * 1e3:.2f} ms/step, "
            f"transformers {per_step['transformers'][-1] * 1e3:.2f} ms/step, ratio {ratios[-1]:.2f}",
            flush=True,
        )
    width = input_ids.shape[1]
    print(f"batch {args.batch} x {args.new_tokens} new tokens after {width}-token prompts, {args.model}")
    for name in sides:
        print(f"{name:>12}: {statistics.median(per_step[name]) * 1e3:.2f} ms per decode step")
    print(f"ratio: {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
