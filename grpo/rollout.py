"""The batched multi-turn rollout engine, shared by training (TRL rollout_func) and evaluation.

Given rows and r rollouts per row, all conversations advance turn by turn: each turn collects every
still-active conversation and makes ONE backend call for all of them, appends the assistant
replies, asks the environment for its replies, and repeats until every episode is over or out of
token budget.

Token bookkeeping (token-level backends): `prompt_ids + completion_ids` is exactly the token
sequence the model conditioned on at every turn. History is never re-tokenised: the ids the model
generated are kept as they are (its EOS included, mask 1), and only the NEW text between two model
turns is tokenised (mask 0, logprob 0.0): the close of the assistant turn that the model did not
write itself (e.g. the "\\n" after <|im_end|>) plus the environment's messages and the next
generation prompt. That text is the string difference between the chat template rendered with and
without the new messages. A template that rewrites history when a turn is added (Qwen3 drops the
<think> block of earlier assistant turns) breaks that difference; the environment turn is then
rendered on its own, after a neutral stand-in conversation, so the model's own earlier tokens
(think block included) stay as they were generated.

Text-level backends (OpenAI-compatible endpoints) give text only: their rollouts have empty
`completion_ids` / `env_mask` / `logprobs`, and the completion budget counts the model's tokens as
the endpoint reports them (environment turns are not counted).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo.envs.base import Environment, Messages, Row
from grpo.errors import UserError
from grpo.generation.base import GenerationBackend, GenRequest, GenResult, Sampling, TokenBackend, mix_seed

__all__ = ["Rollout", "Sampling", "run_rollouts"]

# Stand-in conversations after which an environment turn is rendered on its own when the real
# history cannot be used (the template rewrites it). A lone system message comes first: after an
# assistant message, Qwen3-style templates render that message differently once it is no longer
# the last one, which is the very rewrite being worked around.
_NEUTRAL_HISTORIES: tuple[Messages, ...] = (
    [{"role": "system", "content": "x"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
)
_SENTINEL = "GRPO_ROLLOUT_SENTINEL_3141"
# one number per run_rollouts call (GenRequest.conversation = (session, episode index))
_SESSIONS = itertools.count()


@dataclass
class Rollout:
    """One episode. For token-level backends `prompt_ids + completion_ids` is what the model saw."""

    row: Row
    rollout_index: int
    # assistant and environment messages after the prompt
    completion: Messages
    # the environment's state at the end of the episode
    state: dict[str, Any]
    prompt_ids: list[int]
    # model and environment tokens interleaved, in order (empty for text-level backends)
    completion_ids: list[int]
    # 1 = model token, 0 = environment token; same length as completion_ids
    env_mask: list[int]
    # log-prob of each completion token under the sampling distribution; 0.0 for env tokens
    logprobs: list[float]
    # cut short by a token limit: a model turn stopped at its max_tokens_per_turn or at the completion
    # budget instead of ending on its own (EOS / a stop token), or the budget ran out before the
    # environment's last turn
    truncated: bool
    # model turns that stopped at a token limit instead of ending on their own
    cut_turns: int = 0

    @property
    def messages(self) -> Messages:
        """The whole conversation: prompt then completion."""
        return list(self.row.prompt) + list(self.completion)

    @property
    def num_turns(self) -> int:
        """Model turns taken."""
        return sum(1 for m in self.completion if m.get("role") == "assistant")


@dataclass
class _Episode:
    """A conversation in progress."""

    row: Row
    rollout_index: int
    state: dict[str, Any]
    prompt_ids: list[int]
    completion: Messages = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    model_tokens: int = 0
    turns: int = 0
    cut_turns: int = 0
    done: bool = False
    truncated: bool = False

    def messages(self) -> Messages:
        return list(self.row.prompt) + list(self.completion)

    def end(self, truncated: bool = False) -> None:
        self.done, self.truncated = True, self.truncated or truncated

    def to_rollout(self) -> Rollout:
        return Rollout(
            row=self.row,
            rollout_index=self.rollout_index,
            completion=self.completion,
            state=self.state,
            prompt_ids=self.prompt_ids,
            completion_ids=self.completion_ids,
            env_mask=self.env_mask,
            logprobs=self.logprobs,
            truncated=self.truncated,
            cut_turns=self.cut_turns,
        )


class TurnTokenizer:
    """Token ids of the text between model turns, from the chat template, without re-tokenising
    anything the model already saw."""

    def __init__(self, backend: TokenBackend):
        self.backend = backend
        self._closing: str | None = None

    def prompt_ids(self, prompt: Messages) -> list[int]:
        return self.backend.encode(self.backend.render(prompt, add_generation_prompt=True))

    @property
    def closing(self) -> str:
        """What the template writes after an assistant message's content (ChatML: "<|im_end|>\\n")."""
        if self._closing is None:
            text = self.backend.render(
                [{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL}],
                add_generation_prompt=False,
            )
            at = text.rfind(_SENTINEL)
            self._closing = text[at + len(_SENTINEL) :] if at >= 0 else ""
        return self._closing

    def env_text(self, history: Messages, new: Messages) -> str:
        """The template's text for `new` messages after `history`, up to the next generation prompt."""
        render = self.backend.render
        before = render(history, add_generation_prompt=False)
        after = render(history + new, add_generation_prompt=True)
        if after.startswith(before):
            return after[len(before) :]
        # The template rewrote history: render the new turn after a neutral stand-in instead.
        for stand_in in _NEUTRAL_HISTORIES:
            try:
                before = render(stand_in, add_generation_prompt=False)
                after = render(stand_in + new, add_generation_prompt=True)
            except Exception:  # the template refuses this shape (e.g. "roles must alternate")
                continue
            if after.startswith(before):
                return after[len(before) :]
        raise UserError(
            "the model's chat template cannot render an environment turn incrementally (rendering a "
            "conversation with one more message changes its earlier text); use a template that appends turns"
        )

    def between_turns_ids(self, history: Messages, new: Messages, model_turn: GenResult) -> list[int]:
        """Ids of everything after the model's last token up to the next generation prompt: the rest
        of the assistant turn's close (the model's own EOS is already in its tokens) + `new`."""
        gap = self.closing
        if model_turn.finished and model_turn.token_ids:
            stop_text = self.backend.decode(model_turn.token_ids[-1:], skip_special_tokens=False)
            if stop_text and gap.startswith(stop_text):
                gap = gap[len(stop_text) :]
        return self.backend.encode(gap + self.env_text(history, new))


