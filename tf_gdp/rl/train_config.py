"""Settings of a training run: what to train with, and when to stop.

PPO's hyper-parameters (`PpoConfig`) are here too, apart from the agent
(`ppo`), so that reading settings does not import tf-agents.

Budgets count simulator (or measurement) evaluations, wall-clock seconds and
iterations; training stops at the first one reached. They are totals over
the run: a resumed run continues until the same totals.
"""

import dataclasses
from typing import Optional

from tf_gdp import errors
from tf_gdp.cost import ensemble
from tf_gdp.rl import exploration

# Weight of the self-imitation row's advantage in single-graph runs
# (`TrainConfig.self_imitation`); 0: off.
SELF_IMITATION = 1.0
# How PPO's importance ratios are taken (`PpoConfig.ratio`, `ppo` module doc).
RATIOS = ("per_group", "joint")


@dataclasses.dataclass
class PpoConfig:
  """PPO hyper-parameters.

  Attributes:
    learning_rate: Adam step size.
    num_epochs: passes over each iteration's batch (`agent.train` calls).
    importance_ratio_clipping: PPO's epsilon.
    ratio: "per_group" or "joint" importance ratios (`ppo` module doc).
    entropy_regularization: weight of the per-group mean entropy bonus.
    value_pred_loss_coef: weight of the critic's loss.
    gradient_clipping: global-norm clip of the gradients (0 = off).
  """
  learning_rate: float = 1e-3
  num_epochs: int = 4
  importance_ratio_clipping: float = 0.2
  ratio: str = "per_group"
  entropy_regularization: float = 0.01
  value_pred_loss_coef: float = 0.5
  gradient_clipping: float = 1.0

  def __post_init__(self):
    if self.ratio not in RATIOS:
      raise errors.InputError(
          f"ratio must be one of {', '.join(RATIOS)}, got {self.ratio!r}")
    if self.learning_rate <= 0 or self.num_epochs < 1:
      raise errors.InputError("learning_rate must be > 0 and num_epochs >= 1")


# The relative gain of the best placement that resets a budget's patience.
PATIENCE_GAIN = 1e-3


@dataclasses.dataclass
class Budget:
  """When to stop: the first limit reached (None = no limit).

  `patience` stops a single-graph run early: when its best placement has not
  improved by `PATIENCE_GAIN` within that many evaluations, the rest of the
  budget is better spent elsewhere (fine-tuning's polish, `rl.polish`).
  """
  evaluations: Optional[int] = None
  seconds: Optional[float] = None
  iterations: Optional[int] = None
  patience: Optional[int] = None

  def __post_init__(self):
    if self.evaluations is None and self.seconds is None and (
        self.iterations is None):
      raise errors.InputError(
          "a training budget needs evaluations, seconds or iterations")
    for name in ("evaluations", "seconds"):
      value = getattr(self, name)
      if value is not None and value <= 0:
        raise errors.InputError(f"budget {name} must be > 0, got {value}")
    # 0 iterations is a run without PPO: pre-training by imitation alone.
    if self.iterations is not None and self.iterations < 0:
      raise errors.InputError(
          f"budget iterations must be >= 0, got {self.iterations}")
    if self.patience is not None and self.patience < 1:
      raise errors.InputError(
          f"budget patience must be >= 1 evaluation, got {self.patience}")

  def exhausted(self, evaluations: int, seconds: float,
                iterations: int) -> bool:
    return ((self.evaluations is not None and evaluations >= self.evaluations)
            or (self.seconds is not None and seconds >= self.seconds) or
            (self.iterations is not None and iterations >= self.iterations))

  def remaining_seconds(self, evaluations: int, seconds: float,
                        iterations: int, rate: dict) -> Optional[float]:
    """Estimated seconds left, from this session's rates; None if unknown."""
    estimates = []
    if self.seconds is not None:
      estimates.append(self.seconds - seconds)
    if self.evaluations is not None and rate.get("evaluations"):
      estimates.append((self.evaluations - evaluations) / rate["evaluations"])
    if self.iterations is not None and rate.get("iterations"):
      estimates.append((self.iterations - iterations) / rate["iterations"])
    return max(min(estimates), 0.0) if estimates else None


