"""What the `pretrain` and `finetune` commands share: flags and their meaning.

Only the chosen command's module is imported, so each calls
`define_training_flags(__name__)` once at import; the flags are listed under
that command's `--help`. `--allow_side_effects` is defined here for every
command that runs graphs (`measure` and `bench` too). The helpers below turn
flag values into library objects.
"""

import dataclasses
import math
import sys
from typing import Any, Optional

from tf_gdp import errors
from tf_gdp.cost import ensemble
from tf_gdp.cost import topology as topology_lib
from tf_gdp.rl import exploration
from tf_gdp.rl import train_config as train_config_lib
from tf_gdp.rl import train_result


def budget(*, seconds: Optional[float], evaluations: Optional[int],
           iterations: Optional[int]) -> train_config_lib.Budget:
  if seconds is None and evaluations is None and iterations is None:
    raise errors.InputError(
        "give a budget: --budget_seconds, --budget_evaluations and/or "
        "--budget_iterations")
  return train_config_lib.Budget(evaluations=evaluations, seconds=seconds,
                                 iterations=iterations)


def train_config(*, samples: int, graphs_per_iteration: int,
                 learning_rate: float, epochs: int, entropy: float,
                 ratio: str, seed: int, log_every_seconds: float,
                 checkpoint_every_seconds: float,
                 pipeline_exploration: float = (
                     exploration.PIPELINE_EXPLORATION),
                 refloor_after: int = exploration.REFLOOR_AFTER,
                 robust_objective: bool = False,
                 robust_members: int = ensemble.DEFAULT_MEMBERS
                 ) -> train_config_lib.TrainConfig:
  return train_config_lib.TrainConfig(
      samples_per_graph=samples, graphs_per_iteration=graphs_per_iteration,
      seed=seed, log_every_seconds=log_every_seconds,
      checkpoint_every_seconds=checkpoint_every_seconds,
      pipeline_exploration=pipeline_exploration, refloor_after=refloor_after,
      robust_objective=robust_objective, robust_members=robust_members,
      ppo=train_config_lib.PpoConfig(
          learning_rate=learning_rate, num_epochs=epochs,
          entropy_regularization=entropy, ratio=ratio))


def env_options(*, backend: str, measure: Optional[str],
                measure_repeats: int, devices,
                allow_side_effects: bool = False) -> dict:
  """PlacementEnv keyword arguments for the reward backend flags."""
  if backend == "simulate":
    if measure:
      raise errors.InputError("--measure needs --backend=measure or mix")
    return {"backend": "simulate"}
  if not measure:
    raise errors.InputError(
        f"--backend={backend} needs --measure (local, cpu-workers:K or "
        "grpc://host:port)")
  devices = [devices] if isinstance(devices, str) else list(devices)
  if measure.startswith(topology_lib.CPU_WORKERS) and measure not in devices:
    raise errors.InputError(
        f"--measure={measure} must also be the --devices the graph is placed "
        "on")
  return {"backend": backend, "measure_target": measure,
          "measure_repeats": measure_repeats,
          "allow_side_effects": allow_side_effects}


@dataclasses.dataclass(frozen=True)
class TrainingFlags:
  """Holders of the flags `pretrain` and `finetune` share."""
  budget_seconds: Any
  budget_evaluations: Any
  budget_iterations: Any
  samples: Any
  learning_rate: Any
  epochs: Any
  entropy: Any
  pipeline_exploration: Any
  refloor_after: Any
  ratio: Any
  backend: Any
  measure: Any
  measure_repeats: Any
  allow_side_effects: Any
  log_every: Any
  checkpoint_every: Any
  robust_objective: Any
  robust_members: Any

  def budget(self) -> train_config_lib.Budget:
    return budget(seconds=self.budget_seconds.value,
                  evaluations=self.budget_evaluations.value,
                  iterations=self.budget_iterations.value)

  def train_config(self, *, graphs_per_iteration: int,
                   seed: int) -> train_config_lib.TrainConfig:
    return train_config(
        samples=self.samples.value, graphs_per_iteration=graphs_per_iteration,
        learning_rate=self.learning_rate.value, epochs=self.epochs.value,
        entropy=self.entropy.value, ratio=self.ratio.value, seed=seed,
        log_every_seconds=self.log_every.value,
        checkpoint_every_seconds=self.checkpoint_every.value,
        pipeline_exploration=self.pipeline_exploration.value,
        refloor_after=self.refloor_after.value,
        robust_objective=self.robust_objective.value,
        robust_members=self.robust_members.value)

  def env_options(self, devices) -> dict:
    return env_options(backend=self.backend.value, measure=self.measure.value,
                       measure_repeats=self.measure_repeats.value,
                       devices=devices,
                       allow_side_effects=self.allow_side_effects.value)