def run_rollouts(
    env: Environment,
    rows: Sequence[Row],
    backend: GenerationBackend,
    *,
    rollouts_per_row: int = 1,
    sampling: Sampling,
    max_completion_tokens: int | None = None,
    progress: bool = False,
    any_rank_active: Callable[[bool], bool] | None = None,
) -> list[Rollout]:
    """Run `rollouts_per_row` episodes of every row, all conversations advancing together.

    Returns rollouts in row-major order (row 0 rollouts 0..r-1, row 1, ...). `max_completion_tokens`
    bounds each whole completion (model and environment tokens); a model turn gets at most
    min(sampling.max_tokens_per_turn, budget left) new tokens; a turn cut at that limit makes the
    rollout truncated, and an episode that would continue with no budget left ends truncated. With
    `sampling.seed` set, the same inputs give the same rollouts.

    `any_rank_active(local)` (lockstep, several processes): called once per turn on every rank, it
    says whether any rank still has an active episode. Turns go on until none has; a rank whose
    episodes all ended calls `backend.idle_turn(sampling)` instead, so every rank makes the same
    number of generate() calls (a collective under FSDP / ZeRO-3).
    """
    if rollouts_per_row < 1:
        raise UserError(f"rollouts per row must be >= 1, got {rollouts_per_row}")
    own = getattr(env, "run_episodes", None)
    if own is not None:  # an environment that runs its own episodes (verifiers v1 tasksets)
        if any_rank_active is not None:
            raise UserError(f"env {env.name}: its episodes run in one process; train it with one process")
        # it returns each episode's Rollout fields (besides row and rollout_index), row-major
        fields = own(
            rows,
            backend,
            rollouts_per_row=rollouts_per_row,
            sampling=sampling,
            max_completion_tokens=max_completion_tokens,
            progress=progress,
        )
        pairs = [(row, k) for row in rows for k in range(rollouts_per_row)]
        if len(fields) != len(pairs):
            raise RuntimeError(
                f"{type(env).__name__}.run_episodes returned {len(fields)} of {len(pairs)} episodes"
            )
        return [Rollout(row=row, rollout_index=k, **f) for (row, k), f in zip(pairs, fields, strict=True)]
    if max_completion_tokens is not None and max_completion_tokens < 1:
        raise UserError(f"the completion token budget must be >= 1 or None, got {max_completion_tokens}")
    token_level = bool(getattr(backend, "token_level", False))
    turns = TurnTokenizer(backend) if token_level else None  # type: ignore[arg-type]
    # names this call's conversations apart from any earlier call's (a backend's kept state);
    # single-turn episodes have no next turn to keep anything for
    session = next(_SESSIONS) if env.max_turns > 1 else None

    episodes: list[_Episode] = []
    for row in rows:
        prompt_ids = turns.prompt_ids(row.prompt) if turns else []
        for k in range(rollouts_per_row):
            episodes.append(_Episode(row, k, env.initial_state(row), list(prompt_ids)))

    bar = _progress_bar(len(episodes)) if progress else None
    turn = 0
    try:
        while True:
            active = [e for e in episodes if not e.done]
            if any_rank_active is not None and any_rank_active(bool(active)) and not active:
                backend.idle_turn(sampling)  # type: ignore[attr-defined]
                turn += 1
                continue
            if not active:
                break
            requests = [
                _request(e, i, turn, sampling, max_completion_tokens, token_level, session)
                for i, e in zip(_indices(episodes, active), active, strict=True)
            ]
            call_sampling = sampling
            if sampling.seed is not None:
                call_sampling = dataclasses.replace(sampling, seed=mix_seed(sampling.seed, turn))
            results = backend.generate(requests, call_sampling)
            if len(results) != len(requests):
                raise RuntimeError(f"the backend answered {len(results)} of {len(requests)} requests")
            for episode, result in zip(active, results, strict=True):
                _advance(env, episode, result, turns, max_completion_tokens)
            if bar is not None:
                _show_progress(bar, episodes, len(active), env.max_turns)
            turn += 1
    finally:
        if bar is not None:
            bar.close()
        forget = getattr(backend, "forget_conversations", None)
        if forget is not None:  # the weights may change before the next call: no stale cache
            forget()
    return [e.to_rollout() for e in episodes]


