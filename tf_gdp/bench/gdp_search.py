"""GDP as the benchmarks run it: zero-shot, then fine-tuning under a budget.

The placement is the better of the zero-shot one (the greedy placement and
the samples of one forward pass of the pre-trained policy) and the best one
fine-tuning found: always the policy's own, never a baseline's. Its
best-so-far curve has one point per zero-shot evaluation (greedy first, then
the samples, so that a search cost counts the evaluation that first got
there) and one per fine-tuning iteration.

Fine-tuning runs for seconds or for simulator evaluations. Each iteration
prices its samples and the greedy placement together, so an evaluation
budget stops after the last whole iteration that fits in it: the count never
passes the budget, and a budget below one iteration means no fine-tuning.
Fine-tuning's reward is normalised by a reference placement
(`rl.rewards.compute_reference`); a caller that charges the simulations
which chose it passes their number as `reference_evaluations`, and they
count between the zero-shot and the fine-tuning evaluations.
"""

import dataclasses
import math
import time
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from tf_gdp import errors
from tf_gdp.rl import anchor as anchor_lib
from tf_gdp.rl import placement_task
from tf_gdp.rl import polish as polish_lib
from tf_gdp.rl import train_config
from tf_gdp.rl import workflows
from tf_gdp.rl import zero_shot


@dataclasses.dataclass
class GdpRun:
  """What zero-shot plus fine-tuning found on one graph.

  Attributes:
    placement: int32[num_nodes] the better of zero-shot and fine-tuning.
    step_time_us: its simulated step time (inf if nothing was valid).
    chosen: "zeroshot" or "finetuned".
    shot: the zero-shot result.
    curve: [[evaluations, best step time us (inf until a valid one)]].
    zeroshot_evaluations: greedy + samples, and the simulations of the
      repair of any that did not fit memory.
    reference_evaluations: as passed (0 when fine-tuning did not run).
    finetune_evaluations: fine-tuning's own evaluations.
    finetune_iterations: its iterations.
    finetune_seconds: its wall-clock time (the trainer's clock).
  """
  placement: np.ndarray
  step_time_us: float
  chosen: str
  shot: zero_shot.ZeroShotResult
  curve: list
  zeroshot_evaluations: int
  reference_evaluations: int = 0
  finetune_evaluations: int = 0
  finetune_iterations: int = 0
  finetune_seconds: float = 0.0

  @property
  def evaluations(self) -> int:
    return (self.zeroshot_evaluations + self.reference_evaluations +
            self.finetune_evaluations)


def train_settings(samples: int, seed: int) -> train_config.TrainConfig:
  """Fine-tuning's settings: one graph, `samples` placements an iteration."""
  return train_config.TrainConfig(
      graphs_per_iteration=1, samples_per_graph=samples, seed=seed,
      log_every_seconds=60.0, checkpoint_every_seconds=1e9)


def iteration_evaluations(config: train_config.TrainConfig) -> int:
  """Evaluations one single-graph iteration makes: samples (+ greedy)."""
  return config.samples_per_graph + int(config.evaluate_greedy)


def finetune_budget(config: train_config.TrainConfig, *,
                    seconds: Optional[float] = None,
                    evaluations: Optional[int] = None,
                    patience: Optional[int] = None
                    ) -> Optional[train_config.Budget]:
  """The fine-tuning budget, or None for none (module doc).

  Raises:
    InputError: both seconds and evaluations, or a negative one.
  """
  if seconds is not None and evaluations is not None:
    raise errors.InputError(
        "fine-tune for seconds or for evaluations, not both (got "
        f"{seconds} s and {evaluations} evaluations)")
  if (seconds or 0) < 0 or (evaluations or 0) < 0:
    raise errors.InputError("fine-tuning budgets must be >= 0")
  if evaluations is not None:
    iterations = int(evaluations) // iteration_evaluations(config)
    return train_config.Budget(
        evaluations=int(evaluations), iterations=iterations,
        patience=patience) if iterations else None
  return train_config.Budget(seconds=float(seconds),
                             patience=patience) if seconds else None


def shot_curve(shot: zero_shot.ZeroShotResult) -> list:
  """Best-so-far points of the zero-shot evaluations, greedy first."""
  curve = []
  for count, value in enumerate(shot.valid_step_times_us, start=1):
    value = float(value)
    curve.append([count, min(value, curve[-1][1]) if curve else value])
  return curve


