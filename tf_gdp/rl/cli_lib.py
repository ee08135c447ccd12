"""What the `pretrain` and `finetune` commands share (flag values in, no flags).

Each command module defines its own absl flags (only the chosen command's
module is imported); this turns their values into library objects.
"""

import math
import sys
from typing import Optional

from tf_gdp import errors
from tf_gdp.cost import topology as topology_lib
from tf_gdp.rl import ppo
from tf_gdp.rl import train_lib


def budget(*, seconds: Optional[float], evaluations: Optional[int],
           iterations: Optional[int]) -> train_lib.Budget:
  if seconds is None and evaluations is None and iterations is None:
    raise errors.InputError(
        "give a budget: --budget_seconds, --budget_evaluations and/or "
        "--budget_iterations")
  return train_lib.Budget(evaluations=evaluations, seconds=seconds,
                          iterations=iterations)


def train_config(*, samples: int, graphs_per_iteration: int,
                 learning_rate: float, epochs: int, entropy: float,
                 ratio: str, seed: int, log_every_seconds: float,
                 checkpoint_every_seconds: float) -> train_lib.TrainConfig:
  return train_lib.TrainConfig(
      samples_per_graph=samples, graphs_per_iteration=graphs_per_iteration,
      seed=seed, log_every_seconds=log_every_seconds,
      checkpoint_every_seconds=checkpoint_every_seconds,
      ppo=ppo.PpoConfig(learning_rate=learning_rate, num_epochs=epochs,
                        entropy_regularization=entropy, ratio=ratio))


def env_options(*, backend: str, measure: Optional[str],
                measure_repeats: int, devices) -> dict:
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
          "measure_repeats": measure_repeats}


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


def print_result(result: train_lib.TrainResult) -> None:
  """One line per task: best step time against the reference."""
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
