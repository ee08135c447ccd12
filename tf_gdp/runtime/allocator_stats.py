"""TensorFlow's own count of the memory a placed step holds, per device.

The simulator predicts each device's peak memory (`cost.simulator`, "Memory
per device"); this reads what TensorFlow's allocators report while the
placed step really runs, so that the two can be compared
(`bench.memory_check`).

How: the step runs with FULL_TRACE (`measure.run_placed`, the preparation
timing uses). For every op that allocated, the step stats hold, per
allocator, the allocator's bytes in use when the op finished
(`allocator_bytes_in_use`, taken while the op's inputs are still held) and
the op's own allocations (their peak and what is still live, from TF's
tracking allocator). So while the op ran, at most
`in_use_at_end - own_live + own_peak` bytes were in use, its temporaries
included. A device's peak is the largest of these over the step's ops, and
over `repeats` traced steps. Between steps a tiny op on each device, in a
session of its own, gives the floor: bytes in use that no op of the step
allocated (variables, constants the kernels hold, buffers kernels keep from
step to step).

Which allocator counts what (TF 2.21 on CPU):
* TF_CPU_ALLOCATOR_USE_BFC=1 (`COUNTING_ENV`) makes TF's CPU allocator a
  BFC allocator ("bfc_cpu_allocator_for_gpu", as on a GPU) that counts every
  allocation as the chunk it got: rounded up to 256 bytes, and a chunk that
  is not worth splitting is given whole (up to twice the request). Its free
  pool space (fragmentation) is not counted. `measure_memory` starts the
  workers of a "cpu-workers:K" target with it; a started cluster or "local"
  keeps the allocator its TensorFlow started with.
* With oneDNN on (`grappler_bridge.tf_env`'s default) and no such variable,
  the CPU allocator is oneDNN's "mklcpu", whose statistics count only
  requests of 256 KiB and more (its BFC pool): `DeviceMemory.complete` is
  False and smaller tensors are missing from the numbers.
* TF's plain CPU allocator (oneDNN off) keeps no statistics: the
  measurement is invalid and says so.

What the numbers are, and are not:
* Bytes the allocator holds for tensors, not the process's resident
  memory: memory that kernels get around the allocator (library scratch
  space, gRPC buffers) is not in them.
* Per process: the CPU devices of one process share one allocator. On
  `cpu-workers:K` each device is a process of its own; on "local" every CPU
  device reports the same process-wide number (`DeviceMemory.shared`), and
  the floor includes the process's own tensors (such as the eager variables
  a graph was traced from).
* Sampled at op ends: where one op runs at a time (a cpu-workers worker has
  one inter-op thread) this is the allocator's own peak (the tests check it
  on a single-threaded session against `get_memory_info`); with several
  inter-op threads an overlap between ops can be missed or counted twice.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import config_pb2  # pylint: disable=g-import-not-at-top

from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
from tf_gdp.runtime import placed_session  # pylint: disable=g-import-not-at-top
from tf_gdp.runtime import targets  # pylint: disable=g-import-not-at-top

_PROBE_PREFIX = "tf_gdp_memory_probe"
# Environment of workers whose CPU allocator counts every allocation.
COUNTING_ENV = {"TF_CPU_ALLOCATOR_USE_BFC": "1"}
# Allocators whose statistics leave allocations out.
_PARTIAL = frozenset({"mklcpu"})


class NoStatistics(ValueError):
  """An allocator that served the step keeps no statistics."""


@dataclasses.dataclass(frozen=True)
class StepPeak:
  """One device in one traced step.

  Attributes:
    allocator: the allocator the peak is of (the largest, if the device used
      several, e.g. a GPU's own and its host's).
    peak_bytes: the largest bytes in use while one of the device's ops ran.
    ops: op executions on the device that reported allocations.
  """
  allocator: str
  peak_bytes: int
  ops: int


@dataclasses.dataclass(frozen=True)
class DeviceMemory:
  """What TF's allocator reported for one device of a placed step.

  Attributes:
    device: the TF device string.
    allocator: the allocator's name (e.g. "mklcpu").
    peak_bytes: the largest bytes in use while an op of the step ran on the
      device, over the traced steps.
    floor_bytes: bytes in use between steps (variables, kernels' constants
      and buffers kept from step to step); `peak_bytes - floor_bytes` is what
      the step itself allocated at its peak.
    step_peak_bytes: the peak of each traced step, in order.
    ops: op executions on the device that reported allocations (last step).
    shared: the allocator also serves other devices of the placement (CPU
      devices of one process), so the numbers are the process's.
    complete: the allocator's statistics count every allocation (False for
      oneDNN's "mklcpu", which counts only requests of 256 KiB and more).
  """
  device: str
  allocator: str
  peak_bytes: int
  floor_bytes: int
  step_peak_bytes: tuple
  ops: int
  shared: bool = False
  complete: bool = True


@dataclasses.dataclass(frozen=True)
class MemoryMeasurement:
  """Peak memory per device of one placement on one target.

  Attributes:
    devices: device string -> DeviceMemory, for the devices whose ops
      allocated memory.
    valid: the step ran and its allocators kept statistics.
    reason: why not (one line), else None.
    target: the target's label.
    attempts: runs it took (more than 1 after a worker died).
  """
  devices: Dict[str, DeviceMemory]
  valid: bool = True
  reason: Optional[str] = None
  target: str = ""
  attempts: int = 1


def step_peaks(step_stats) -> Dict[str, StepPeak]:
  """Per device, the largest bytes in use while one of its ops ran.

  Args:
    step_stats: a `StepStats` proto (`RunMetadata.step_stats` of a step run
      with FULL_TRACE).

  Returns:
    Device string -> StepPeak, for every device with an op that allocated.

  Raises:
    NoStatistics: a device's ops allocated, but none of its allocators
      reported bytes in use.
  """
  peaks = {}  # (device, allocator) -> [peak bytes, ops]
  unreported = {}  # device -> an allocator without statistics
  for device_stats in step_stats.dev_stats:
    device = device_stats.device
    for node in device_stats.node_stats:
      for used in node.memory:
        if used.allocator_bytes_in_use <= 0:
          if used.total_bytes > 0:
            unreported.setdefault(device, used.allocator_name)
          continue
        during = (used.allocator_bytes_in_use - used.live_bytes +
                  used.peak_bytes)
        entry = peaks.setdefault((device, used.allocator_name), [0, 0])
        entry[0] = max(entry[0], during)
        entry[1] += 1
  result = {}
  for (device, allocator), (peak, ops) in sorted(peaks.items()):
    if device not in result or peak > result[device].peak_bytes:
      result[device] = StepPeak(allocator, int(peak), int(ops))
  missing = sorted(set(unreported) - set(result))
  if missing:
    raise NoStatistics(
        f"allocator {unreported[missing[0]]!r} of {missing[0]} keeps no "
        "statistics (TF's plain CPU allocator: set TF_ENABLE_ONEDNN_OPTS=1 "
        "or TF_CPU_ALLOCATOR_USE_BFC=1 before TensorFlow starts)")
  return result


def measure_memory(extracted,
                   placement,
                   target,
                   *,
                   topology: Optional[Any] = None,
                   example_args: Sequence[Any] = (),
                   warmup: int = 1,
                   repeats: int = 2,
                   timeout_s: float = placed_session.DEFAULT_TIMEOUT_S,
                   graph_rewrites: bool = False,
                   retries: int = measure.DEFAULT_RETRIES,
                   allow_side_effects: bool = False) -> MemoryMeasurement:
  """Runs the placed step on `target` and reads its allocators' peaks.

  Arguments are `measure.measure`'s; `warmup` untraced steps first (the
  first step allocates what later steps reuse), then `repeats` traced ones.
  A "cpu-workers:K" target is started with `COUNTING_ENV`.

  Returns:
    A MemoryMeasurement; runtime failures (and allocators without
    statistics) give valid=False with a reason.

  Raises:
    InputError: malformed arguments, as for `measure.measure`.
  """
  measure.check_counts(warmup, repeats, timeout_s)

  def body(runner: placed_session.Runner, opened: targets.OpenTarget):
    runner.steps(warmup, 0)
    try:
      steps = [step_peaks(runner.traced_metadata().step_stats)
               for _ in range(repeats)]
    except NoStatistics as e:
      raise placed_session.Invalid(str(e)) from e
    devices = sorted(set().union(*steps))
    return steps, _floors(opened, devices, timeout_s, runner)

  outcome = measure.run_placed(
      extracted, placement, target, body, topology=topology,
      example_args=example_args, timeout_s=timeout_s,
      graph_rewrites=graph_rewrites, retries=retries,
      allow_side_effects=allow_side_effects, worker_env=COUNTING_ENV)
  if outcome.reason is not None:
    return MemoryMeasurement({}, valid=False, reason=outcome.reason,
                             target=outcome.target, attempts=outcome.attempts)
  steps, floors = outcome.value
  return MemoryMeasurement(_device_memory(steps, floors),
                           target=outcome.target, attempts=outcome.attempts)


def _device_memory(steps: List[Dict[str, StepPeak]],
                   floors: Dict[str, int]) -> Dict[str, DeviceMemory]:
  """Per device: the peak over traced steps, with its floor."""
  last = steps[-1]
  owners = {}  # (process, allocator) -> devices
  for device, peak in last.items():
    owners.setdefault((_process(device), peak.allocator), []).append(device)
  result = {}
  for device in sorted(set().union(*steps)):
    seen = [step[device] for step in steps if device in step]
    allocator = seen[-1].allocator
    result[device] = DeviceMemory(
        device=device, allocator=allocator,
        peak_bytes=max(s.peak_bytes for s in seen),
        floor_bytes=int(floors.get(device, 0)),
        step_peak_bytes=tuple(s.peak_bytes for s in seen),
        ops=seen[-1].ops,
        shared=len(owners.get((_process(device), allocator), ())) > 1,
        complete=allocator not in _PARTIAL)
  return result


def _process(device: str) -> str:
  """The job/replica/task part of a device string (one process)."""
  return device.rpartition("/device:")[0]


def _floors(opened: targets.OpenTarget, devices: Sequence[str],
            timeout_s: float, runner: placed_session.Runner
           ) -> Dict[str, int]:
  """Bytes in use on each device between steps, read by a tiny probe op.

  The probe runs in a session of its own on the same target; allocators
  are per process, so it sees what the placed step's session holds.
  """
  if not devices:
    return {}
  names = {}
  with tf.Graph().as_default() as graph:
    for i, device in enumerate(devices):
      with tf.device(device):
        probe = tf.raw_ops.Fill(dims=[1], value=0.0,
                                name=f"{_PROBE_PREFIX}_{i}")
      names[probe.op.name] = device
  config = placed_session.session_config(
      timeout_s=timeout_s,
      cpu_devices=(placed_session.local_cpu_count(devices)
                   if opened.local else None))
  session = tf.compat.v1.Session(opened.master, graph=graph, config=config)
  options = config_pb2.RunOptions(
      trace_level=config_pb2.RunOptions.FULL_TRACE,
      timeout_in_ms=max(1, int(timeout_s * 1000)))
  metadata = config_pb2.RunMetadata()
  fetches = [graph.get_operation_by_name(name) for name in names]
  # A Hung probe leaves its session open: closing would wait for the call.
  placed_session.call_with_deadline(
      lambda: session.run(fetches, options=options, run_metadata=metadata),
      runner.deadline_s, "the memory probe", runner.watch)
  session.close()
  floors = {}
  for device_stats in metadata.step_stats.dev_stats:
    for node in device_stats.node_stats:
      device = names.get(node.node_name)
      for used in node.memory if device else ():
        if used.allocator_bytes_in_use > 0:
          floors[device] = max(floors.get(device, 0),
                               used.allocator_bytes_in_use - used.live_bytes)
  return floors
