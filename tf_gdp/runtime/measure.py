"""Real step times of a placed graph, measured with the TF runtime.

The simulator is a model; this is the judge. `measure` writes a placement
into the flat graph's device fields (`rewrite.apply_placement`, which rejects
illegal placements), runs the step in a TF1 `Session` on a target and times
it: `warmup` unmeasured steps, then the median wall-clock time of `repeats`
calls of `session.run(fetches)` (`placed_session`). `run_placed` is the
same preparation around any other use of the placed step (e.g. traced steps
that read the allocator's statistics, `allocator_stats`).

Targets (opened by `targets`):
  * "local": this process. Attached GPUs when there are any, otherwise CPU
    devices `/job:localhost/replica:0/task:0/device:CPU:i`. The session asks
    for as many CPU devices as the placement names (`device_count`), so this
    works even after TensorFlow has initialized; logical CPU devices made
    with `tf.config.set_logical_device_configuration` are a separate, eager-
    side mechanism that must run before TF initializes and is not needed
    here. All local CPU devices share this process's thread pools, so they
    do not give real parallelism: use cpu-workers:K for that.
  * "cpu-workers:K", or a running `workers.CpuWorkerCluster`: K single-core
    worker processes over loopback gRPC (devices
    `/job:worker/replica:0/task:i/device:CPU:0`). Given as a string, the
    cluster is started and stopped around the one measurement (~5 s); pass a
    started cluster to measure many placements.
  * "grpc://host:port": any TF cluster the caller runs; the placement's
    device strings name its jobs and tasks (checked against the devices the
    master lists).

What runs is the graph that was placed (made self-contained by
`grappler_bridge.runnable`): captured variables of a tf.function become
in-graph variables (VarHandleOp, initialized once from the captured
values, so the caller's variables are untouched), arguments are fed
(`example_args`, else ones), the fetches are `ExtractedGraph.fetches` run as
targets (no output is copied back to the client; fed arguments do travel
client -> master -> their device every step, which the simulator does not
model, so benchmark graphs keep their inputs in variables), soft placement
is off, and by default Grappler's rewrites (layout, constant folding,
remapping, ...) are off too (`graph_rewrites=False`), so the runtime neither
moves nor fuses ops behind the placement's back (docs/BENCHMARKS.md compares
step times with the rewrites on and off: within 3% on the benchmark graphs).

Measuring runs the graph's ops, and a graph from a file is someone's code:
one with ops that reach outside the step (file writes and reads, Python
callbacks, network ops; `grappler_bridge.side_effects`) is refused with
`InputError` before anything runs, unless `allow_side_effects=True`.

Every runtime failure (an OOM, a failed kernel, a timeout, a dead worker, a
device the target does not have, an illegal placement) comes back as
`Measurement(valid=False, reason=...)`; only malformed arguments raise
`InputError`.
"""

import dataclasses
import math
import statistics
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
from grappler_bridge import profiling  # pylint: disable=g-import-not-at-top
from grappler_bridge import rewrite  # pylint: disable=g-import-not-at-top
from grappler_bridge import side_effects  # pylint: disable=g-import-not-at-top
from tf_gdp import errors  # pylint: disable=g-import-not-at-top
from tf_gdp.cost import topology as topology_lib  # pylint: disable=g-import-not-at-top
from tf_gdp.runtime import placed_session  # pylint: disable=g-import-not-at-top
from tf_gdp.runtime import targets  # pylint: disable=g-import-not-at-top

# Measurement retries after a cpu-workers process died mid-run.
DEFAULT_RETRIES = 2


@dataclasses.dataclass(frozen=True)
class Measurement:
  """The measured step time of one placement on one target.

  Attributes:
    step_time_us: median of the timed steps (NaN when invalid).
    times_us: every timed step, in order.
    valid: the placement ran; False for an illegal placement, an OOM, a
      failed kernel, a timeout or an unreachable device.
    reason: why it is invalid (one line), else None.
    target: the target it ran on (e.g. "cpu-workers:2", "local").
    attempts: runs it took (more than 1 after a worker died and was
      restarted).
  """
  step_time_us: float
  times_us: tuple = ()
  valid: bool = True
  reason: Optional[str] = None
  target: str = ""
  attempts: int = 1