@dataclasses.dataclass
class TrainConfig:
  """Training loop settings (PPO's own in `PpoConfig`).

  Attributes:
    samples_per_graph: placements sampled per graph per iteration (B).
    graphs_per_iteration: graphs per iteration (all if fewer).
    evaluate_greedy: also price the greedy placement each iteration (for
      the best placement; not trained on).
    baseline: "sample_mean" (per-graph mean of the B rewards) or "value"
      (the critic's prediction).
    advantage_scale_floor: advantages are divided by max(std of the
      graph's rewards, this). Rewards are log step-time ratios, so 0.01 is a
      1% difference: once a policy has nearly converged, samples that differ
      by less are not blown up to unit advantages (which made PPO leave a
      found optimum again in tests).
    ppo: PPO hyper-parameters.
    checkpoint_every_seconds: wall-clock time between checkpoints.
    checkpoint_every_iterations: iterations between checkpoints (0 = only
      by time and at the end).
    max_checkpoints: checkpoints kept.
    log_every_seconds: time between progress lines.
    seed: seeds sampling and task draws.
    pipeline_exploration: standard deviation of the random pipeline gain
      of every other sampled placement (`exploration.PIPELINE_EXPLORATION`);
      0: none, each group is sampled independently from the policy's logits.
    pipeline_patience: in single-graph runs, stop the pipeline pushes after
      this many iterations in a row in which no pushed sample beat every
      unpushed one (`exploration.PIPELINE_PATIENCE`); 0 = never stop.
    refloor_after: after this many iterations in a row in which all samples
      were one placement (no advantage, so PPO cannot move), lower the
      policy's logit scale to the entropy floor again, as fine-tuning does
      at its start. Measured rewards collapse a policy this way within
      seconds and it then re-measures cached placements for the rest of the
      budget. Single-graph runs only; 0 = never.
    self_imitation: weight of the advantage of the best placement so far,
      trained on once per iteration as an extra sample
      (`Trainer._imitation_experience`). Single-graph runs only; 0 = off.
    robust_objective: reward (and choose the best placement by) the median
      step time over `robust_members` perturbed cost models
      (`tf_gdp.rl.robust_objective`) instead of the nominal one; simulate
      backend only.
    robust_members: members of that ensemble, the nominal model included.
  """
  samples_per_graph: int = 16
  graphs_per_iteration: int = 4
  pipeline_exploration: float = exploration.PIPELINE_EXPLORATION
  pipeline_patience: int = exploration.PIPELINE_PATIENCE
  refloor_after: int = exploration.REFLOOR_AFTER
  self_imitation: float = SELF_IMITATION
  evaluate_greedy: bool = True
  baseline: str = "sample_mean"
  advantage_scale_floor: float = 0.01
  ppo: PpoConfig = dataclasses.field(default_factory=PpoConfig)
  checkpoint_every_seconds: float = 60.0
  checkpoint_every_iterations: int = 0
  max_checkpoints: int = 3
  log_every_seconds: float = 10.0
  seed: int = 0
  robust_objective: bool = False
  robust_members: int = ensemble.DEFAULT_MEMBERS

  def __post_init__(self):
    if self.samples_per_graph < 2:
      raise errors.InputError("samples_per_graph must be >= 2 (advantages "
                              "compare a graph's samples)")
    if self.graphs_per_iteration < 1:
      raise errors.InputError("graphs_per_iteration must be >= 1")
    if self.refloor_after < 0:
      raise errors.InputError("refloor_after must be >= 0")
    if self.pipeline_patience < 0:
      raise errors.InputError("pipeline_patience must be >= 0")
    if self.self_imitation < 0:
      raise errors.InputError("self_imitation must be >= 0")
    if self.pipeline_exploration < 0:
      raise errors.InputError("pipeline_exploration must be >= 0")
    if self.robust_members < 1:
      raise errors.InputError("robust_members must be >= 1")
    if self.baseline not in ("sample_mean", "value"):
      raise errors.InputError(
          f"baseline must be sample_mean or value, got {self.baseline!r}")

  def environment_options(self) -> dict:
    """The `PlacementEnv` arguments these settings imply ({} by default)."""
    return {"robust_members": self.robust_members} if (
        self.robust_objective) else {}
