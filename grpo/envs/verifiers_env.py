"""Verifiers environments as they are: a classic-API (verifiers 0.3.x) environment run by grpo's
own batched rollout engine, for evaluation and training (`+env=verifiers env.id=NAME env.args={…}`).

What comes from the verifiers environment, unchanged:
  - rows: its `dataset` (train) / `eval_dataset` (eval; its train set when it has none, as
    verifiers does), in order, with the formatted `prompt` column (its system prompt and few-shot
    included); the row's other columns (answer, info, task, example_id, ...) are the Row's info;
  - turns: after each model turn the env's stop conditions (`is_completed`: max_turns_reached,
    has_final_env_response, its @vf.stop methods) are checked, then its async
    `env_response(messages, state)` gives the next user turn; the verifiers State is grpo's
    rollout state, kept and mutated by the env as in a verifiers rollout;
  - scores: its rubric, run on that state (`Rubric.score_group`, the path verifiers' own
    `generate` takes), sync and async reward functions alike; each reward function (and each
    weight-0 metric) is a named grpo reward with the rubric's weight, so the weighted total is
    verifiers' `state["reward"]`. Values are passed on as verifiers computes them (not clipped
    to [0, 1]: a verifiers reward may use any range).

The order of one episode follows `MultiTurnEnv.rollout`: model turn -> stop conditions -> the
env's reply -> model turn ... A reply that sets `state["final_env_response"]` ends the episode;
that last env message is not sent to the model, so it is not in grpo's completion, but it is in
the completion the rubric scores (verifiers renders it there too).

The prompts run as they are: `language=` does not apply (anything but en is refused: grpo would
label the rows with a language their prompts are not in, and a language-consistency reward would
score an English task against it). Not supported (refused when built): environments with their own
rollout (EnvGroup, ...), tool environments (grpo's engine does not pass tools to the model), and
group-level reward functions (grpo scores each rollout on its own).

verifiers is imported only when the environment is built, so composing configs stays light.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

from grpo.envs.base import Messages, Row
from grpo.envs.loaded_rows import LoadedRowsEnv
from grpo.envs.loop_thread import LoopThread
from grpo.envs.rubric import COMPLETION_FIELD, RESERVED_KEYS, STATE_FIELD, RewardFunc, Rubric
from grpo.errors import UserError

INSTALL_HINT = "env=verifiers needs the verifiers extra: pip install 'grpo[verifiers]'"
# results.jsonl keys (grpo.envs.rubric.RESERVED_KEYS) a verifiers metric may carry: such a metric is
# renamed vf_<name> (MultiTurnEnv adds the weight-0 metric `num_turns`)
_PREFIX = "vf_"
# private keys this adapter keeps in the verifiers state
_FINALIZED = "_grpo_finalized"
_SCORED = "_grpo_scored"


def _import_verifiers() -> Any:
    try:
        import verifiers as vf
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    version = str(getattr(vf, "__version__", "0"))
    if not version.startswith("0.3."):
        raise UserError(
            f"env=verifiers runs the classic API of verifiers 0.3.x; verifiers {version} is installed: "
            "pip install 'grpo[verifiers]' (verifiers>=0.3.0,<0.4)"
        )
    return vf


def load_verifiers_env(env_id: str, args: Mapping[str, Any] | None = None) -> Any:
    """`verifiers.load_environment(env_id, **args)`, with one-line UserErrors for a missing extra,
    an environment that is not installed, or one that fails to load. verifiers installs SIGINT /
    SIGTERM handlers when an environment is constructed; the process's own handlers are put back
    (grpo's interrupt handling stays in charge; the env's teardown still runs at exit)."""
    vf = _import_verifiers()
    if not isinstance(env_id, str) or not env_id:
        raise UserError("env.id: required; the verifiers environment to load, e.g. env.id=vf-my-env")
    # verifiers imports the module named after the id (`org/my-env` -> my_env)
    module = env_id.replace("-", "_").split("/")[-1]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UserError(
            f"env.id={env_id}: no installed verifiers environment (module {module!r} is not importable); "
            "install it first (e.g. vf-install, or pip install the environment's package)"
        )
    main_thread = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    from grpo.trl_adapter.logs import quiet_progress_bars

    try:
        with quiet_progress_bars():  # the env formatting its datasets: not the user's business
            env = vf.load_environment(env_id, **dict(args or {}))
    except Exception as ex:
        reason = str(ex.__cause__ or ex).strip().splitlines()
        raise UserError(
            f"env.id={env_id}: verifiers could not load it ({reason[0] if reason else type(ex).__name__}); "
            "check env.args"
        ) from ex
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
    return env


def _plain(messages: Any) -> Messages:
    """Messages (dicts from a dataset, or verifiers' pydantic messages) as plain dicts, without
    the empty fields a dataset's struct column adds (tool_calls=None, ...)."""
    out = []
    for m in messages or []:
        d = m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m)
        out.append({k: v for k, v in d.items() if v is not None})
    return out


