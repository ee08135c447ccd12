"""Where a measurement runs: opening a target and keeping its workers alive.

A target is "local" (this process), "cpu-workers:K" (a cluster started for
one measurement), a started `workers.CpuWorkerCluster` (many measurements),
or "grpc://host:port" (a TF cluster the caller runs); see `measure` for what
each gives. A cluster's workers can die or hang under a measurement: the
helpers here notice a dead worker and restart the ones that died or hold a
stuck step. This module imports no TensorFlow.
"""

import contextlib
import dataclasses
import time
from typing import Iterator, Mapping, Optional

from tf_gdp import errors
from tf_gdp.cost import topology as topology_lib
from tf_gdp.runtime import workers

LOCAL = "local"
# How long a dead worker may take to show as exited (a SIGKILLed TF server
# has dozens of threads to tear down first).
_DEATH_WAIT_S = 5.0


class TargetUnavailable(Exception):
  """The target cannot be used (its workers do not start or are dead)."""


@dataclasses.dataclass
class OpenTarget:
  """A usable target: the session's master and, for a cluster, its workers."""
  master: str  # session target ("" = this process)
  label: str
  cluster: Optional[workers.CpuWorkerCluster] = None
  local: bool = False

  @property
  def default_device(self) -> str:
    if self.cluster is not None:
      return self.cluster.device_names[0]
    if self.local:
      return "/job:localhost/replica:0/task:0/device:CPU:0"
    return f"/job:{workers.JOB}/replica:0/task:0/device:CPU:0"


def target_label(target) -> str:
  """A short text naming a target (for reports)."""
  if isinstance(target, workers.CpuWorkerCluster):
    return f"{topology_lib.CPU_WORKERS}:{target.num_workers}"
  if isinstance(target, str):
    return target
  raise errors.InputError(
      f"target must be 'local', 'cpu-workers:K', 'grpc://host:port' or a "
      f"CpuWorkerCluster, got {type(target).__name__}")


@contextlib.contextmanager
def opened(target, *, worker_env: Optional[Mapping[str, str]] = None
          ) -> Iterator[OpenTarget]:
  """Yields the OpenTarget of `target`; a cpu-workers:K cluster lives as long.

  `worker_env`: environment variables for the workers of a cluster started
  here (a "cpu-workers:K" target).

  Raises:
    TargetUnavailable: the workers cannot be started or are dead (its
      message is the reason, one line).
    InputError: `target` names no target.
  """
  label = target_label(target)
  if isinstance(target, workers.CpuWorkerCluster):
    try:
      target.ensure_alive()
    except workers.WorkerError as e:
      raise TargetUnavailable(f"worker unavailable: {e}") from e
    yield OpenTarget(target.target, label, cluster=target)
    return
  if target == LOCAL:
    yield OpenTarget("", label, local=True)
    return
  if target.startswith("grpc://"):
    if not target[len("grpc://"):]:
      raise errors.InputError("grpc target needs host:port")
    yield OpenTarget(target, label)
    return
  name, _, count = target.partition(":")
  if name == topology_lib.CPU_WORKERS:
    if not count.isdigit() or not 1 <= int(count) <= 64:
      raise errors.InputError(
          f"{target!r}: use cpu-workers:K with 1 <= K <= 64")
    try:
      cluster = workers.CpuWorkerCluster(int(count), env=worker_env)
      cluster.start()
    except workers.WorkerError as e:
      raise TargetUnavailable(f"cannot start workers: {e}") from e
    try:
      yield OpenTarget(cluster.target, label, cluster=cluster)
    finally:
      cluster.stop()
    return
  raise errors.InputError(
      f"unknown target {target!r} (local, cpu-workers:K or grpc://host:port)")


def dead_worker(cluster: workers.CpuWorkerCluster) -> Optional[str]:
  """Which worker of `cluster` has exited, or None."""
  for task, alive in enumerate(cluster.alive()):
    if not alive:
      return f"worker {task} exited"
  return None


def restart_dead_workers(target: OpenTarget, worker_error: bool) -> bool:
  """Restarts workers that died during a run; whether a retry makes sense.

  `worker_error`: the run failed as if a worker died (then a worker that is
  still tearing down is waited for).
  """
  cluster = target.cluster
  if cluster is None:
    return False
  deadline = time.monotonic() + (_DEATH_WAIT_S if worker_error else 0.0)
  while all(cluster.alive()) and time.monotonic() < deadline:
    time.sleep(0.05)
  if all(cluster.alive()):
    return False
  try:
    cluster.ensure_alive()
  except workers.WorkerError:
    return False
  return True


def free_hung_workers(target: OpenTarget) -> None:
  """Restarts every worker of a cluster that holds a stuck step.

  Each worker has one inter-op thread, so a stuck kernel would block every
  later measurement; the restart also ends the abandoned RPC.
  """
  if target.cluster is not None:
    with contextlib.suppress(workers.WorkerError):
      target.cluster.restart()
