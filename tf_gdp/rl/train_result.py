"""What a training run ends with: `TrainResult`.

`trainer.Trainer.run` returns one; the workflows (`pretrain`, `finetune`)
pass it on, `pretrain` with the imitation phase's statistics when it ran.
"""

import dataclasses
import math
from typing import Optional


@dataclasses.dataclass
class TrainResult:
  """What a training run ended with.

  Attributes:
    iterations, evaluations, seconds: totals over the run (resumes included).
    best: task name -> Best (None if no valid placement was found).
    references: task name -> the reward's reference placement.
    measured_references: task name -> the reference's measured step time
      (us), for the measure and mix backends (None if never measured).
    history: one dict per iteration of this session (iteration,
      evaluations, seconds, reward_mean, best_ratio, entropy, loss).
    root_dir: where checkpoints and outputs went (None if nowhere).
    measurements: distinct placements run on the TF runtime in this session
      (measure and mix backends; evaluations count cached repeats too).
    imitation: the imitation phase's statistics (`imitation.ImitationStats`
      as a dict) when the run had one, else None.
  """
  iterations: int
  evaluations: int
  seconds: float
  best: dict
  references: dict
  history: list
  root_dir: Optional[str] = None
  measured_references: dict = dataclasses.field(default_factory=dict)
  measurements: int = 0
  imitation: Optional[dict] = None

  def best_step_time_us(self, name: Optional[str] = None) -> float:
    if name is None:
      if len(self.best) != 1:
        raise ValueError("name the task: the run placed several")
      name = next(iter(self.best))
    best = self.best[name]
    return best.step_time_us if best is not None else math.inf