def _reward_funcs(vf: Any, rubric: Any) -> list[tuple[Any, Any, float]]:
    """(rubric, function, weight) of every reward function and metric of a rubric, RubricGroups
    flattened (a group's reward is the sum of its members')."""
    if isinstance(rubric, vf.RubricGroup):
        return [entry for member in rubric.rubrics for entry in _reward_funcs(vf, member)]
    return [(rubric, func, weight) for func, weight in zip(rubric.funcs, rubric.weights, strict=True)]


class VerifiersEnv(LoadedRowsEnv):
    """A loaded verifiers MultiTurnEnv (SingleTurnEnv included) as a grpo Environment.

    One way in: when the installed module holds a verifiers v1 taskset (it exports a
    `verifiers.v1.Taskset` subclass and no `load_environment`), constructing this class builds a
    `grpo.envs.verifiers_v1.VerifiersV1Env` instead, with the same arguments (`max_concurrent`,
    `timeout_s` and `eval_args` apply to v1 only).

    `id`: the installed environment (`verifiers.load_environment(id, **args)`); `args`: its
    `load_environment` arguments. `num_train_examples` / `num_eval_examples`: at most this many
    rows of each split (None: all). `max_turns`: a bound on model turns for an environment without
    one of its own (None: the env's own max_turns; unbounded envs then end on the completion token
    budget). `name`: the run's env name (default: the id's last part)."""

    def __init__(
        self,
        id: str,  # noqa: A002 - the verifiers environment id, as `vf-eval <id>` names it
        args: Mapping[str, Any] | None = None,
        seed: int = 0,
        num_train_examples: int | None = None,
        num_eval_examples: int | None = None,
        max_turns: int | None = None,
        language: Any = "en",
        name: str | None = None,
        prompts: Mapping[str, Any] | None = None,
        max_concurrent: int = 32,
        timeout_s: float | None = 600.0,
        eval_args: Mapping[str, Any] | None = None,
    ):
        from grpo.envs.base import int_arg

        if prompts:
            raise UserError("env.prompts: a verifiers environment brings its own prompts; drop env.prompts")
        if args is not None and not isinstance(args, Mapping):
            raise UserError(f"env.args: expected a mapping of load_environment arguments, got {args!r}")
        super().__init__(seed, 1, 1, language, name or str(id).split("/")[-1], None)
        if self.language != "en":
            raise UserError(
                f"language={self.language}: a verifiers environment runs its own prompts as they are, and "
                "language= does not apply to it; drop the language override (en labels its rows)"
            )
        self._set_limits(num_train_examples, num_eval_examples)
        self.env_id, self.env_args = id, dict(args or {})
        vf = self.vf = _import_verifiers()
        self.vf_env = load_verifiers_env(id, self.env_args)
        what = type(self.vf_env).__name__
        if not isinstance(self.vf_env, vf.MultiTurnEnv):
            raise UserError(
                f"env.id={id}: {what} has a rollout of its own; grpo runs MultiTurnEnv environments "
                "(SingleTurnEnv, MultiTurnEnv and their subclasses)"
            )
        if isinstance(self.vf_env, vf.ToolEnv) or self.vf_env.tool_defs:
            raise UserError(
                f"env.id={id}: {what} uses tools, which grpo's rollout engine does not pass to models"
            )
        print(
            f"env.id={id}: a classic verifiers environment ({what}, from load_environment), run by "
            "grpo's rollout engine",
            file=sys.stderr,
        )
        own = int(self.vf_env.max_turns)
        bound = None if max_turns is None else int_arg("max_turns", max_turns, 1)
        limits = [t for t in (own if own > 0 else None, bound) if t is not None]
        # no bound at all: the completion token budget ends the episode (each turn costs tokens)
        self.max_turns = min(limits) if limits else sys.maxsize
        self.multi_turn = self.max_turns > 1
        self.parser = self.vf_env.parser
        self._loop = LoopThread("grpo-verifiers")
        self._funcs = self._named_funcs()
        self.rubric = Rubric(
            [RewardFunc(name, _BatchedReward(self, name), float(weight)) for name, weight in self._funcs]
        )
        # the datasets' own columns: a row's verifiers input is its info without grpo's keys
        self._columns: set[str] = set()

    def __new__(cls, id: Any = None, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
        if cls is VerifiersEnv and isinstance(id, str) and id:
            _import_verifiers()
            from grpo.envs.verifiers_v1 import VerifiersV1Env, module_of, v1_taskset_class

            module = module_of(id)
            if (
                module is not None
                and not hasattr(module, "load_environment")
                and not v1_taskset_class(module)
            ):
                raise UserError(
                    f"env.id={id}: module {module.__name__!r} exposes neither load_environment (a classic "
                    "verifiers environment) nor a verifiers.v1 Taskset subclass in its __all__ (a v1 taskset)"
                )
            if module is not None and not hasattr(module, "load_environment"):
                if kwargs.pop("prompts", None):
                    raise UserError(
                        "env.prompts: a verifiers environment brings its own prompts; drop env.prompts"
                    )
                return VerifiersV1Env(id, *args, **kwargs)
        return super().__new__(cls)

    # ---- rewards ---------------------------------------------------------------------------
    def _named_funcs(self) -> list[tuple[str, float]]:
        """The grpo name and weight of each verifiers reward function, in the rubric's order."""
        named = []
        for rubric, func, weight in _reward_funcs(self.vf, self.vf_env.rubric):
            name = getattr(func, "__name__", repr(func))
            if rubric._is_group_func(func):  # the rubric's own rule (plural arguments, a list result)
                raise UserError(
                    f"env.id={self.env_id}: reward function {name!r} scores a group of rollouts together; "
                    "grpo scores each rollout on its own (group reward functions are not supported)"
                )
            named.append((_PREFIX + name if name in RESERVED_KEYS else name, weight))
        return named

    # ---- dataset -------------------------------------------------------------------------
    def _load_rows(self, split: str) -> list[Row]:
        """The env's dataset for `split` (eval: its eval_dataset, else its dataset), in its
        order; Row.id is the row's example_id."""
        env = self.vf_env
        try:
            dataset = env.get_dataset() if split == "train" else env.get_eval_dataset()
        except ValueError as ex:  # e.g. an eval-only env asked for train rows
            raise UserError(f"env.id={self.env_id}: no {split} rows ({ex})") from None
        limit = self.limits[split]
        if limit is not None and limit < len(dataset):
            dataset = dataset.select(range(limit))
        rows = []
        for index, record in enumerate(dataset):
            record = dict(record)
            prompt = record.pop("prompt")
            if isinstance(prompt, str):
                raise UserError(
                    f"env.id={self.env_id}: row {index} has a text prompt (completion mode); grpo runs chat prompts"
                )
            example_id = record.get("example_id")
            row_id = example_id if isinstance(example_id, int) else index
            info = {**record, "language": self.language}
            rows.append(Row(row_id, _plain(prompt), info, self.language))
        self._columns |= set(dataset.column_names)
        return rows

    def _input(self, row: Row) -> dict[str, Any]:
        """The verifiers rollout input of a row: its dataset columns and prompt."""
        record = {k: v for k, v in row.info.items() if k in self._columns}
        return {**record, "prompt": list(row.prompt)}

    # ---- interaction -----------------------------------------------------------------------
    def initial_state(self, row: Row) -> dict[str, Any]:
        """A verifiers State as the env's rollout starts it: `init_state` then `setup_state`."""
        return self._loop.run(self._initial_state(row))

    async def _initial_state(self, row: Row) -> Any:
        env = self.vf_env
        state = await env.init_state(self._input(row), client=_no_client(self.vf), model=self.name)
        try:
            set_up = await env.setup_state(state)
            if set_up is not None:
                state = set_up
        except self.vf.Error as ex:  # verifiers records it; the has_error stop condition ends the episode
            state["error"] = ex
        state[_FINALIZED] = False
        return state

    def env_response(self, messages: Messages, state: dict[str, Any], row: Row) -> Messages | None:
        """After a model turn: None when a stop condition fires (or the env's reply is its final
        one), else the env's reply as plain message dicts."""
        return self._loop.run(self._env_response(messages, state))

    async def _env_response(self, messages: Messages, state: Any) -> Messages | None:
        env = self.vf_env
        self._record_turns(state, messages)
        if await env.is_completed(state):
            return None
        step = state["trajectory"][-1]
        history = list(step["prompt"]) + list(step["completion"])
        try:
            reply = await env.env_response(history, state)
        except self.vf.Error as ex:
            state["error"] = ex
            await env.is_completed(state)
            return None
        if state.get("final_env_response") is not None:
            await env.is_completed(state)  # records stop_condition, as the env's own loop does
            return None
        from verifiers.utils.message_utils import maybe_normalize_messages

        reply = _plain(maybe_normalize_messages(reply, field_name="env_response"))
        return reply or None

    def _record_turns(self, state: Any, messages: Messages) -> None:
        """Append a trajectory step for each assistant message of `messages` (the whole
        conversation) after the prompt not yet recorded: verifiers' stop conditions, completion rendering and
        reward functions read the turns from state["trajectory"]."""
        from verifiers.utils.message_utils import normalize_messages

        done = len(state["trajectory"])
        # the prompt's own assistant messages (few-shot) are no model turns
        for at in range(len(state["prompt"]), len(messages)):
            message = messages[at]
            if message.get("role") != "assistant":
                continue
            if done > 0:
                done -= 1
                continue
            state["trajectory"].append(
                {
                    "prompt": normalize_messages(messages[:at], field_name="prompt"),
                    "completion": normalize_messages([message], field_name="completion"),
                    "response": None,
                    "tokens": None,
                    "reward": None,
                    "advantage": None,
                    "is_truncated": False,
                    "trajectory_id": state["trajectory_id"],
                    "extras": {},
                }
            )

    # ---- scoring ---------------------------------------------------------------------------
    def score(
        self, row: Row, completion: Messages, state: dict[str, Any] | None = None
    ) -> dict[str, float | None]:
        """Each reward function's score, as the env's rubric computes it on the rollout's state.
        Without a state (a scripted completion), the episode is replayed: the completion's
        assistant turns go through the env as a model's would, so the state is the one a verifiers
        rollout of those turns would have."""
        if not state:
            state = self.replay(
                row, [m.get("content", "") for m in completion if m.get("role") == "assistant"]
            )[1]
        return self._loop.run(self._score(row, completion, state))

    def reference_completion(self, row: Row) -> Messages:
        """The row's perfect episode, where the env has one: a single-turn env whose parser writes
        fields (verifiers' XMLParser: `format`) and whose row carries its `answer`, answered in the
        parser's format, which must score the rubric's maximum (every weighted function 1);
        NotImplementedError otherwise (no SFT demonstrations from this env: give sft.data_path)."""
        answer = row.info.get("answer")
        write = getattr(self.parser, "format", None)
        field = getattr(self.parser, "answer_field", None)
        if self.max_turns != 1 or answer in (None, "") or not callable(write) or not field:
            raise NotImplementedError(f"env {self.name} has no reference answers")
        completion = [{"role": "assistant", "content": str(write(**{field: str(answer)}))}]
        scores = self.score(row, completion)
        weights = dict(self._funcs)
        if any(weights.get(name) and scores.get(name) != 1.0 for name in scores):
            raise NotImplementedError(
                f"env {self.name}: its answer in the parser's format does not score full marks"
            )
        return completion

    def replay(self, row: Row, assistant_texts: list[str]) -> tuple[Messages, Any]:
        """The episode of scripted model turns: (completion, state), as the rollout engine would
        produce it (the turns after the env ends the episode are dropped)."""
        state = self.initial_state(row)
        completion: Messages = []
        for turn, text in enumerate(assistant_texts, 1):
            completion.append({"role": "assistant", "content": text})
            if turn >= self.max_turns:
                break
            reply = self.env_response(list(row.prompt) + completion, state, row)
            if not reply:
                break
            completion.extend(reply)
        return completion, state

    async def _score(self, row: Row, completion: Messages, state: Any) -> dict[str, float | None]:
        key = json.dumps(completion, sort_keys=True, ensure_ascii=False, default=str)
        cached = state.get(_SCORED)
        if cached is not None and cached[0] == key:
            return dict(cached[1])
        await self._finalize(state, list(row.prompt) + list(completion))
        await self.vf_env.rubric.score_group([state])
        metrics = state.get("metrics") or {}
        scores = {}
        for (name, _), (_, func, _) in zip(
            self._funcs, _reward_funcs(self.vf, self.vf_env.rubric), strict=True
        ):
            value = metrics.get(getattr(func, "__name__", repr(func)))
            scores[name] = None if value is None else float(value)
        state[_SCORED] = (key, scores)
        return dict(scores)

    async def _finalize(self, state: Any, messages: Messages) -> None:
        """What the env's rollout does after its last model turn: the stop check (unless one
        already fired), then its cleanup handlers (render_state: state["completion"], the final
        env response included)."""
        if state.get(_FINALIZED):
            return
        self._record_turns(state, messages)
        if not state.get("is_completed"):
            await self.vf_env.is_completed(state)
        await self.vf_env.cleanup(state)
        state[_FINALIZED] = True

    def has_answer(self, row: Row, completion: Messages) -> bool | None:
        """Whether the env's parser reads an answer from the completion (its `parse_answer`)."""
        try:
            return self.parser.parse_answer(completion) is not None
        except Exception:
            return None


class _BatchedReward:
    """One verifiers reward function as a batched TRL reward function: each completion's score is
    read from its rollout's state, which the env's rubric scores once for all its functions.
    Batched (`trl_batched`), so grpo.rewards passes verifiers' values to TRL unclipped."""

    trl_batched = True

    def __init__(self, env: VerifiersEnv, name: str):
        self.env, self.name = env, name
        self.__name__ = name  # TRL's metric name

    def __repr__(self) -> str:
        return f"VerifiersReward({self.name!r}, {self.env.env_id!r})"

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        episodes, states = kwargs.get(COMPLETION_FIELD), kwargs.get(STATE_FIELD)
        if episodes is None or states is None:
            raise RuntimeError(
                "a verifiers reward needs grpo's rollout function (the episode and its verifiers state)"
            )
        out = []
        for episode, state in zip(episodes, states, strict=True):
            # the prompt as the env formatted it (TRL's `prompts` may be rendered text)
            row = Row(0, _plain(state["prompt"]), {}, self.env.language)
            out.append(self.env._loop.run(self.env._score(row, list(episode), state))[self.name])
        return out


_NO_CLIENT: Any = None


def _no_client(vf: Any) -> Any:
    """A verifiers Client that is never called: grpo's rollout engine generates the model turns;
    `init_state` only stores it in the state."""
    global _NO_CLIENT
    if _NO_CLIENT is None:

        class NoClient(vf.Client):
            def setup_client(self, config: Any) -> None:
                return None

            async def to_native_tool(self, tool: Any) -> Any:
                return tool

            async def to_native_prompt(self, messages: Any) -> Any:
                raise RuntimeError("grpo generates the model turns of a verifiers environment")

            async def get_native_response(self, *args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("grpo generates the model turns of a verifiers environment")

            async def raise_from_native_response(self, response: Any) -> None:
                return None

            async def from_native_response(self, response: Any) -> Any:
                raise RuntimeError("grpo generates the model turns of a verifiers environment")

            async def close(self) -> None:
                return None

        _NO_CLIENT = NoClient(object())
    return _NO_CLIENT
