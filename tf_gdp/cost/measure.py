"""Real step times of a placed graph, measured with the TF runtime.

The simulator is a model; this is the judge. `measure` writes a placement
into the flat graph's device fields (`rewrite.apply_placement`, which rejects
illegal placements), runs the step in a TF1 `Session` on a target and times
it: `warmup` unmeasured steps, then the median wall-clock time of `repeats`
calls of `session.run(fetches)`.

Targets:
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

What runs is the graph that was placed: captured variables of a tf.function
become in-graph variables (VarHandleOp, initialized once from the captured
values, so the caller's variables are untouched), arguments are fed
(`example_args`, else ones), the fetches are `ExtractedGraph.fetches` run as
targets (no output is copied back to the client; fed arguments do travel
client -> master -> their device every step, which the simulator does not
model, so benchmark graphs keep their inputs in variables), soft placement
is off, and by default Grappler's rewrites (layout, constant folding,
remapping, ...) are off too (`graph_rewrites=False`), so the runtime neither
moves nor fuses ops behind the placement's back (docs/BENCHMARKS.md compares
step times with the rewrites on and off: within 3% on the benchmark graphs).

Every runtime failure (an OOM, a failed kernel, a timeout, a dead worker, a
device the target does not have, an illegal placement) comes back as
`Measurement(valid=False, reason=...)`; only malformed arguments raise
`InputError`.
"""

import contextlib
import dataclasses
import math
import statistics
import threading
import time
import uuid
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional,
                    Sequence)

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import config_pb2  # pylint: disable=g-import-not-at-top

from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top
from grappler_bridge import profiling  # pylint: disable=g-import-not-at-top
from grappler_bridge import rewrite  # pylint: disable=g-import-not-at-top
from tf_gdp import errors  # pylint: disable=g-import-not-at-top
from tf_gdp.cost import topology as topology_lib  # pylint: disable=g-import-not-at-top
from tf_gdp.cost import workers  # pylint: disable=g-import-not-at-top

LOCAL = "local"
DEFAULT_TIMEOUT_S = 120.0
# Initial value range of in-graph variables nobody gave a value for (a bare
# GraphDef's VarHandleOps): small, so repeated training steps stay finite.
_UNKNOWN_INIT_SCALE = 0.05
_VARIABLE_PREFIX = "tf_gdp_measure"
_GENERIC_ERROR_LINES = frozenset({"Graph execution error:"})
# Lines of a TF error that are context, not the error: where the op was
# defined, node markers, hints.
_CONTEXT_PREFIXES = ("[[", "Detected at node", 'File "', "Hint:", "[Op:",
                     "Node:")