def invalid(reason: str, target: str = "", attempts: int = 1) -> Measurement:
  return Measurement(step_time_us=math.nan, valid=False, reason=reason,
                     target=target, attempts=attempts)


def measure(extracted: extract.ExtractedGraph,
            placement,
            target,
            *,
            topology: Optional[Any] = None,
            example_args: Sequence[Any] = (),
            warmup: int = 2,
            repeats: int = 5,
            timeout_s: float = placed_session.DEFAULT_TIMEOUT_S,
            graph_rewrites: bool = False,
            retries: int = DEFAULT_RETRIES,
            allow_side_effects: bool = False) -> Measurement:
  """Runs the placed step on `target` and times it.

  Args:
    extracted: the flat graph (`extract.from_function`, ...).
    placement: node name -> TF device string (nodes left out keep their
      device field, and TF's placer picks for those left empty), or an int
      array with one device index into `topology.devices` per node of
      `extracted.graph_def`, in graph order (= the OpGraph's node order).
    target: "local", "cpu-workers:K", "grpc://host:port" or a started
      `workers.CpuWorkerCluster`.
    topology: a Topology or a preset name; required for an int placement.
    example_args: the function's flattened arguments (fed every step);
      placeholders without a value get ones (unknown dimensions -> 1).
    warmup: unmeasured steps first (the first builds the executors).
    repeats: timed steps; the result is their median.
    timeout_s: limit of each step (and of session setup); a step that takes
      longer makes the measurement invalid. TF cancels the step then; a
      kernel that ignores cancellation is abandoned shortly after (its
      session is closed once it returns; cpu-workers are restarted).
    graph_rewrites: leave Grappler's rewrites on (default off: what runs is
      what was placed).
    retries: on a cpu-workers target, how many times a run that failed
      because a worker died is repeated after restarting the dead workers.
    allow_side_effects: run the graph even if it has ops that reach outside
      the step (files, Python callbacks, network).

  Returns:
    A Measurement; runtime failures give valid=False with a reason.

  Raises:
    InputError: malformed arguments (a placement of the wrong length, an
      unknown target, non-positive repeats...), or a graph with ops that
      reach outside the step without `allow_side_effects`.
  """
  check_counts(warmup, repeats, timeout_s)
  outcome = run_placed(
      extracted, placement, target,
      lambda runner, opened: runner.steps(warmup, repeats),
      topology=topology, example_args=example_args, timeout_s=timeout_s,
      graph_rewrites=graph_rewrites, retries=retries,
      allow_side_effects=allow_side_effects)
  if outcome.reason is not None:
    return invalid(outcome.reason, outcome.target, outcome.attempts)
  times = outcome.value
  return Measurement(step_time_us=float(statistics.median(times)),
                     times_us=tuple(times), valid=True, target=outcome.target,
                     attempts=outcome.attempts)


@dataclasses.dataclass(frozen=True)
class PlacedRun:
  """What `run_placed` gives back.

  Attributes:
    value: what the body returned (None when it did not run to the end).
    reason: why it did not (one line), else None.
    target: the target's label.
    attempts: runs it took (more than 1 after a worker died).
  """
  value: Any = None
  reason: Optional[str] = None
  target: str = ""
  attempts: int = 1