def define_training_flags(module_name: str) -> TrainingFlags:
  """Defines the budget, PPO, reward-backend and logging flags."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  own = {"module_name": module_name}
  return TrainingFlags(
      budget_seconds=flags.DEFINE_float(
          "budget_seconds", None, "Stop after this much training time "
          "(resumes included).", lower_bound=0.001, **own),
      budget_evaluations=flags.DEFINE_integer(
          "budget_evaluations", None, "Stop after this many placement "
          "evaluations.", lower_bound=1, **own),
      budget_iterations=flags.DEFINE_integer(
          "budget_iterations", None, "Stop after this many PPO iterations "
          "(0: none, e.g. pre-training by imitation alone).",
          lower_bound=0, **own),
      samples=flags.DEFINE_integer(
          "samples", 16, "Placements sampled per graph per iteration.",
          lower_bound=2, **own),
      learning_rate=flags.DEFINE_float(
          "learning_rate", 1e-3, "Adam step size.", lower_bound=0.0, **own),
      epochs=flags.DEFINE_integer(
          "epochs", 4, "PPO epochs per iteration.", lower_bound=1, **own),
      entropy=flags.DEFINE_float(
          "entropy", 0.01, "Weight of the per-group entropy bonus.",
          lower_bound=0.0, **own),
      pipeline_exploration=flags.DEFINE_float(
          "pipeline_exploration", exploration.PIPELINE_EXPLORATION,
          "Standard deviation of the random pipeline gain of every other "
          "sampled placement: a push towards sending each stage of the "
          "graph's stack of numbered blocks (layer_0, layer_1, ...) to its "
          "own device (0: none).", lower_bound=0.0, **own),
      refloor_after=flags.DEFINE_integer(
          "refloor_after", exploration.REFLOOR_AFTER, "After this many "
          "iterations in a row whose samples were all one placement, make "
          "the policy explore again (one graph only; 0: never).",
          lower_bound=0, **own),
      ratio=flags.DEFINE_enum(
          "ratio", "per_group", list(train_config_lib.RATIOS),
          "PPO importance ratios per group or joint.", **own),
      backend=flags.DEFINE_enum(
          "backend", "simulate", ["simulate", "measure", "mix"],
          "Reward: the simulator, real runs (--measure), or simulate then "
          "measure the best candidates.", **own),
      measure=flags.DEFINE_string(
          "measure", None, "Where measured rewards run: local, "
          "cpu-workers:K or grpc://host:port.", **own),
      measure_repeats=flags.DEFINE_integer(
          "measure_repeats", 3, "Timed steps per measurement.",
          lower_bound=1, **own),
      allow_side_effects=define_allow_side_effects(module_name),
      log_every=flags.DEFINE_float(
          "log_every", 10.0, "Seconds between progress lines.",
          lower_bound=0.0, **own),
      checkpoint_every=flags.DEFINE_float(
          "checkpoint_every", 60.0, "Seconds between checkpoints (0: every "
          "iteration).", lower_bound=0.0, **own),
      robust_objective=define_robust_objective(**own),
      robust_members=flags.DEFINE_integer(
          "robust_members", ensemble.DEFAULT_MEMBERS, "With "
          "--robust_objective: perturbed cost models (the nominal one "
          "included) whose median step time is the reward.", lower_bound=1,
          **own))


def define_robust_objective(module_name: str):
  """The --robust_objective flag (training flags and `tf-gdp place`)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  return flags.DEFINE_bool(
      "robust_objective", False, "GDP fine-tuning (a budget in seconds) "
      "optimises the median step time over --robust_members perturbed cost "
      "models (op times, launch overhead, link speeds; tf_gdp.cost.ensemble) "
      "instead of the nominal cost model. Simulate backend only.",
      module_name=module_name)


def define_allow_side_effects(module_name: str):
  """`--allow_side_effects`, for a command that runs (profiles, measures) graphs."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  return flags.DEFINE_bool(
      "allow_side_effects", False, "Run graphs even if they have ops that "
      "reach outside the step (file writes and reads, py_function, network "
      "ops); without it such a graph is refused before anything runs.",
      module_name=module_name)


def quiet_tensorflow_logs() -> None:
  """TF's INFO lines (checkpoint sharding...) would bury the progress lines.

  absl logs at INFO by default; unless --verbosity was given, keep WARNING.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS["verbosity"].present:
    absl_logging.set_verbosity(absl_logging.WARNING)
  tf.get_logger().setLevel("WARNING")


def progress(line: str) -> None:
  sys.stderr.write(line + "\n")
  sys.stderr.flush()


def print_result(result: train_result.TrainResult) -> None:
  """One line per task: best step time against the reference."""
  if result.imitation:
    print(imitation_line(result.imitation))
  print(f"{result.iterations} iterations, {result.evaluations} evaluations, "
        f"{result.seconds:.0f} s")
  for name, best in result.best.items():
    reference = result.references[name]
    if best is None:
      print(f"  {name}: no valid placement found (reference "
            f"{reference.method} {reference.step_time_us / 1e3:.3f} ms)")
      continue
    reference_us = reference.step_time_us
    if best.source == "measure":
      reference_us = result.measured_references.get(name) or math.nan
    speedup = reference_us / best.step_time_us
    print(f"  {name}: best {best.step_time_us / 1e3:.3f} ms ({best.source}d), "
          f"{reference.method} {reference_us / 1e3:.3f} ms ({best.source}d)"
          + (f", speedup {speedup:.3f}x" if math.isfinite(speedup) else ""))


def imitation_line(stats: dict) -> str:
  """The imitation phase in one line (`imitation.imitate`'s statistics)."""
  def number(key, digits):
    value = stats.get(key)
    return "-" if value is None or not math.isfinite(value) else (
        f"{value:.{digits}f}")
  return (f"imitation: {stats.get('epochs', 0)} epochs over "
          f"{stats.get('tasks', 0)} tasks, loss {number('loss', 4)}, "
          f"accuracy {number('accuracy', 3)}, greedy / target "
          f"{number('greedy_ratio', 3)} (geomean)")
