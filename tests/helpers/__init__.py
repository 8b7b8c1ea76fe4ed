"""What several test files share; imported as `from helpers.<module> import ...` (pytest puts
tests/ on sys.path, as tests/ has no __init__.py).

- grpo_process: the one way a test starts `python -m grpo` (`run_grpo` to its end, `start_grpo`
  in the background), the environment such a process runs in, a short char_target training run;
- fake_envs: small environments written for the tests (`PingEnv`);
- packaged_env: an environment built from its packaged conf/env/<name>.yaml, as a run builds it;
- env_mask_check: a multi-turn rollout's env_mask checked token by token against the chat template;
- random_model: the overrides that let a random-weight model train (on its cut completions);
- mlflow_server: a real `mlflow server` process that can be stopped and started again.
"""
