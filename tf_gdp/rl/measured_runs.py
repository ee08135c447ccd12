"""The environment's real runs: measured placements, cached and confirmed.

Measurements are cached per (task, placement): PPO resamples converged
placements, and a placement is only worth its first measurement. A
placement about to become a task's best is measured `confirm` more times
and judged by the median of all its runs, because the minimum over hundreds
of noisy measurements is a lucky one. A "cpu-workers:K" target starts its
worker cluster on the first measurement and keeps it until `close`.
"""

import dataclasses
import time
from typing import Any, Sequence

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.cost import topology as topology_lib


class MeasuredRuns:
  """Measures placements of the environment's tasks on one target."""

  def __init__(self, tasks: Sequence[Any], target, *, repeats: int,
               warmup: int, confirm: int, allow_side_effects: bool):
    if confirm < 0:
      raise errors.InputError("measure_confirm must be >= 0")
    self._tasks = list(tasks)
    self._target_spec = target
    self._repeats = int(repeats)
    self._warmup = int(warmup)
    self._confirm = int(confirm)
    self._allow_side_effects = bool(allow_side_effects)
    self._cache = [{} for _ in self._tasks]
    self._confirmed = [set() for _ in self._tasks]
    self._cluster = None
    self.measurements = 0
    self.confirmations = 0  # repeated measurements of would-be bests
    self.seconds = 0.0

  def confirm(self, index: int, placement: np.ndarray):
    """Measures a would-be best again; the median of all its runs (cached)."""
    key = common.placement_key(placement)
    cache = self._cache[index]
    first = self.measure(index, placement)
    if key in self._confirmed[index] or not first.valid:
      return cache[key]
    self._confirmed[index].add(key)
    runs = [first] + [self._run(index, placement)
                      for _ in range(self._confirm)]
    self.confirmations += self._confirm
    valid = [r for r in runs if r.valid]
    if len(valid) < len(runs):
      combined = next(r for r in runs if not r.valid)
    else:
      combined = dataclasses.replace(
          first, step_time_us=float(np.median([r.step_time_us for r in runs])),
          times_us=tuple(t for r in runs for t in r.times_us))
    cache[key] = combined
    return combined

  def measure(self, index: int, placement: np.ndarray):
    """Measures one placement (cached per task)."""
    key = common.placement_key(placement)
    cache = self._cache[index]
    if key in cache:
      return cache[key]
    result = self._run(index, placement)
    self.measurements += 1
    cache[key] = result
    return result

  def _run(self, index: int, placement: np.ndarray):
    """One uncached measurement on the target."""
    from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
    task = self._tasks[index]
    started = time.perf_counter()
    result = measure.measure(task.extracted, placement, self._target(),
                             topology=task.topology, repeats=self._repeats,
                             warmup=self._warmup,
                             allow_side_effects=self._allow_side_effects)
    self.seconds += time.perf_counter() - started
    return result

  def _target(self):
    """The measure target; a cpu-workers:K string starts a cluster once."""
    target = self._target_spec
    if isinstance(target, str) and target.startswith(
        topology_lib.CPU_WORKERS + ":"):
      if self._cluster is None:
        from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
        count = target.partition(":")[2]
        if not count.isdigit() or int(count) < 1:
          raise errors.InputError(f"{target!r}: use cpu-workers:K")
        self._cluster = workers.CpuWorkerCluster(int(count))
        self._cluster.start()
      return self._cluster
    return target

  def close(self) -> None:
    if self._cluster is not None:
      self._cluster.stop()
      self._cluster = None