# Measurement retries after a cpu-workers process died mid-run.
DEFAULT_RETRIES = 2
# How long a dead worker may take to show as exited (a SIGKILLed TF server
# has dozens of threads to tear down first).
_DEATH_WAIT_S = 5.0
# How often a waiting session call checks that the cluster's workers live.
_WATCH_PERIOD_S = 0.1


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
            timeout_s: float = DEFAULT_TIMEOUT_S,
            graph_rewrites: bool = False,
            retries: int = DEFAULT_RETRIES) -> Measurement:
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

  Returns:
    A Measurement; runtime failures give valid=False with a reason.

  Raises:
    InputError: malformed arguments (a placement of the wrong length, an
      unknown target, non-positive repeats...).
  """
  _check_counts(warmup, repeats, timeout_s)
  if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
    raise errors.InputError(f"retries must be an integer >= 0, got {retries!r}")
  if not isinstance(extracted, extract.ExtractedGraph):
    raise errors.InputError(
        f"measure needs an ExtractedGraph, got {type(extracted).__name__}")
  devices = _placement_dict(extracted, placement, topology)
  feeds = _arg_feeds(extracted, example_args)
  label = target_label(target)
  try:
    placed = rewrite.apply_placement(extracted.graph_def, devices)
  except errors.PlacementError as e:
    return invalid(f"illegal placement: {e}", label)
  with _opened_target(target) as opened:
    if isinstance(opened, Measurement):
      return opened
    attempts = 0
    while True:
      attempts += 1
      worker_error = False
      try:
        with _placed_session(extracted, placed, feeds, opened, timeout_s,
                             graph_rewrites) as run:
          for _ in range(warmup):
            run.step()
          times = [run.step() for _ in range(repeats)]
        break
      except _WorkerLost as e:
        reason, worker_error = str(e), True
      except _Hung as e:
        _free_hung_workers(opened)
        return invalid(str(e), label, attempts)
      except _Invalid as e:
        reason = str(e)
      except (tf.errors.OpError, ValueError, TypeError, RuntimeError) as e:
        reason = describe_error(e)
        worker_error = isinstance(e, (tf.errors.UnavailableError,
                                      tf.errors.AbortedError))
      if attempts > retries or not _restart_dead_workers(opened, worker_error):
        return invalid(reason, label, attempts)
  return Measurement(step_time_us=float(statistics.median(times)),
                     times_us=tuple(times), valid=True, target=label,
                     attempts=attempts)


def profile_op_times(extracted: extract.ExtractedGraph,
                     target,
                     *,
                     device: Optional[str] = None,
                     example_args: Sequence[Any] = (),
                     warmup: int = 2,
                     repeats: int = 5,
                     timeout_s: float = DEFAULT_TIMEOUT_S) -> Dict[str, float]:
  """Per-op times (us) of the whole graph run on one device of `target`.

  The same runtime `measure` uses (so on cpu-workers the ops run on a
  pinned single-thread worker), traced with FULL_TRACE: per node the time
  from its start to the end of its outputs, summed over executions in the
  step, median over `repeats` steps. The result can replace the roofline
  costs (`costs.op_graph_document(profile=...)`).

  Args:
    extracted: the flat graph.
    target: as for `measure`.
    device: where every node runs (default: the target's first device).
    example_args: as for `measure`.
    warmup: untraced steps first.
    repeats: traced steps.
    timeout_s: limit of each step.

  Returns:
    Node name -> median microseconds, for the nodes the runtime reported.

  Raises:
    InputError: malformed arguments.
    RuntimeError: the graph did not run (the reason is in the message).
  """
  _check_counts(warmup, repeats, timeout_s)
  feeds = _arg_feeds(extracted, example_args)
  with _opened_target(target) as opened:
    if isinstance(opened, Measurement):
      raise RuntimeError(f"cannot profile: {opened.reason}")
    device = device or opened.default_device
    placed = rewrite.apply_placement(
        extracted.graph_def,
        {node.name: device for node in extracted.graph_def.node})
    try:
      with _placed_session(extracted, placed, feeds, opened, timeout_s,
                           False) as run:
        for _ in range(warmup):
          run.step()
        samples = [run.traced_step() for _ in range(repeats)]
    except _Hung as e:
      _free_hung_workers(opened)
      raise RuntimeError(f"cannot profile: {e}") from e
    except (_Invalid, tf.errors.OpError, ValueError) as e:
      raise RuntimeError(f"cannot profile: {describe_error(e)}") from e
  names = {node.name for node in extracted.graph_def.node}
  result = {}
  for name in names:
    values = [s[name] for s in samples if name in s]
    if values:
      result[name] = float(statistics.median(values))
  return result


def target_label(target) -> str:
  """A short text naming a target (for reports)."""
  if isinstance(target, workers.CpuWorkerCluster):
    return f"{topology_lib.CPU_WORKERS}:{target.num_workers}"
  if isinstance(target, str):
    return target
  raise errors.InputError(
      f"target must be 'local', 'cpu-workers:K', 'grpc://host:port' or a "
      f"CpuWorkerCluster, got {type(target).__name__}")


def describe_error(error: Exception) -> str:
  """One line saying what went wrong in a run, by kind."""
  kind = {
      tf.errors.ResourceExhaustedError: "out of memory",
      tf.errors.DeadlineExceededError: "timeout",
      tf.errors.UnavailableError: "worker unavailable",
      tf.errors.AbortedError: "aborted (a worker failed?)",
      tf.errors.InvalidArgumentError: "kernel error",
  }.get(type(error), type(error).__name__)
  lines = [line.strip() for line in str(
      getattr(error, "message", error)).splitlines()]
  # TF wraps the useful line in a generic header ("Graph execution error:"),
  # where the op was defined (a traceback) and node markers.
  useful = [line for line in lines
            if line and line not in _GENERIC_ERROR_LINES and
            not line.startswith(_CONTEXT_PREFIXES)]
  return f"{kind}: {useful[0] if useful else type(error).__name__}"[:500]


def session_config(*, timeout_s: float = DEFAULT_TIMEOUT_S,
                   graph_rewrites: bool = False,
                   cpu_devices: Optional[int] = None
                  ) -> config_pb2.ConfigProto:
  """The ConfigProto measurements run with (see the module docstring)."""
  config = config_pb2.ConfigProto()
  config.allow_soft_placement = False
  config.isolate_session_state = True
  config.operation_timeout_in_ms = max(1, int(timeout_s * 1000))
  if cpu_devices:
    config.device_count["CPU"] = cpu_devices
  if not graph_rewrites:
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.optimizer_options.opt_level = (
        config_pb2.OptimizerOptions.L0)
    config.graph_options.optimizer_options.do_constant_folding = False
    config.graph_options.optimizer_options.do_function_inlining = False
  return config


# ---- arguments ---------------------------------------------------------------


class _Invalid(Exception):
  """A measurement that cannot go on; its message is the reason."""


class _Hung(_Invalid):
  """A session call was abandoned before it returned (`thread` runs it)."""

  def __init__(self, message: str, thread: threading.Thread):
    super().__init__(message)
    self.thread = thread


class _WorkerLost(_Hung):
  """A cluster worker died while a session call was waiting on it."""


def _call_with_deadline(function, seconds: float, what: str,
                        watch: Optional[Callable[[], Optional[str]]] = None):
  """`function()` in a helper thread; _Hung if it has not returned in time.

  TF cancels a step at its timeout, but a kernel that ignores cancellation
  (a Python function, a stuck RPC) keeps `Session.run` waiting; this bounds
  the wait. `watch` is polled meanwhile: a dead worker (its reason) ends the
  wait at once with _WorkerLost, where TF's RPCs would retry until the
  timeout. The abandoned thread is a daemon and finishes on its own.
  """
  outcome = {}

  def call():
    try:
      outcome["value"] = function()
    except BaseException as e:  # pylint: disable=broad-except
      outcome["error"] = e

  thread = threading.Thread(target=call, name="tf_gdp-measure", daemon=True)
  thread.start()
  deadline = time.monotonic() + seconds
  while thread.is_alive() and time.monotonic() < deadline:
    thread.join(min(_WATCH_PERIOD_S, max(0.0, deadline - time.monotonic()))
                if watch else seconds)
    lost = watch() if watch and thread.is_alive() else None
    if lost:
      raise _WorkerLost(f"worker unavailable: {lost} during {what}", thread)
  if thread.is_alive():
    raise _Hung(f"timeout: {what} did not return within {seconds:.1f} s "
                "(a kernel that ignores cancellation?)", thread)
  if "error" in outcome:
    raise outcome["error"]
  return outcome.get("value")


def _dead_worker(cluster: workers.CpuWorkerCluster) -> Optional[str]:
  """Which worker of `cluster` has exited, or None."""
  for task, alive in enumerate(cluster.alive()):
    if not alive:
      return f"worker {task} exited"
  return None


def _hard_deadline_s(timeout_s: float) -> float:
  """TF's own timeout plus time for its cancellation to come back."""
  return timeout_s + max(1.0, 0.25 * timeout_s)


def _restart_dead_workers(opened, worker_error: bool) -> bool:
  """Restarts workers that died during a run; whether a retry makes sense."""
  cluster = opened.cluster
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


def _free_hung_workers(opened) -> None:
  """Restarts every worker of a cluster that holds a stuck step.

  Each worker has one inter-op thread, so a stuck kernel would block every
  later measurement; the restart also ends the abandoned RPC.
  """
  if opened.cluster is not None:
    with contextlib.suppress(workers.WorkerError):
      opened.cluster.restart()


def _check_counts(warmup, repeats, timeout_s) -> None:
  if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
    raise errors.InputError(f"warmup must be an integer >= 0, got {warmup!r}")
  if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
    raise errors.InputError(f"repeats must be an integer >= 1, got {repeats!r}")
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


# ---- targets -----------------------------------------------------------------


@dataclasses.dataclass
class _OpenTarget:
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


@contextlib.contextmanager
def _opened_target(target) -> Iterator[Any]:
  """Yields an _OpenTarget, or an invalid Measurement if it is unusable."""
  label = target_label(target)
  if isinstance(target, workers.CpuWorkerCluster):
    try:
      target.ensure_alive()
    except workers.WorkerError as e:
      yield invalid(f"worker unavailable: {e}", label)
      return
    yield _OpenTarget(target.target, label, cluster=target)
    return
  if target == LOCAL:
    yield _OpenTarget("", label, local=True)
    return
  if target.startswith("grpc://"):
    if not target[len("grpc://"):]:
      raise errors.InputError("grpc target needs host:port")
    yield _OpenTarget(target, label)
    return
  name, _, count = target.partition(":")
  if name == topology_lib.CPU_WORKERS:
    if not count.isdigit() or not 1 <= int(count) <= 64:
      raise errors.InputError(
          f"{target!r}: use cpu-workers:K with 1 <= K <= 64")
    try:
      cluster = workers.CpuWorkerCluster(int(count))
      cluster.start()
    except workers.WorkerError as e:
      yield invalid(f"cannot start workers: {e}", label)
      return
    try:
      yield _OpenTarget(cluster.target, label, cluster=cluster)
    finally:
      cluster.stop()
    return
  raise errors.InputError(
      f"unknown target {target!r} (local, cpu-workers:K or grpc://host:port)")


# ---- the runnable graph ------------------------------------------------------


@dataclasses.dataclass
class _RunnableGraph:
  """A GraphDef a Session can run on its own, with what to feed."""
  graph_def: Any
  feeds: Dict[str, np.ndarray]  # placeholder name -> value (every step)
  variables: Dict[str, np.ndarray]  # VarHandleOp name -> initial value


def runnable_graph_def(extracted: extract.ExtractedGraph, placed_graph_def,
                       arg_feeds: Mapping[str, np.ndarray]) -> _RunnableGraph:
  """Makes a placed flat graph self-contained: variables in-graph, feeds known.

  Captured resource handles (a tf.function's variables) become VarHandleOps
  on the device the placement gave their placeholder, to be initialized
  from the captured variables' current values; other captured tensors and
  the arguments are fed. (grappler_bridge.profiling does the same for its
  in-process profile; its helper is private, hence this one.)
  """
  graph_def = tf.compat.v1.GraphDef()
  graph_def.CopyFrom(placed_graph_def)
  captured = dict(zip(extracted.capture_names, extracted.captured_values))
  handle_shapes = graph_view.as_graph(extracted).handle_shapes
  run_id = uuid.uuid4().hex[:12]
  feeds, variables = {}, {}
  for node in graph_def.node:
    if node.op == "Placeholder":
      dtype = node.attr["dtype"].type
      if dtype == types_pb2.DT_RESOURCE:
        if node.name not in handle_shapes or node.name not in captured:
          raise _Invalid(
              f"resource input {node.name!r} is not a known variable")
        dtype, shape = handle_shapes[node.name]
        variables[node.name] = _read_variable(captured[node.name], dtype)
        graph_view.materialize_var_handle(node, dtype, shape)
      elif node.name in captured:
        feeds[node.name] = np.asarray(captured[node.name])
      elif node.name in arg_feeds:
        feeds[node.name] = arg_feeds[node.name]
      else:
        feeds[node.name] = _ones(dtype, node.attr["shape"].shape)
    elif node.op == "VarHandleOp" and node.name not in variables:
      variables[node.name] = _small_values(node.attr["dtype"].type,
                                           node.attr["shape"].shape)
    if node.op == "VarHandleOp":
      node.attr["shared_name"].s = (
          f"{_VARIABLE_PREFIX}/{run_id}/{node.name}".encode())
  return _RunnableGraph(graph_def, feeds, variables)


def _read_variable(handle, dtype: int) -> np.ndarray:
  try:
    return tf.raw_ops.ReadVariableOp(
        resource=handle, dtype=tf.dtypes.as_dtype(dtype)).numpy()
  except (tf.errors.OpError, ValueError, TypeError) as e:
    raise _Invalid(f"cannot read a captured variable: {describe_error(e)}"
                  ) from e


def _dims(shape) -> List[int]:
  return [] if shape.unknown_rank else [max(d.size, 1) for d in shape.dim]


def _ones(dtype: int, shape) -> np.ndarray:
  tf_dtype = tf.dtypes.as_dtype(dtype)
  if tf_dtype == tf.string:
    return np.full(_dims(shape), b"", dtype=object)
  return np.ones(_dims(shape), dtype=tf_dtype.as_numpy_dtype)


def _small_values(dtype: int, shape) -> np.ndarray:
  tf_dtype = tf.dtypes.as_dtype(dtype)
  dims = _dims(shape)
  if not tf_dtype.is_floating:
    return _ones(dtype, shape)
  rng = np.random.default_rng(0)
  return rng.uniform(-_UNKNOWN_INIT_SCALE, _UNKNOWN_INIT_SCALE,
                     dims).astype(tf_dtype.as_numpy_dtype)


# ---- the session -------------------------------------------------------------


class _Runner:
  """Runs one prepared step; `step` returns its wall-clock microseconds."""

  def __init__(self, session, targets, feeds, timeout_s: float,
               watch: Optional[Callable[[], Optional[str]]] = None):
    self._session = session
    self._targets = targets
    self._feeds = feeds
    self.options = config_pb2.RunOptions(
        timeout_in_ms=max(1, int(timeout_s * 1000)))
    self.deadline_s = _hard_deadline_s(timeout_s)
    self.watch = watch

  def run(self, fetches, feeds, what: str, options=None, run_metadata=None):
    """session.run with the timeout, abandoned (_Hung) if it never returns."""
    options = options or self.options
    return _call_with_deadline(
        lambda: self._session.run(fetches, feeds, options=options,
                                  run_metadata=run_metadata),
        self.deadline_s, what, self.watch)

  def step(self) -> float:
    def timed():
      start = time.perf_counter()
      self._session.run(self._targets, self._feeds, options=self.options)
      return (time.perf_counter() - start) * 1e6
    return _call_with_deadline(timed, self.deadline_s, "the step",
                               self.watch)

  def traced_step(self) -> Dict[str, float]:
    options = config_pb2.RunOptions()
    options.CopyFrom(self.options)
    options.trace_level = config_pb2.RunOptions.FULL_TRACE
    metadata = config_pb2.RunMetadata()
    self.run(self._targets, self._feeds, "the traced step", options=options,
             run_metadata=metadata)
    return profiling.node_micros(metadata)


@contextlib.contextmanager
def _placed_session(extracted, placed_graph_def, arg_feeds,
                    opened: _OpenTarget, timeout_s: float,
                    graph_rewrites: bool) -> Iterator[_Runner]:
  """A session with the placed graph loaded and its variables initialized."""
  runnable = runnable_graph_def(extracted, placed_graph_def, arg_feeds)
  used = sorted({n.device for n in runnable.graph_def.node if n.device})
  cpu_devices = _local_cpu_count(used) if opened.local else None
  with tf.Graph().as_default() as graph:
    tf.graph_util.import_graph_def(runnable.graph_def, name="")
    init_ops, init_feeds = _initializers(graph, runnable)
    targets = [graph.get_operation_by_name(f) for f in extracted.fetches]
    feeds = {graph.get_tensor_by_name(f"{name}:0"): value
             for name, value in runnable.feeds.items()}
  config = session_config(timeout_s=timeout_s, graph_rewrites=graph_rewrites,
                          cpu_devices=cpu_devices)
  session = tf.compat.v1.Session(opened.master, graph=graph, config=config)
  hung = None
  try:
    cluster = opened.cluster
    runner = _Runner(session, targets, feeds, timeout_s,
                     watch=(lambda: _dead_worker(cluster)) if cluster else None)
    have = _call_with_deadline(session.list_devices, runner.deadline_s,
                               "listing the target's devices", runner.watch)
    _check_devices_exist(have, used, opened.label)
    if init_ops:
      runner.run(init_ops, init_feeds, "variable initialization")
    yield runner
  except _Hung as e:
    hung = e
    raise
  finally:
    if hung is None:
      with contextlib.suppress(tf.errors.OpError):  # a master gone by now
        session.close()
    else:  # closing now would wait for the stuck call
      threading.Thread(target=_close_after, args=(hung.thread, session),
                       name="tf_gdp-measure-close", daemon=True).start()


def _close_after(thread: threading.Thread, session) -> None:
  """Closes an abandoned session once its stuck call has returned."""
  thread.join()
  with contextlib.suppress(Exception):  # its master may be gone or restarted
    session.close()


def _initializers(graph, runnable: _RunnableGraph):
  """One AssignVariableOp per in-graph variable, on the variable's device."""
  ops, feeds = [], {}
  for name, value in runnable.variables.items():
    handle = graph.get_tensor_by_name(f"{name}:0")
    with graph.device(handle.op.device):
      value_input = tf.compat.v1.placeholder(
          tf.dtypes.as_dtype(value.dtype), value.shape,
          name=f"{_VARIABLE_PREFIX}_init/{name}")
      ops.append(tf.raw_ops.AssignVariableOp(resource=handle,
                                             value=value_input))
    feeds[value_input] = value
  return ops, feeds


def _local_cpu_count(devices: Sequence[str]) -> int:
  count = 1
  for device in devices:
    spec = tf.DeviceSpec.from_string(device)
    if (spec.device_type or "").upper() == "CPU" and spec.job in (
        None, "localhost"):
      count = max(count, (spec.device_index or 0) + 1)
  return count


def _check_devices_exist(listed, used: Sequence[str], label: str) -> None:
  have = [tf.DeviceSpec.from_string(d.name) for d in listed]
  for device in used:
    wanted = tf.DeviceSpec.from_string(device)
    if not any(_matches(wanted, h) for h in have):
      raise _Invalid(
          f"device {device} does not exist on {label} (it has: "
          f"{', '.join(sorted(h.to_string() for h in have))})")


def _matches(wanted: tf.DeviceSpec, have: tf.DeviceSpec) -> bool:
  """Whether every field `wanted` names agrees with device `have`."""
  for field in ("job", "replica", "task", "device_type", "device_index"):
    want = getattr(wanted, field)
    if want is not None and str(want).upper() != str(getattr(have,
                                                             field)).upper():
      return False
  return True
