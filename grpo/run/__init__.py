"""Run bookkeeping: checkpoints, resume, interrupts, distributed processes."""
