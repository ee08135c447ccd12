"""Fine-tuning starts at the placement zero-shot chose.

Zero-shot's best placement is often a push (a baseline's placement, a stage
pipeline), not the policy's own mode. Fine-tuning's PPO then samples the
policy's own region: on Transformer-XL 2 on four P100s its samples differed
from the zero-shot placement in half the colocation groups and were 1.8x
slower for all 1,000 of PPO's evaluations, and self-imitation did not close
the gap. So before PPO the policy is fitted to the zero-shot placement
(`imitation.imitate`, cross-entropy on each group's device; no simulator
evaluations), and its entropy floor is lowered: its samples are then the
zero-shot placement with a few groups changed, and PPO learns which
changes pay, a search that local moves make blind.
"""

import math
import time
from typing import Callable, Optional

import numpy as np

from tf_gdp.policy import features
from tf_gdp.rl import imitation
from tf_gdp.rl import search_targets

# Gradient steps of the fit (one graph each) and their Adam step size: on
# Transformer-XL 2 (2,071 groups), 150 steps at 3e-3 reach accuracy 1.000,
# 20 at 1e-3 only 0.63; on a generated graph of 2,000 cells 150 steps reach
# 0.72 and 400 steps 1.000 (1e-2 is no faster).
EPOCHS = 400
LEARNING_RATE = 3e-3
# With a budget in seconds the fit stops after this share of it, checked
# every `_CHUNK` steps: a 60,000-op graph takes seconds per step.
SECONDS_SHARE = 0.25
# Adam starts afresh every `_CHUNK` steps. Chosen on twelve training graphs
# (four P100s, 2,000 evaluations): at or below local search on 7 with the
# restarts, on 4 with one Adam run for the whole fit, which fits closer and
# leaves PPO a more confident policy.
_CHUNK = 50
# Below this many seconds for the fit there is none: tracing its step alone
# takes a few seconds, which a budget this small needs for PPO.
MIN_SECONDS = 5.0
# The entropy floor of an anchored policy, as a fraction of uniform: about
# one group in three hundred differs from the anchor per sample where the fit
# is exact. Chosen on twelve training graphs (four P100s, 2,000
# evaluations): at or below local search on 7 with 0.02, 5 with 0.05.
ENTROPY_FLOOR = 0.02


def fit(policy, env, placement: np.ndarray, step_time_us: float, *,
        epochs: int = EPOCHS, seconds: Optional[float] = None,
        log: Optional[Callable[[str], None]] = None) -> dict:
  """Fits `policy` to `placement` of `env`'s one task.

  Stops after `epochs` steps, or at the first `_CHUNK` boundary past
  `seconds` (None: no limit; under `MIN_SECONDS`: no step); Adam restarts
  at every boundary, in one traced step. Returns steps, accuracy, loss
  and seconds.
  """
  started = time.perf_counter()
  if seconds is not None and seconds < MIN_SECONDS:
    epochs = 0
  inputs = env.inputs(0)
  group_devices = features.node_to_group_placement(
      inputs, np.asarray(placement)).astype(np.int32)
  target = search_targets.Target(
      task=env.tasks[0].name, method="anchor", step_time_us=step_time_us,
      evaluations=0, group_devices=group_devices,
      placement=np.asarray(placement, np.int32), candidates={}, skipped={},
      reason=None, fastest_us=step_time_us)
  deadline = math.inf if seconds is None else started + seconds
  stats = imitation.imitate(
      policy, env, [target], config=imitation.ImitationConfig(
          epochs=epochs, learning_rate=LEARNING_RATE, graphs_per_step=1,
          greedy_check=False, restart_every=_CHUNK),
      stop=lambda: time.perf_counter() >= deadline) if epochs else {}
  steps = int(stats.get("epochs", 0))
  result = {"steps": steps, "accuracy": stats.get("accuracy", math.nan),
            "loss": stats.get("loss", math.nan),
            "seconds": time.perf_counter() - started}
  if log and steps:
    log(f"anchored on the zero-shot placement: {steps} steps, accuracy "
        f"{result['accuracy']:.3f}, {result['seconds']:.1f} s")
  return result
