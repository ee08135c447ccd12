"""The robust reward objective: the median step time over perturbed cost models.

With `PlacementEnv(robust_members=K)` the simulate backend prices every
sampled placement under the K members of a `tf_gdp.cost.ensemble.Ensemble`
of its task and rewards the median over members against the reference
placement's median under the same members; the task's best placement is
the one with the lowest median. Member 0 is the nominal model, whose step
time the environment keeps for reporting (`Evaluation.step_time_us`,
`Best.step_time_us`). The members are seeded by `ensemble.OBJECTIVE_SEED`,
so a report (seeded by `ensemble.REPORT_SEED`) judges the result on
members the search never saw.
"""

from typing import Optional, Sequence

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import ensemble as ensemble_lib
from tf_gdp.rl import rewards as rewards_lib


def for_environment(tasks: Sequence, members: int,
                    backend: str) -> Optional["RobustObjective"]:
  """The objective of a `PlacementEnv` (None for `members` = 0)."""
  if not members:
    return None
  if backend != "simulate":
    raise errors.InputError("the robust objective needs the simulate "
                            "backend (measured rewards are the truth)")
  return RobustObjective(tasks, members)


class RobustObjective:
  """Per task: its ensemble, the reference's median and the best's median."""

  def __init__(self, tasks: Sequence, members: int,
               seed: int = ensemble_lib.OBJECTIVE_SEED):
    if members < 1:
      raise errors.InputError(
          f"the robust objective needs >= 1 member, got {members}")
    self.members = int(members)
    self.seed = int(seed)
    self._tasks = list(tasks)
    self._ensembles = [None] * len(self._tasks)
    self._references = [None] * len(self._tasks)
    self._best = [(None, None)] * len(self._tasks)  # (Best, its median)

  def ensemble(self, index: int) -> ensemble_lib.Ensemble:
    """The task's ensemble (built on first use)."""
    if self._ensembles[index] is None:
      task = self._tasks[index]
      self._ensembles[index] = ensemble_lib.Ensemble(
          task.graph, task.topology, members=self.members, seed=self.seed)
    return self._ensembles[index]

  def medians(self, index: int, placements, nominal_us) -> np.ndarray:
    """float[B] median step time of each placement (int[B, n]) over members.

    `nominal_us` (float[B]) is member 0's step time, already simulated.
    """
    steps = self.ensemble(index).step_times(placements, nominal_us=nominal_us)
    return np.median(steps, axis=0)

  def reference_us(self, index: int, reference: rewards_lib.Reference) -> float:
    """The reference's median (the bound itself when it has no placement)."""
    if self._references[index] is None:
      if reference.placement is None:
        value = reference.step_time_us
      else:
        value = float(self.medians(index, reference.placement[None],
                                   [reference.step_time_us])[0])
      self._references[index] = value
    return self._references[index]

  def rewards(self, index: int, placements, nominal_us, valid,
              reference: rewards_lib.Reference):
    """(float32[B] rewards, float[B] medians) of B simulated placements."""
    medians = self.medians(index, placements, nominal_us)
    return (rewards_lib.placement_reward(medians, valid,
                                     self.reference_us(index, reference)),
            medians)

  def best_reward(self, index: int, best: rewards_lib.Best,
                  reference: rewards_lib.Reference) -> float:
    """The reward of the task's best placement, by its median."""
    return float(rewards_lib.placement_reward(
        [self.median_of(index, best)], [True],
        self.reference_us(index, reference))[0])

  def remember(self, index: int, best: rewards_lib.Best,
               median_us: float) -> None:
    """Records the median of the task's new best placement."""
    self._best[index] = (best, float(median_us))

  def median_of(self, index: int, best: rewards_lib.Best) -> float:
    """The median of a task's best placement (simulated if not remembered,
    e.g. a best restored from a checkpoint)."""
    known, value = self._best[index]
    if known is not best:
      value = float(self.medians(index, np.asarray(best.placement)[None],
                                 [best.step_time_us])[0])
      self.remember(index, best, value)
    return value
