"""Run bookkeeping: where a run's files go and how it stops, resumes and spans processes.

    layout.py       the output root and every path inside a run folder, in one place
    checkpoints.py  trainer checkpoints on disk: which are complete, which is the latest, the best
    resume.py       resume=<run dir>: the resume plan (read once) and the settings a resume runs with
    interrupt.py    Ctrl-C / SIGTERM: stop at a step boundary with a checkpoint, exit 130 / 143
    distributed.py  several processes, one run: ranks, one run folder, collectives
    eta.py          a stage's speed and time left for its progress line
    checks.py       the settings rules of the run as a whole: finite numbers, stages, resume

Light: no torch at module level (transformers and torch only inside the callbacks and collectives
that need them), so the front door uses it before anything heavy. Imports only the schema,
errors and files.
"""
