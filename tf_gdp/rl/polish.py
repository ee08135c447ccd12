"""Fine-tuning's last stretch: local moves from the policy's best placement.

PPO moves the policy's whole distribution: it finds the right family of
placement (which stages go where, what stays whole) but converges slowly on
the last few groups, where one sampled change among hundreds of groups is
rare. Local moves are the opposite. So a fine-tuning budget is split: the
first share goes to PPO, the last `POLISH_SHARE` to `local_search.climb`
from the best placement zero-shot and PPO found (its moves and annealing,
cooling over the polish's own evaluations). With a seconds budget the polish
is a pure hill climb (no evaluation count to cool over). PPO hands over
early when it stops finding better placements (`PPO_PATIENCE`), and the
polish gets what PPO left.
"""

from typing import Optional

import numpy as np

from tf_gdp.baselines import local_search

# The share of a fine-tuning budget spent on local moves after PPO.
POLISH_SHARE = 0.5
# PPO hands over to the polish early when its best placement has not improved
# (`train_config.PATIENCE_GAIN`) in this many evaluations; None: never.
PPO_PATIENCE = None


def patience(value: Optional[int]) -> Optional[int]:
  """PPO's patience in evaluations: `value`, None for the default, 0 for off."""
  if value is None:
    return PPO_PATIENCE
  return int(value) or None


def ppo_share(total: Optional[float], share: float = POLISH_SHARE):
  """The part of `total` (evaluations or seconds) PPO gets; None for None."""
  if total is None:
    return None
  if isinstance(total, (int, np.integer)):
    return max(1, int(round(total * (1.0 - share))))
  return float(total) * (1.0 - share)


def polish(graph, topology, placement: np.ndarray, step_time_us: float, *,
           evaluations: Optional[int] = None,
           seconds: Optional[float] = None,
           seed: int = 0) -> local_search.Climb:
  """`local_search.climb` from `placement` within what is left of the budget.

  `evaluations` and `seconds` are what fine-tuning has left after PPO
  (None: no limit of that kind; one of them must be given).
  """
  if evaluations is None and seconds is None:
    raise ValueError("the polish needs evaluations or seconds")
  if evaluations is not None:
    return local_search.climb(graph, topology, placement, step_time_us,
                              evaluations=int(evaluations), seed=seed,
                              seconds=seconds)
  return local_search.climb(graph, topology, placement, step_time_us,
                            evaluations=np.iinfo(np.int64).max, seed=seed,
                            seconds=seconds or 0.0, temperature=0.0)
