"""What grpo adds to TRL, shared by its three training stages (GRPO, SFT, the reward model).

    config.py     TRL's config dataclass from our settings, one-line errors (`build_trl_config`)
    trainer.py    a stage's TRL trainer with grpo's callbacks (`make_trainer`), its training run
                  (`run_trainer`), where TRL loads a second copy of the policy from (`point_model_at`)
    logs.py       what the libraries print that is not the user's business, silenced at its source
    devices.py    CUDA and sharding probes, FSDP2 over CPU processes, the fused LM head on CPU
    internals.py  EVERY use of TRL's private or undocumented internals, one small function each,
                  pinned against the installed TRL by tests/test_trl_adapter.py

    args = build_trl_config(GRPOConfig, kwargs, "trainer", "trainer.extra")   # one-line errors
    trainer = make_trainer(GRPOTrainer, "train", [progress, tracker_cb], model=..., args=args, ...)
    seconds = run_trainer(trainer, "train", resume_from)   # Interrupted after a graceful stop
    point_model_at(model, paths.sft)                        # where TRL loads its second copy from

Imports only errors and the run's bookkeeping (grpo/run/); the three training stages, rewards,
tracking, generation and grpo/stages.py import it. Importing it is light: torch, transformers and
trl are imported inside the functions.
"""
