"""Learning-rate schedules: a pure function of the step, so the schedule state in a checkpoint is the step."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenmill.train.config import ScheduleConfig


@dataclass(frozen=True)
class Schedule:
    """lr(step) = peak x factor(step). Warmup ramps linearly from peak/warmup to peak over warmup_steps.

    cosine: from the end of warmup to the last step, half a cosine from 1 down to min_lr_ratio.
    wsd: 1 until decay_start, then linear down to min_lr_ratio at the last step.
    """

    kind: str
    peak: float
    total_steps: int
    warmup_steps: int
    min_ratio: float
    decay_start: int  # wsd only

    def factor(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        last = max(self.total_steps - 1, 1)
        if self.kind == "cosine":
            span = max(last - self.warmup_steps, 1)
            progress = min(1.0, (step - self.warmup_steps) / span)
            return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
        if step < self.decay_start:
            return 1.0
        span = max(last - self.decay_start, 1)
        return 1.0 - (1 - self.min_ratio) * min(1.0, (step - self.decay_start) / span)

    def lr(self, step: int) -> float:
        return self.peak * self.factor(step)


def make_schedule(cfg: ScheduleConfig, peak: float, total_steps: int, phase_start_step: int | None) -> Schedule:
    """phase_start_step: the first step of the plan's decay phase (the anneal phase), None when the plan has
    none. WSD decays over that phase when it starts after warmup and before the last step, otherwise over the
    last decay_fraction of the run (a scout that stops before the anneal phase still ends on the floor)."""
    warmup = min(cfg.warmup_steps, max(total_steps - 1, 0))
    if cfg.kind == "wsd" and phase_start_step is not None and warmup <= phase_start_step < total_steps - 1:
        decay_start = phase_start_step
    else:
        decay_start = max(warmup, total_steps - max(1, round(cfg.decay_fraction * total_steps)))
    return Schedule(cfg.kind, peak, total_steps, warmup, cfg.min_lr_ratio, decay_start)
