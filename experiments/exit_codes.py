"""The exit codes of the binaries (train, sweep; plan and report use 0 and 2), one list.

A batch scheduler can act on them: requeue on REQUEUE (SLURM: the recipe's
`scontrol requeue`; Kubernetes: a podFailurePolicy rule `onExitCodes: {operator: In,
values: [75]}, action: Ignore`), report the others as they are.

Imports nothing but os: experiments/loading_signals.py uses it before anything else is loaded.
"""
import os

DONE = 0          # finished: every round (train), every cell done (sweep)
CELL_FAILED = 1   # sweep: a cell ended in an error (its line and status file say which)
BAD_INPUT = 2     # a bad flag, config value or workdir, missing or damaged data: one line
DIVERGED = 3      # a round's loss or parameters were not finite (sweep: a cell diverged)
WRITE_FAILED = 4  # a checkpoint or metrics write failed (disk full, quota, I/O)
PEER_LOST = 5     # a process of a multi-process run never joined, or died
ELSEWHERE = 6     # sweep: cells are running in another process (--nowait, --list)
REQUEUE = os.EX_TEMPFAIL  # 75: stopped by SIGTERM / SIGINT after a checkpoint (or before
                          # any work), or (sweep) cells unfinished: rerun to continue
# 128 + N: a second signal N ended the process at once (the last checkpoint kept)