def _indices(episodes: list[_Episode], active: list[_Episode]) -> list[int]:
    """Each active episode's position in the full list (a stable per-conversation id)."""
    position = {id(e): i for i, e in enumerate(episodes)}
    return [position[id(e)] for e in active]


def _used(episode: _Episode, token_level: bool) -> int:
    return len(episode.completion_ids) if token_level else episode.model_tokens


def _request(
    episode: _Episode,
    index: int,
    turn: int,
    sampling: Sampling,
    budget: int | None,
    token_level: bool,
    session: int | None,
) -> GenRequest:
    limit = sampling.max_tokens_per_turn
    if budget is not None:
        limit = min(limit, budget - _used(episode, token_level))
    seed = None if sampling.seed is None else mix_seed(sampling.seed, turn, index)
    conversation = None if session is None else (session, index)
    if token_level:
        return GenRequest(
            max_new_tokens=limit,
            prompt_ids=episode.prompt_ids + episode.completion_ids,
            seed=seed,
            conversation=conversation,
        )
    return GenRequest(max_new_tokens=limit, messages=episode.messages(), seed=seed, conversation=conversation)


def _advance(
    env: Environment, episode: _Episode, result: GenResult, turns: TurnTokenizer | None, budget: int | None
) -> None:
    """Record one model turn, then let the environment answer (or end the episode)."""
    token_level = turns is not None
    episode.completion.append({"role": "assistant", "content": result.text})
    episode.turns += 1
    if not result.finished:
        episode.cut_turns += 1
        episode.truncated = True
    if token_level:
        if len(result.logprobs) != len(result.token_ids):
            raise RuntimeError("the backend returned a logprob count different from its token count")
        episode.completion_ids.extend(result.token_ids)
        episode.env_mask.extend([1] * len(result.token_ids))
        episode.logprobs.extend(float(x) for x in result.logprobs)
        episode.model_tokens += len(result.token_ids)
    else:
        episode.model_tokens += result.num_tokens
    left = None if budget is None else budget - _used(episode, token_level)

    if left is not None and left <= 0 and not result.finished:
        episode.end(truncated=True)  # the turn itself was cut by the budget
        return
    if episode.turns >= env.max_turns:
        episode.end()
        return
    reply = env.env_response(episode.messages(), episode.state, episode.row)
    if not reply:
        episode.end()
        return
    if not isinstance(reply, list) or not all(isinstance(m, dict) for m in reply):
        raise TypeError(
            f"{type(env).__name__}.env_response must return a list of messages or None, got {reply!r}"
        )
    if left is not None and left <= 0:
        episode.end(truncated=True)  # the episode goes on but the model has no token left
        return
    if turns is not None:
        ids = turns.between_turns_ids(episode.messages(), reply, result)
        if left is not None and len(ids) >= left:
            episode.end(truncated=True)  # the env turn leaves no room for another model token
            return
        episode.completion_ids.extend(ids)
        episode.env_mask.extend([0] * len(ids))
        episode.logprobs.extend([0.0] * len(ids))
    episode.completion.extend(dict(m) for m in reply)


def _progress_bar(episodes: int) -> Any:
    """A bar counted in model turns, not episodes: all episodes advance together, so the first
    ones end only when a whole turn of every conversation is done, and a bar of finished episodes
    would extrapolate from one early one (`1/400 [00:07<52:58]` for an 8 s evaluation)."""
    from tqdm.auto import tqdm

    return tqdm(total=None, desc="rollouts", unit="turn", leave=False, postfix=f"0/{episodes} episodes")


def _show_progress(bar: Any, episodes: Sequence[_Episode], turns_done: int, max_turns: int) -> None:
    """Count the turns just generated; the total is the turns done plus at most `max_turns` per
    episode still going (it shrinks as episodes end early), so the ETA is the time per turn so far
    times the turns that can still come: an upper bound that tightens."""
    left = sum(max(max_turns - e.turns, 0) for e in episodes if not e.done)
    bar.total = bar.n + turns_done + left
    bar.set_postfix_str(f"{sum(e.done for e in episodes)}/{len(episodes)} episodes", refresh=False)
    bar.update(turns_done)