def run(policy: str, task: placement_task.PlacementTask, *, samples: int,
        seed: int, finetune_seconds: Optional[float] = None,
        finetune_evaluations: Optional[int] = None,
        reference_evaluations: int = 0,
        shot: Optional[zero_shot.ZeroShotResult] = None,
        polish_share: Optional[float] = None,
        ppo_patience: Optional[int] = None,
        anchor_epochs: Optional[int] = None,
        log: Callable[[str], None] = lambda line: None) -> GdpRun:
  """Zero-shot (or the given `shot`), then fine-tuning (module doc).

  `polish_share` and `ppo_patience` (0: none) default to `rl.polish`'s,
  `anchor_epochs` (0: no anchor) to `rl.anchor`'s.
  """
  config = train_settings(samples, seed)
  if polish_share is None:
    polish_share = polish_lib.POLISH_SHARE
  budget = finetune_budget(
      config, seconds=polish_lib.ppo_share(finetune_seconds, polish_share),
      evaluations=polish_lib.ppo_share(finetune_evaluations, polish_share),
      patience=polish_lib.patience(ppo_patience) if polish_share else None)
  if shot is None:
    shot = zero_shot.zeroshot(policy, task, samples=samples, seed=seed)
  curve = shot_curve(shot)
  if shot.evaluations > len(curve):  # the repair's simulations count too
    curve.append([shot.evaluations, curve[-1][1]])
  found = GdpRun(placement=shot.placement, step_time_us=curve[-1][1],
                 chosen="zeroshot", shot=shot, curve=curve,
                 zeroshot_evaluations=max(shot.evaluations, len(curve)))
  if budget is None:
    return found
  # The critic and PPO draw from TF's global generator: seeded, a run is
  # reproducible.
  tf.keras.utils.set_random_seed(seed)
  tuned = workflows.finetune(
      policy, task, budget=budget, config=config,
      log=lambda line: log(f"  {task.name}: {line}"),
      anchor=((shot.placement, shot.step_time_us) if shot.valid else None),
      anchor_epochs=(anchor_lib.EPOCHS if anchor_epochs is None
                     else int(anchor_epochs)))
  offset = found.zeroshot_evaluations + reference_evaluations
  reference = tuned.references[task.name].step_time_us
  for stats in tuned.history:
    value = stats["best_ratio"] * reference
    point = [offset + stats["evaluations"],
             min(curve[-1][1], value if math.isfinite(value) else math.inf)]
    # An iteration that drew only placements priced before (an anchored
    # policy on a tiny graph) spent nothing: one point per count.
    if point[0] == curve[-1][0]:
      curve[-1] = point
    else:
      curve.append(point)
  best = tuned.best[task.name]
  if best is not None and best.step_time_us < found.step_time_us:
    found.placement, found.step_time_us = best.placement, best.step_time_us
    found.chosen = "finetuned"
  found.reference_evaluations = reference_evaluations
  found.finetune_evaluations = tuned.evaluations
  found.finetune_iterations = tuned.iterations
  found.finetune_seconds = tuned.seconds
  if math.isfinite(found.step_time_us) and polish_share > 0:
    _polish(found, task, seed=seed, seconds=finetune_seconds,
            evaluations=finetune_evaluations)
  return found


def _polish(found: GdpRun, task, *, seed: int, seconds: Optional[float],
            evaluations: Optional[int]) -> None:
  """Spends the rest of the budget on local moves from `found`'s best."""
  started = time.perf_counter()
  climbed = polish_lib.polish(
      task.graph, task.topology, found.placement, found.step_time_us,
      evaluations=(None if evaluations is None
                   else max(evaluations - found.finetune_evaluations, 0)),
      seconds=(None if seconds is None
               else max(seconds - found.finetune_seconds, 0.0)), seed=seed)
  offset = found.evaluations
  for count, value in climbed.curve[1:]:
    found.curve.append([offset + count, min(found.curve[-1][1], value)])
  if climbed.step_time_us < found.step_time_us:
    found.placement, found.step_time_us = (climbed.placement,
                                           climbed.step_time_us)
    found.chosen = "polished"
  found.finetune_evaluations += climbed.evaluations
  found.finetune_seconds += time.perf_counter() - started