def run_placed(extracted: extract.ExtractedGraph,
               placement,
               target,
               body: Callable[[placed_session.Runner, targets.OpenTarget],
                              Any],
               *,
               topology: Optional[Any] = None,
               example_args: Sequence[Any] = (),
               timeout_s: float = placed_session.DEFAULT_TIMEOUT_S,
               graph_rewrites: bool = False,
               retries: int = DEFAULT_RETRIES,
               allow_side_effects: bool = False,
               worker_env: Optional[Mapping[str, str]] = None) -> PlacedRun:
  """Calls `body(runner, opened)` with the placed step loaded on `target`.

  What `measure` does around its timing, for any body (timed steps, traced
  steps): the placement is written into the graph, the target opened, the
  session prepared (`placed_session`); a run that failed because a worker
  died is repeated up to `retries` times. Arguments are `measure`'s, and
  `worker_env` is the environment of the workers of a "cpu-workers:K"
  target (`targets.opened`).

  Returns:
    A PlacedRun: the body's value, or the reason it could not run (an
    illegal placement, an OOM, a failed kernel, a timeout, a dead worker).

  Raises:
    InputError: as for `measure`.
  """
  _check_timeout(timeout_s)
  if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
    raise errors.InputError(f"retries must be an integer >= 0, got {retries!r}")
  if not isinstance(extracted, extract.ExtractedGraph):
    raise errors.InputError(
        f"measure needs an ExtractedGraph, got {type(extracted).__name__}")
  side_effects.check(extracted.graph_def,
                     allow_side_effects=allow_side_effects)
  devices = _placement_dict(extracted, placement, topology)
  feeds = _arg_feeds(extracted, example_args)
  label = targets.target_label(target)
  try:
    placed = rewrite.apply_placement(extracted.graph_def, devices)
  except errors.PlacementError as e:
    return PlacedRun(reason=f"illegal placement: {e}", target=label)
  try:
    with targets.opened(target, worker_env=worker_env) as opened:
      return _runs(extracted, placed, feeds, opened, body,
                   timeout_s=timeout_s, graph_rewrites=graph_rewrites,
                   retries=retries)
  except targets.TargetUnavailable as e:
    return PlacedRun(reason=str(e), target=label)


def _runs(extracted, placed, feeds, opened: targets.OpenTarget, body, *,
          timeout_s: float, graph_rewrites: bool, retries: int) -> PlacedRun:
  """Runs the body on the placed step, retrying after a worker died."""
  label = opened.label
  attempts = 0
  while True:
    attempts += 1
    worker_error = False
    try:
      with placed_session.placed_session(extracted, placed, feeds, opened,
                                         timeout_s, graph_rewrites) as run:
        value = body(run, opened)
      break
    except placed_session.WorkerLost as e:
      reason, worker_error = str(e), True
    except placed_session.Hung as e:
      targets.free_hung_workers(opened)
      return PlacedRun(reason=str(e), target=label, attempts=attempts)
    except placed_session.Invalid as e:
      reason = str(e)
    except (tf.errors.OpError, ValueError, TypeError, RuntimeError) as e:
      reason = placed_session.describe_error(e)
      worker_error = isinstance(e, (tf.errors.UnavailableError,
                                    tf.errors.AbortedError))
    if attempts > retries or not targets.restart_dead_workers(opened,
                                                              worker_error):
      return PlacedRun(reason=reason, target=label, attempts=attempts)
  return PlacedRun(value=value, target=label, attempts=attempts)


@dataclasses.dataclass(frozen=True)
class OpProfile:
  """A graph's ops timed on one device.

  Attributes:
    op_times_us: node name -> median traced time (us), for the nodes the
      runtime reported.
    step_time_us: median wall-clock time of the same step untraced, on the
      same device: more than the ops' sum by the executor's own work
      between ops and the step's fixed cost.
  """
  op_times_us: Dict[str, float]
  step_time_us: float


def profile_op_times(extracted: extract.ExtractedGraph, target,
                     **kwargs) -> Dict[str, float]:
  """Per-op times (us) of the whole graph on one device (`profile`'s)."""
  return profile(extracted, target, **kwargs).op_times_us


