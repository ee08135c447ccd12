"""The reward of a placement, its reference, and the records of priced ones.

Step times are normalized by a reference placement of the same task, so
that graphs whose steps take microseconds and graphs whose steps take
seconds train together:

    reward = log(reference_us / step_time_us)          (valid placements)
    reward = min(0, log(reference_us / step_time_us)) - INVALID_PENALTY
                                                       (invalid ones)

0 means "as fast as the reference", +0.69 twice as fast. The reference is
the faster (valid) of `single_device` and `human_expert` (when the graph has
expert rules) from `tf_gdp.baselines`; when no single device holds the graph
it is the communication-free lower bound. An invalid placement (out of
memory; hard constraints cannot break, the policy masks them and groups are
placed whole) scores below the reference by INVALID_PENALTY, and never above
it, so running out of memory never pays.

`PlacementEnv.evaluate` (`environment`) returns an `Evaluation` per batch
and keeps each task's `Best` valid placement.
"""

import dataclasses
import logging
from typing import Optional, Sequence

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import lower_bound as lower_bound_lib
from tf_gdp.cost import simulator

INVALID_PENALTY = 3.0
REFERENCE_METHODS = ("single_device", "human_expert")
# The least reference step time, in us: rewards divide by it.
_LEAST_REFERENCE_US = 1e-3


@dataclasses.dataclass(frozen=True)
class Reference:
  """The placement rewards are normalized by.

  Attributes:
    method: "single_device", "human_expert" or "lower_bound".
    step_time_us: its simulated step time (the lower bound itself for
      "lower_bound").
    placement: int32[num_nodes], or None for the lower bound.
  """
  method: str
  step_time_us: float
  placement: Optional[np.ndarray]


@dataclasses.dataclass
class Best:
  """The best valid placement seen for one task.

  Attributes:
    group_devices: int32[num_groups] device per colocation group (the
      policy's action, unpadded).
    placement: int32[num_nodes] device per op (original node ids).
    step_time_us: its step time, by `source`.
    source: "simulate" or "measure".
    evaluation: the environment's evaluation count when it was found.
  """
  group_devices: np.ndarray
  placement: np.ndarray
  step_time_us: float
  source: str
  evaluation: int


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """What `PlacementEnv.evaluate` found for B placements of one task.

  Attributes:
    reward: float32[B].
    step_time_us: float64[B] as judged (measured where measured).
    simulated_us: float64[B] simulated step time (NaN under `measure`).
    measured: bool[B] whether the row was measured.
    valid: bool[B].
    placements: int32[B, num_nodes] device per op, as executed (repaired).
    group_devices: int32[B, num_groups] the executed action per group.
  """
  reward: np.ndarray
  step_time_us: np.ndarray
  simulated_us: np.ndarray
  measured: np.ndarray
  valid: np.ndarray
  placements: np.ndarray
  group_devices: np.ndarray


def placement_reward(step_time_us, valid, reference_us: float) -> np.ndarray:
  """float32 rewards of step times against the reference (module doc)."""
  step = np.asarray(step_time_us, np.float64)
  valid = np.asarray(valid, bool)
  with np.errstate(divide="ignore", invalid="ignore"):
    ratio = np.log(reference_us / np.maximum(step, 1e-9))
  ratio = np.where(np.isfinite(ratio), ratio, 0.0)
  reward = np.where(valid & np.isfinite(step), ratio,
                    np.minimum(ratio, 0.0) - INVALID_PENALTY)
  return reward.astype(np.float32)


def compute_reference(task, methods: Sequence[str] = REFERENCE_METHODS
                      ) -> Reference:
  """A PlacementTask's faster valid placement of `methods`, else its bound."""
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  best = None
  for method in methods:
    try:
      result = baselines.run(method, task.graph, task.topology)
    except errors.InputError as e:
      logging.debug("reference %s unavailable for %s: %s", method, task.name,
                   str(e).splitlines()[0] if str(e) else e)
      continue
    outcome = simulator.simulate(task.graph, result.placement, task.topology)
    step = outcome.step_time_us
    if outcome.valid and (best is None or step < best.step_time_us):
      # A step of free ops (constants only) takes no time: rewards need a
      # positive reference.
      best = Reference(method, max(step, _LEAST_REFERENCE_US),
                       np.asarray(result.placement, np.int32))
  if best is not None:
    return best
  bound = lower_bound_lib.lower_bound(task.graph, task.topology)
  return Reference("lower_bound", max(float(bound), _LEAST_REFERENCE_US), None)
