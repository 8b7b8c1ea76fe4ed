"""verifiers v1 tasksets (`import verifiers.v1 as vf`: a Taskset of Tasks, @vf.reward methods over
a trace, an Env whose `run` drives the turns) run by grpo offline, for evaluation and training.

    python -m grpo +env=verifiers env.id=<taskset id> 'env.args={num_tasks: 100}'

`+env=verifiers` builds this class when the installed module exports a v1 Taskset (and the
classic adapter, grpo/envs/verifiers_env.py, when it exposes `load_environment`).

How an episode runs (all on this machine, no network):
  - the policy answers on grpo's policy server (grpo/serve/): started on 127.0.0.1 when the first
    episodes run, on the generation backend in use (the trainer's policy during training), and
    stopped with the run. A token-level backend (hf) is called through verifiers' training client
    (TrainClientConfig: prompts rendered to ids, /inference/v1/generate, ids + logprobs back);
    generation=vllm_server points that client at the vLLM server itself; generation=openai (text
    only, evaluation) relays chat completions to that endpoint (EvalClientConfig).
  - the harness is grpo's chat loop (grpo/envs/v1_harness.py, in-process: no `uv`), the runtime
    verifiers' local subprocess runtime (no remote sandbox), on every role of the env;
  - episodes run `env.run_episode` inside `env.serving()`, at most `max_concurrent` at once, each
    bounded by `timeout_s`; a failed episode is counted and said in one line per batch.

From trace to training row (the documented rule): the episode's first trainable trace, and of its
branches the LAST one (the conversation as it ended; an earlier branch exists when the history was
re-tokenised differently, and its sampled tokens are counted in `dropped_branch_tokens`, not
trained on). prompt_ids = the branch's ids before its first sampled token; completion_ids = the
rest; env_mask = the branch's sampled mask (1 = the model's token), logprobs as the engine
returned them. A failed episode is dropped from the loss (an all-zero mask, rewards None) and
counted. The trace's named rewards (and @vf.metric values, weight 0) are the rubric's columns.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import importlib
import logging
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from grpo.envs.base import Messages, Row, int_arg
from grpo.envs.loaded_rows import LoadedRowsEnv
from grpo.envs.loop_thread import LoopThread
from grpo.envs.rubric import COMPLETION_FIELD, RESERVED_KEYS, STATE_FIELD, RewardFunc, Rubric
from grpo.errors import UserError
from grpo.generation.base import mix_seed

# keys of a rollout's state
TRACE_KEY = "v1_trace"
SCORES_KEY = "v1_scores"
ERROR_KEY = "v1_error"
_PREFIX = "vf_"
# episodes sharing one renderer of the training client (verifiers' default: more renderers, each
# with its own lock and thread, measured slower here: the GIL, not the lock, bounds rendering)
MULTIPLEX = 256


def v1_taskset_class(module: Any) -> type | None:
    """The v1 Taskset subclass a module exports (via __all__), or None."""
    try:
        from verifiers.v1 import Taskset
    except ImportError:
        return None
    found = [
        obj
        for name in getattr(module, "__all__", ()) or ()
        if isinstance(obj := getattr(module, name, None), type)
        and issubclass(obj, Taskset)
        and obj is not Taskset
    ]
    return found[0] if found else None


def module_of(env_id: str) -> Any | None:
    """The module verifiers imports for an id (`org/my-env@1.0` -> my_env), or None."""
    name = str(env_id).rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _register_harness() -> None:
    """verifiers loads harnesses by id as importable modules: grpo's chat harness is registered
    under its id (an alias of grpo.envs.v1_harness in sys.modules)."""
    from grpo.envs import v1_harness

    sys.modules.setdefault(v1_harness.HARNESS_ID, v1_harness)


_LOOP: LoopThread | None = None


def _episode_loop() -> LoopThread:
    """The one event loop every v1 environment of the process runs its episodes on: verifiers and
    its renderers keep process-wide asyncio state (locks, pools) that binds to the first loop
    using it, so a second loop (a second environment) would fail on it."""
    global _LOOP
    if _LOOP is None:
        _LOOP = LoopThread("grpo-verifiers-v1", fast=True)
    return _LOOP


class VerifiersV1Env(LoadedRowsEnv):
    """A verifiers v1 taskset (and the Env its package exports, else verifiers' single-agent one).

    `args`: the taskset's config fields (TasksetConfig subclass); `eval_args`: fields that differ
    for the eval rows (e.g. a split), else eval rows are the taskset's first `num_eval_examples`
    tasks. `max_concurrent`: episodes in flight at once; `timeout_s`: one episode's deadline;
    `max_turns`: a cap on model turns per agent run (None: the env's own)."""

    multi_turn = True

    def __init__(
        self,
        id: str,  # noqa: A002 - the taskset id, as verifiers names it
        args: Mapping[str, Any] | None = None,
        seed: int = 0,
        num_train_examples: int | None = None,
        num_eval_examples: int | None = None,
        max_turns: int | None = None,
        language: Any = "en",
        name: str | None = None,
        max_concurrent: int = 32,
        timeout_s: float | None = 600.0,
        eval_args: Mapping[str, Any] | None = None,
    ):
        super().__init__(seed, 1, 1, language, name or str(id).split("/")[-1].split("@")[0], None)
        if self.spec.is_mix:
            raise UserError(
                "language=mix: a v1 taskset's prompts are in the language its author wrote them in; "
                "name that one language (language=<code>) to label its rows"
            )
        self._set_limits(num_train_examples, num_eval_examples)
        self.max_concurrent = int_arg("max_concurrent", max_concurrent, 1)
        if timeout_s is not None and not (
            isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0
        ):
            raise UserError(
                f"env.timeout_s: expected a positive number of seconds or null, got {timeout_s!r}"
            )
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        self.turn_cap = None if max_turns is None else int_arg("max_turns", max_turns, 1)
        self.max_turns = self.turn_cap or sys.maxsize
        self.env_id = str(id)
        self.env_args = dict(args or {})
        self.eval_args = dict(eval_args or {})
        import verifiers.v1 as vf

        # verifiers logs every rollout at INFO, and the HTTP libraries every request, which
        # Hydra's root logger would print; their warnings and errors still show
        for noisy in ("verifiers", "renderers", "httpx", "aiohttp.access"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self.vf = vf
        _register_harness()
        self.vf_env = self._load(self.env_args)
        self._eval_env = self._load({**self.env_args, **self.eval_args}) if self.eval_args else self.vf_env
        task_cls = type(self.vf_env.taskset).task_type()
        if task_cls.toolsets(self.vf_env.taskset.config.task) or type(self.vf_env.taskset).toolsets(
            self.vf_env.taskset.config
        ):
            raise UserError(
                f"env.id={id}: this taskset gives the model tools, which grpo's chat harness does not pass"
            )
        self._funcs = self._named_funcs()
        self.rubric = Rubric([RewardFunc(n, _TraceReward(self, n), w) for n, w in self._funcs])
        self._language_checked = False
        self._tasks: dict[tuple[str, int], Any] = {}
        self._loop = _episode_loop()
        # before the interpreter tears threads down (a server stopped after that waits forever)
        atexit.register(self.close)
        self._server: Any = None
        self._served: Any = None
        self._renderer_dir: tempfile.TemporaryDirectory[str] | None = None
        # what happened in the last run_episodes call (read by evaluation and tests)
        self.last_errors: list[str] = []
        self.dropped_branch_tokens = 0
        # episodes running now, each with at most one model call outstanding: the policy server
        # waits for that many requests before it generates (grpo's engine's lockstep)
        self._in_flight = 0
        print(
            f"env.id={id}: a verifiers v1 taskset ({type(self.vf_env.taskset).__name__}, env "
            f"{type(self.vf_env).__name__}), run by grpo's chat harness on a local runtime",
            file=sys.stderr,
        )

    # ---- construction ------------------------------------------------------------------------
    def _load(self, taskset_args: Mapping[str, Any]) -> Any:
        from verifiers.v1.configs.env import _declared_agent_configs
        from verifiers.v1.utils.loaders import env_config_type, load_environment

        from grpo.envs.v1_harness import HARNESS_ID

        try:
            cls = env_config_type(self.env_id)
            roles = _declared_agent_configs(cls())
            agent = {"harness": {"id": HARNESS_ID}, "runtime": {"type": "subprocess"}}
            if self.turn_cap is not None:
                agent["max_turns"] = self.turn_cap
            config = cls.model_validate(
                {
                    "taskset": {"id": self.env_id, **dict(taskset_args)},
                    "timeout": {"episode": self.timeout_s},
                    **{role: agent for role in roles},
                }
            )
            return load_environment(config)
        except Exception as ex:  # noqa: BLE001 - any failure to build is the user's config or package
            reason = str(ex).strip().splitlines()
            raise UserError(
                f"env.id={self.env_id}: verifiers could not build the v1 environment "
                f"({reason[0] if reason else type(ex).__name__}); check env.args"
            ) from ex

    def _named_funcs(self) -> list[tuple[str, float]]:
        """(name, weight) of the task's rewards (judges included), then its metrics (weight 0)."""
        taskset = self.vf_env.taskset
        probe = type(taskset).task_type()(
            type(taskset).task_type().data_type().model_construct(), taskset.config.task
        )
        named = [(fn.__name__, float(getattr(fn, "_vf_weight", 1.0))) for fn in probe.hooks("reward")]
        named += [(j.reward_name, float(j.config.weight)) for j in probe.plugged_judges()]
        named += [(fn.__name__, 0.0) for fn in probe.hooks("metric")]
        return [(_PREFIX + n if n in RESERVED_KEYS else n, w) for n, w in named]

    # ---- rows --------------------------------------------------------------------------------
    def _load_rows(self, split: str) -> list[Row]:
        taskset = (self._eval_env if split == "eval" else self.vf_env).taskset
        limit = self.limits[split]
        if getattr(taskset, "INFINITE", False) and limit is None:
            raise UserError(f"env.id={self.env_id}: the taskset is infinite; set env.num_{split}_examples")
        rows = []
        try:
            for index, task in enumerate(taskset.head(limit) if limit is not None else taskset):
                data = task.data
                prompt: Messages = (
                    [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
                )
                if isinstance(data.prompt, str):
                    prompt.append({"role": "user", "content": data.prompt})
                elif data.prompt:
                    prompt.extend(_wire(m) for m in data.prompt)
                info = {"task_key": task.key, "language": self.language}
                rows.append(Row(index, prompt, info, self.language))
                self._tasks[(split, index)] = task
        except UserError:
            raise
        except Exception as ex:  # noqa: BLE001 - the taskset's own load() failing
            raise UserError(f"env.id={self.env_id}: the taskset could not load its tasks ({ex})") from ex
        if not rows:
            raise UserError(f"env.id={self.env_id}: the taskset has no tasks for {split}")
        self._check_language(rows)
        return rows

    def _check_language(self, rows: list[Row]) -> None:
        """One line when the prompts read as another language than the one labelling the rows
        (a taskset does not say its language; language= does)."""
        if self._language_checked:
            return
        self._language_checked = True
        from grpo.languages.identify import identify, is_language

        text = " ".join(
            m.get("content") or ""
            for row in rows[:8]
            for m in row.prompt
            if isinstance(m.get("content"), str)
        )
        if not text.strip():
            return
        labels, probs = identify(text)
        if labels and probs[0] >= 0.5 and not is_language(text, self.language):
            print(
                f"env.id={self.env_id}: its prompts read as {labels[0]}, but language={self.language} labels "
                f"its rows (the per-language report, the language-consistency reward); pass language=<code> "
                "with the language they are written in",
                file=sys.stderr,
            )

    def _task(self, row: Row) -> tuple[Any, Any]:
        for split, env in (("train", self.vf_env), ("eval", self._eval_env)):
            task = self._tasks.get((split, row.id))
            if task is not None and task.key == row.info.get("task_key"):
                return task, env
        raise KeyError(f"row {row.id} is not a row of env.id={self.env_id}")

    # ---- episodes ----------------------------------------------------------------------------
    def initial_state(self, row: Row) -> dict[str, Any]:
        raise UserError(f"env.id={self.env_id}: a v1 environment runs its own episodes (run_episodes)")

    def run_episodes(
        self,
        rows: Sequence[Row],
        backend: Any,
        *,
        rollouts_per_row: int,
        sampling: Any,
        max_completion_tokens: int | None = None,
        progress: bool = False,
    ) -> list[Any]:
        """`rollouts_per_row` episodes of every row through verifiers, in row-major order, each
        as the fields of a grpo Rollout (completion, state, prompt_ids, completion_ids, env_mask,
        logprobs, truncated, cut_turns: the contract of grpo.rollout.run_rollouts)."""
        ctx = self._context(backend, sampling, max_completion_tokens)
        jobs = [(row, k, *self._task(row)) for row in rows for k in range(rollouts_per_row)]
        if sampling.seed is None:
            contexts = [ctx] * len(jobs)
        else:  # each episode its own seed (every model turn of it sends that seed)
            contexts = [
                dataclasses.replace(
                    ctx, sampling=ctx.sampling.model_copy(update={"seed": mix_seed(sampling.seed, i)})
                )
                for i in range(len(jobs))
            ]
        try:
            episodes = self._loop.run(self._run_all(jobs, contexts, progress))
        finally:
            forget = getattr(backend, "forget_conversations", None)
            if forget is not None:  # the weights may change before the next call: no stale cache
                forget()
        self.last_errors = [e for e in (_failure(ep) for ep in episodes) if e]
        if self.last_errors:
            print(
                f"env.id={self.env_id}: {len(self.last_errors)} of {len(episodes)} episodes failed "
                f"(dropped from the loss, rewards none); first: {self.last_errors[0]}",
                file=sys.stderr,
            )
        token_level = ctx.client.type == "train"
        return [
            self._episode(episode, row, token_level, max_completion_tokens)
            for (row, _, _, _), episode in zip(jobs, episodes, strict=True)
        ]

    async def _run_all(self, jobs: list[tuple[Any, ...]], contexts: list[Any], progress: bool) -> list[Any]:
        semaphore = asyncio.Semaphore(self.max_concurrent)
        envs = {id(env): env for *_, env in jobs}
        out: list[Any] = [None] * len(jobs)
        bar = None
        if progress:  # episodes run in lockstep here too, but each ends on its own: count them
            from tqdm.auto import tqdm

            bar = tqdm(total=len(jobs), desc="episodes", unit="episode", leave=False)
        try:
            async with contextlib.AsyncExitStack() as stack:
                for env in envs.values():
                    await stack.enter_async_context(env.serving())

                async def one(i: int, task: Any, env: Any) -> None:
                    async with semaphore:
                        self._in_flight += 1
                        try:
                            out[i] = await env.run_episode(task, contexts[i])
                        finally:
                            self._in_flight -= 1
                            if bar is not None:
                                bar.update(1)

                await asyncio.gather(*(one(i, task, env) for i, (_, _, task, env) in enumerate(jobs)))
        finally:
            if bar is not None:
                bar.close()
        return out

    def _context(self, backend: Any, sampling: Any, budget: int | None) -> Any:
        vf = self.vf
        sampling_cfg = vf.SamplingConfig(
            temperature=float(sampling.temperature),
            top_p=float(sampling.top_p),
            max_tokens=int(sampling.max_tokens_per_turn),
        )
        if not getattr(backend, "token_level", False):
            base_url = getattr(backend, "base_url", None)
            if not base_url:
                raise UserError(
                    "a v1 environment needs a token-level backend (hf) or an OpenAI-compatible one"
                )
            client = vf.EvalClientConfig(base_url=str(base_url), api_key_var=_key_var(backend))
            return vf.ModelContext(model=str(backend.model), client=client, sampling=sampling_cfg)
        url = getattr(backend, "server_url", None)  # vllm_server: its own /inference/v1/generate
        model = getattr(backend, "served_model", None) or "grpo-policy"
        if url is None:
            url, model = self._serve(backend), "grpo-policy"
        from renderers.configs import DefaultRendererConfig

        # the policy's own chat template (and model.chat_template_kwargs), exactly as grpo's engine
        # renders it: the renderers package's DefaultRenderer over the saved tokenizer
        template_kwargs = dict(getattr(backend, "chat_template_kwargs", None) or {})
        if template_kwargs:
            sampling_cfg = sampling_cfg.model_copy(update={"chat_template_kwargs": template_kwargs})
        client = vf.TrainClientConfig(
            base_url=url.rstrip("/") + "/v1",
            api_key_var="GRPO_POLICY_SERVER_KEY",
            renderer=DefaultRendererConfig(),
            renderer_model_name=self._renderer_model(backend),
            multiplex=MULTIPLEX,
        )
        return vf.ModelContext(model=model, client=client, sampling=sampling_cfg)

    def _serve(self, backend: Any) -> str:
        """The policy server on `backend`, started once and kept (restarted for a new backend)."""
        from grpo.serve import PolicyServer, ServeLimits

        if self._server is None or self._served is not backend:
            self.close()
            limits = ServeLimits(max_prompt_tokens=1 << 20, max_tokens=1 << 16, max_batch=1 << 10)
            self._server = PolicyServer(
                backend, model_name="grpo-policy", limits=limits, expected_requests=lambda: self._in_flight
            ).start()
            self._served = backend
        return self._server.url

    def _renderer_model(self, backend: Any) -> str:
        """A local folder the training client's renderer loads the tokenizer from (the policy's
        tokenizer and model config, saved once): it renders exactly the served policy's template."""
        if self._renderer_dir is None:
            self._renderer_dir = tempfile.TemporaryDirectory(prefix="grpo-v1-renderer-")
            backend.tokenizer.save_pretrained(self._renderer_dir.name)
            config = getattr(getattr(backend, "model", None), "config", None)
            if config is not None:
                config.save_pretrained(self._renderer_dir.name)
        return self._renderer_dir.name

    def close(self) -> None:
        """Stop the policy server and close the harness's HTTP session (atexit runs it too)."""
        if self._server is not None:
            self._server.stop()
            self._server, self._served = None, None
        from grpo.envs.v1_harness import close_session

        with contextlib.suppress(Exception):
            self._loop.run(close_session())

    # ---- traces -> rollouts ------------------------------------------------------------------
    def _episode(self, episode: Any, row: Row, token_level: bool, budget: int | None) -> dict[str, Any]:
        """One finished episode as the fields of a grpo Rollout (grpo/rollout.py builds it)."""
        trace = _trainable_trace(episode)
        error = _failure(episode)
        state: dict[str, Any] = {TRACE_KEY: trace, ERROR_KEY: error, SCORES_KEY: None}
        empty: dict[str, Any] = dict(
            completion=[],
            state=state,
            prompt_ids=[],
            completion_ids=[],
            env_mask=[],
            logprobs=[],
            truncated=False,
        )
        if trace is None or error:
            return empty
        state[SCORES_KEY] = _scores(trace, self._funcs)
        branches = trace.branches
        if not branches:
            return empty
        branch = branches[-1]
        completion = [_wire(m) for m in branch.messages[len(row.prompt) :]]
        cut_turns = sum(1 for c in trace.calls if c.finish_reason == "length")
        truncated = bool(trace.is_truncated) or cut_turns > 0
        out = dict(empty, completion=completion, truncated=truncated, cut_turns=cut_turns)
        if not token_level:
            return out
        self.dropped_branch_tokens += sum(sum(b.sampled_mask) for b in branches[:-1])
        ids, mask, lps = (
            list(branch.token_ids),
            [int(bool(m)) for m in branch.sampled_mask],
            list(branch.logprobs),
        )
        first = mask.index(1) if 1 in mask else len(ids)
        prompt_ids, completion_ids, env_mask, logprobs = ids[:first], ids[first:], mask[first:], lps[first:]
        if budget is not None and len(completion_ids) > budget:
            completion_ids, env_mask, logprobs = completion_ids[:budget], env_mask[:budget], logprobs[:budget]
            out["truncated"] = True
        out.update(
            prompt_ids=prompt_ids,
            completion_ids=completion_ids,
            env_mask=env_mask,
            logprobs=[float(x) if m else 0.0 for x, m in zip(logprobs, env_mask, strict=True)],
        )
        return out

    # ---- scoring -----------------------------------------------------------------------------
    def score(
        self, row: Row, completion: Messages, state: dict[str, Any] | None = None
    ) -> dict[str, float | None]:
        """The trace's named rewards and metrics, as verifiers scored the episode (None for a
        failed episode). A v1 environment scores only episodes it ran."""
        if not state or TRACE_KEY not in state:
            raise UserError(
                f"env.id={self.env_id}: a v1 taskset scores the traces of episodes it ran; it cannot "
                "score a completion given as text"
            )
        scores = state.get(SCORES_KEY)
        return {name: (None if scores is None else scores.get(name)) for name, _ in self._funcs}


class _TraceReward:
    """One named reward of a v1 trace as a batched TRL reward function (values as verifiers
    computed them, unclipped; None for a failed episode)."""

    trl_batched = True

    def __init__(self, env: VerifiersV1Env, name: str):
        self.env, self.name = env, name
        self.__name__ = name

    def __repr__(self) -> str:
        return f"VerifiersV1Reward({self.name!r}, {self.env.env_id!r})"

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        states = kwargs.get(STATE_FIELD)
        if states is None or kwargs.get(COMPLETION_FIELD) is None:
            raise RuntimeError("a v1 reward needs grpo's rollout function (the episode's trace)")
        return [None if not s or s.get(SCORES_KEY) is None else s[SCORES_KEY].get(self.name) for s in states]


def _scores(trace: Any, funcs: list[tuple[str, float]]) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    for name, reward in trace.rewards.items():
        values[name] = None if reward is None else float(reward.score)
    for name, value in trace.metrics.items():
        values.setdefault(name, None if value is None else float(value))
    return {(_PREFIX + n if n in RESERVED_KEYS else n): v for n, v in values.items()}


def _trainable_trace(episode: Any) -> Any:
    if episode is None:
        return None
    traces = [t for t in episode.traces if t.agent is None or t.agent.trainable]
    return traces[0] if traces else None


def _failure(episode: Any) -> str | None:
    """One line saying why an episode failed, or None."""
    if episode is None:
        return "the episode did not run"
    errors = list(episode.errors)
    for trace in episode.traces:
        errors.extend(trace.errors)
    if not errors and episode.ok:
        return None
    if not errors:
        return "the episode did not complete"
    e = errors[0]
    text = (e.message or "").strip().splitlines()
    return f"{e.type}: {text[0] if text else ''}"[:300]


def _wire(message: Any) -> dict[str, Any]:
    """A verifiers message as a plain {"role", "content"} dict."""
    if isinstance(message, dict):
        return {k: v for k, v in message.items() if v is not None}
    content = getattr(message, "content", None)
    if isinstance(content, list):
        content = "".join(getattr(p, "text", "") or "" for p in content)
    return {"role": str(getattr(message, "role", "user")), "content": content or ""}


def _key_var(backend: Any) -> str:
    return str(getattr(backend, "api_key_var", None) or "GRPO_NO_API_KEY")