def profile(extracted: extract.ExtractedGraph,
            target,
            *,
            device: Optional[str] = None,
            example_args: Sequence[Any] = (),
            warmup: int = 2,
            repeats: int = 5,
            timeout_s: float = placed_session.DEFAULT_TIMEOUT_S,
            allow_side_effects: bool = False) -> OpProfile:
  """Per-op times (us) of the whole graph run on one device of `target`.

  The same runtime `measure` uses (so on cpu-workers the ops run on a
  pinned single-thread worker), traced with FULL_TRACE: per node the time
  from its start to the end of its outputs, summed over executions in the
  step, median over `repeats` steps. The result can replace the roofline
  costs (`costs.op_graph_document(profile=...)`).

  Args:
    extracted: the flat graph.
    target: as for `measure`.
    device: where every node runs (default: the target's first device),
      but for ops the graph pins elsewhere.
    example_args: as for `measure`.
    warmup: untraced steps first.
    repeats: traced steps.
    timeout_s: limit of each step.
    allow_side_effects: as for `measure`.

  Returns:
    An `OpProfile`: per node the median microseconds (nodes the runtime
    reported), and the untraced step's median time (`repeats` more steps).

  Raises:
    InputError: malformed arguments, or ops that reach outside the step
      without `allow_side_effects`.
    RuntimeError: the graph did not run (the reason is in the message).
  """
  check_counts(warmup, repeats, timeout_s)
  side_effects.check(extracted.graph_def,
                     allow_side_effects=allow_side_effects)
  feeds = _arg_feeds(extracted, example_args)
  try:
    with targets.opened(target) as opened:
      device = device or opened.default_device
      # An op the graph pins elsewhere stays there (its time is its
      # device's), and so do the ops colocated with it; a pin to a device
      # the target lacks fails the run below.
      captures = extracted.resource_captures
      group_pins = rewrite.group_pins(extracted.graph_def)
      placed = rewrite.apply_placement(
          extracted.graph_def,
          {node.name: group_pins.get(node.name, device)
           for node in extracted.graph_def.node
           if not node.device or node.name in captures})
      try:
        with placed_session.placed_session(extracted, placed, feeds, opened,
                                           timeout_s, False) as run:
          samples = run.steps(warmup, repeats, traced=True)
          untraced = run.steps(0, repeats)
      except placed_session.Hung as e:
        targets.free_hung_workers(opened)
        raise RuntimeError(f"cannot profile: {e}") from e
      except placed_session.Invalid as e:
        raise RuntimeError(f"cannot profile: {e}") from e
      except (tf.errors.OpError, ValueError) as e:
        raise RuntimeError(
            f"cannot profile: {placed_session.describe_error(e)}") from e
  except targets.TargetUnavailable as e:
    raise RuntimeError(f"cannot profile: {e}") from e
  return OpProfile(
      op_times_us=profiling.median_times(
          samples, {node.name for node in extracted.graph_def.node}),
      step_time_us=float(statistics.median(untraced)))


# ---- arguments ---------------------------------------------------------------


def check_counts(warmup, repeats, timeout_s) -> None:
  """InputError unless warmup >= 0, repeats >= 1 and timeout_s > 0."""
  if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
    raise errors.InputError(f"warmup must be an integer >= 0, got {warmup!r}")
  if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
    raise errors.InputError(f"repeats must be an integer >= 1, got {repeats!r}")
  _check_timeout(timeout_s)


def _check_timeout(timeout_s) -> None:
  if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
    raise errors.InputError(f"timeout_s must be > 0, got {timeout_s!r}")


def _placement_dict(extracted, placement, topology) -> Dict[str, str]:
  """Node name -> device string, from a dict or an int array + topology."""
  if isinstance(placement, Mapping):
    bad = [k for k, v in placement.items()
           if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
      raise errors.InputError(
          f"a placement dict maps op names to device strings; bad entry for "
          f"{bad[0]!r}")
    return dict(placement)
  if topology is None:
    raise errors.InputError(
        "an int placement needs a topology (device index -> device name)")
  if isinstance(topology, str):
    topology = topology_lib.get(topology)
  array = np.asarray(placement)
  nodes = extracted.graph_def.node
  if array.ndim != 1 or array.shape[0] != len(nodes) or not (
      np.issubdtype(array.dtype, np.integer)):
    raise errors.InputError(
        f"an int placement needs one device index per node ({len(nodes)}), "
        f"got shape {array.shape} of {array.dtype}")
  if array.size and (array.min() < 0 or array.max() >= topology.num_devices):
    raise errors.InputError(
        f"placement device indices must be in [0, {topology.num_devices})")
  names = topology.device_names
  return {node.name: names[int(d)] for node, d in zip(nodes, array)}


def _arg_feeds(extracted, example_args) -> Dict[str, np.ndarray]:
  """Argument placeholder name -> value to feed."""
  flat = tf.nest.flatten(list(example_args)) if example_args else []
  if flat and len(flat) != len(extracted.arg_names):
    raise errors.InputError(
        f"example_args flatten to {len(flat)} values but the graph has "
        f"{len(extracted.arg_names)} arguments")
  feeds = {}
  for name, value in zip(extracted.arg_names, flat):
    feeds[name] = np.asarray(value)
  return feeds
