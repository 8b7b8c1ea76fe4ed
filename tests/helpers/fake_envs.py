"""Small environments written for the tests, shared by the files that drive rollouts with them."""

from __future__ import annotations

import random

from grpo.envs.base import Environment, Row


class PingEnv(Environment):
    """Multi-turn with short, predictable replies: row i opens with 'hello i', the env replies
    'ping N' after model turn N, and the episode ends after `turns` model turns."""

    name = "ping"
    max_turns = 5
    multi_turn = True

    def __init__(self, turns: int):
        super().__init__(num_train_examples=8, num_eval_examples=8)
        self.turns = turns

    def make_row(self, rng: random.Random, index: int, split: str) -> Row:
        return Row(id=index, prompt=[{"role": "user", "content": f"hello {index}"}], info={})

    def env_response(self, messages, state, row):
        done = sum(1 for m in messages if m["role"] == "assistant")
        return None if done >= self.turns else [{"role": "user", "content": f"ping {done}"}]
