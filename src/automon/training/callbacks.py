"""Trainer callbacks: the metrics file, and checkpoint-then-stop on SIGTERM / SIGUSR1 / SIGINT (Ctrl-C).

Slurm sends SIGTERM before preemption (and SIGUSR1 before the time limit with
`--signal=USR1@<seconds>`). The handler only sets a flag; at the end of the current optimizer step
the callback asks the Trainer to save a checkpoint and stop, and `run()` exits with 128 + signal.
Rerunning the same command resumes from that checkpoint.
"""

from __future__ import annotations

import json
import logging
import math
import signal
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from automon.training.errors import TrainError

log = logging.getLogger(__name__)

# SIGINT (Ctrl-C) too: the run stops the same way, after a checkpoint; a second Ctrl-C stops at once.
PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class PreemptionGuard:
    """Installs handlers for PREEMPT_SIGNALS for the duration of a `with` block."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def _handler(self, signum, frame) -> None:  # noqa: ARG002
        if signum == signal.SIGINT and self.signum is not None:
            raise KeyboardInterrupt  # asked twice: stop now (the newest complete checkpoint still resumes)
        if self.signum is None:
            log.warning("received %s: saving a checkpoint at the end of this step, then stopping",
                        signal.Signals(signum).name)
        self.signum = signum

    def __enter__(self) -> "PreemptionGuard":
        for s in PREEMPT_SIGNALS:
            self._old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


class PreemptionCallback(TrainerCallback):
    def __init__(self, guard: PreemptionGuard) -> None:
        self.guard = guard

    def on_step_end(self, args, state, control, **kwargs):
        if self.guard.signum is not None:
            control.should_save = True
            control.should_training_stop = True
        return control


class MetricsCallback(TrainerCallback):
    """Appends every training log line (step, loss, lr, grad_norm, tokens, tokens/s) to metrics.jsonl."""

    KEYS = ("loss", "learning_rate", "grad_norm", "epoch", "tokens_seen", "tokens_per_s")

    def __init__(self, path: Path, throughput) -> None:
        self.path = path
        self.throughput = throughput

    def on_train_begin(self, args, state, control, **kwargs):
        self.throughput.start(state.num_input_tokens_seen)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:
            return
        rec = {"step": state.global_step}
        for k in self.KEYS:
            if k in logs:
                v = logs[k]
                rec["lr" if k == "learning_rate" else k] = (None if isinstance(v, float) and not math.isfinite(v)
                                                            else v)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        loss = logs["loss"]
        if isinstance(loss, (int, float)) and not math.isfinite(loss):
            # Nothing trained from here on is worth keeping: stop before a NaN adapter is saved.
            raise TrainError(f"training diverged: the loss is {loss} at step {state.global_step}",
                             str(self.path), "lower train.lr (and check train.max_grad_norm), then rerun with "
                             "overwrite=true: the checkpoints of this run may hold the diverged weights")
        log.info("step %d  loss %.4f  lr %.3g  %s tok/s", state.global_step, logs["loss"],
                 logs.get("learning_rate", float("nan")), logs.get("tokens_per_s", "-"))
