"""The `gdp` method: the learned policy's placement, zero-shot or fine-tuned.

Zero-shot is one forward pass of the policy: the greedy placement plus a
handful of samples, each repaired to fit memory, judged by the simulator.
With a budget the policy is then fitted to the zero-shot placement
(`rl.anchor`) and fine-tuned on this graph (PPO on the executed, repaired
placements), the better of the two is kept, and the last share of the
budget polishes it with local moves (`rl.polish`).
"""

import math
import os
import time
from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import ensemble

# The policy that ships with the package (`make pretrain` reproduces it).
PRETRAINED_POLICY = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 "pretrained", "policy")


def check_policy(policy: Optional[str] = None) -> str:
  """The policy directory `gdp` would use (None: the shipped one), checked.

  Raises InputError when it is missing or not a loadable saved policy, so
  that a batch fails once, before its first graph, not once per graph.
  """
  policy_path = policy or PRETRAINED_POLICY
  _CHECKED.clear()
  _CHECKED[policy_path] = _load(policy_path)  # config and weights fit
  return policy_path


# The policy `check_policy` loaded, handed to the next `place` with the
# same path (once: fine-tuning trains the policy it is given, so every other
# graph loads its own).
_CHECKED = {}


def _load(policy_path: str):
  """The saved policy at `policy_path`; InputError if there is none."""
  from tf_gdp.rl import policy_io  # pylint: disable=g-import-not-at-top
  if not os.path.isdir(policy_path):
    raise errors.InputError(
        f"no policy at {policy_path}: pass a saved policy directory, or run "
        "`make pretrain` to build the shipped one")
  return policy_io.load_policy(policy_path)


def place(graph, topology, *, budget_seconds=0.0, budget_evaluations=None,
          policy=None, samples=16, seed=0, extracted=None, log=None,
          robust_members=0):
  """(placement, seconds, evaluations, details) from the learned policy.

  With a budget (seconds, evaluations, or both: the first reached ends it)
  the zero-shot placement is fine-tuned on this graph. With
  `robust_members`, fine-tuning's objective is the median step time
  over that many perturbed cost models, and so is the choice between the
  zero-shot and the fine-tuned placement.
  """
  # Zero-shot needs no tf-agents; fine-tuning imports it when it runs.
  from tf_gdp.rl import placement_task  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import zero_shot  # pylint: disable=g-import-not-at-top
  started = time.perf_counter()
  policy_path = policy or PRETRAINED_POLICY
  loaded = _CHECKED.pop(policy_path, None) or _load(policy_path)
  task = placement_task.PlacementTask(graph, topology, extracted=extracted,
                                      name=graph.name)
  shot = zero_shot.zeroshot(loaded, task, samples=samples, seed=seed)
  placement = shot.placement
  details = {"mode": "zero-shot", "policy": policy_path,
             "zero_shot_step_time_us": shot.step_time_us,
             "zero_shot_chosen": shot.chosen,
             "greedy_step_time_us": shot.greedy_step_time_us,
             "zero_shot_seconds": shot.seconds,
             # Of the 1 + samples placements, how many the repair changed.
             "zero_shot_repaired": shot.repaired}
  evaluations = shot.evaluations
  # A valid placement that takes no time (a step of constants) is the best
  # there is: fine-tuning would only spend the budget.
  free = shot.valid and shot.step_time_us <= 0
  if free:
    details.update(finetune_skipped="the zero-shot placement takes no time")
  if (budget_seconds > 0 or budget_evaluations) and not free:
    # pylint: disable=g-import-not-at-top
    import tensorflow as tf
    from tf_gdp.rl import polish
    from tf_gdp.rl import train_config
    from tf_gdp.rl import workflows
    # pylint: enable=g-import-not-at-top
    # The robust objective's fine-tuning is PPO alone: the polish judges by
    # the nominal model.
    share = 0.0 if robust_members else polish.POLISH_SHARE
    config = train_config.TrainConfig(
        graphs_per_iteration=1, samples_per_graph=max(samples, 2), seed=seed,
        log_every_seconds=30.0, checkpoint_every_seconds=1e9,
        robust_objective=robust_members > 0,
        robust_members=robust_members or ensemble.DEFAULT_MEMBERS)
    # The critic and PPO draw from TF's global generator: seeded, the same
    # seed fine-tunes the same way (and `auto` equals its parts).
    tf.keras.utils.set_random_seed(seed)
    tuned = workflows.finetune(
        policy_path, task, budget=train_config.Budget(
            seconds=polish.ppo_share(budget_seconds or None, share),
            evaluations=polish.ppo_share(budget_evaluations or None, share),
            patience=polish.patience(None) if share else None),
        config=config, log=log or (lambda line: None),
        anchor=((shot.placement, shot.step_time_us) if shot.valid else None))
    best = tuned.best[task.name]
    evaluations += tuned.evaluations
    details.update(mode="fine-tune", finetune_iterations=tuned.iterations,
                   finetune_evaluations=tuned.evaluations,
                   finetune_seconds=tuned.seconds,
                   finetune_step_time_us=(best.step_time_us if best else None))
    tuned_us, shot_us = (best.step_time_us if best else None,
                         shot.step_time_us)
    if best is not None and robust_members:
      details.update(finetune_objective="ensemble_median")
      objective = ensemble.Ensemble(graph, topology, members=robust_members,
                                    seed=ensemble.OBJECTIVE_SEED)
      tuned_us, shot_us = np.median(objective.step_times(
          np.stack([best.placement, shot.placement])), axis=0)
    chosen_us = shot.step_time_us if shot.valid else math.inf
    if best is not None and (tuned_us < shot_us or not shot.valid):
      placement, chosen_us = best.placement, best.step_time_us
    if share and math.isfinite(chosen_us):
      climbed = polish.polish(
          graph, topology, placement, chosen_us, seed=seed,
          evaluations=(max(budget_evaluations - tuned.evaluations, 0)
                       if budget_evaluations else None),
          seconds=(max(budget_seconds - tuned.seconds, 0.0)
                   if budget_seconds else None))
      evaluations += climbed.evaluations
      details.update(polish_evaluations=climbed.evaluations,
                     polish_step_time_us=climbed.step_time_us)
      placement = climbed.placement
  return (np.asarray(placement, np.int32), time.perf_counter() - started,
          evaluations, details)
