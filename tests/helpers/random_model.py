"""What the tests that train the random-weight models (model=tiny / small) share.

A random-weight model almost never ends an answer on its own: nearly every completion stops at
the token limit. With the product's defaults (trainer.mask_truncated_completions=true,
trainer.truncated_reward=0) such a batch has no gradient and every reward is 0, so a test of the
training plumbing (rewards reaching TRL, resume, LoRA, held-out checks) would train nothing and
pass vacuously. Those tests train on cut completions as they are; the defaults themselves are
tested in test_train_monitors.py (a truncated completion's reward and loss)."""

TRAIN_ON_CUT_COMPLETIONS = ["trainer.mask_truncated_completions=false", "trainer.truncated_reward=null"]
