"""A TF1 Session on a target with a placed graph loaded, and bounded waits.

`placed_session` makes the placed flat graph self-contained
(`grappler_bridge.runnable`), checks that every device it names exists on
the target, initializes its variables and yields a `Runner` that times one
step. Every session call runs under a hard deadline (`call_with_deadline`):
TF's own timeout cancels a slow step, but a kernel that ignores cancellation
or a dead worker would otherwise keep the caller waiting. A measurement that
cannot go on raises `Invalid` (or `Hung`, `WorkerLost`), whose message is
the reason the measurement reports.
"""

import contextlib
import threading
import time
from typing import Callable, Dict, Iterator, Optional, Sequence

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import config_pb2  # pylint: disable=g-import-not-at-top

from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top
from grappler_bridge import profiling  # pylint: disable=g-import-not-at-top
from grappler_bridge import runnable as runnable_lib  # pylint: disable=g-import-not-at-top
from tf_gdp import errors  # pylint: disable=g-import-not-at-top
from tf_gdp.runtime import targets  # pylint: disable=g-import-not-at-top

DEFAULT_TIMEOUT_S = 120.0
_VARIABLE_PREFIX = "tf_gdp_measure"
_GENERIC_ERROR_LINES = frozenset({"Graph execution error:"})
# Lines of a TF error that are context, not the error: where the op was
# defined, node markers, hints.
_CONTEXT_PREFIXES = ("[[", "Detected at node", 'File "', "Hint:", "[Op:",
                     "Node:")
# How often a waiting session call checks that the cluster's workers live.
_WATCH_PERIOD_S = 0.1


class Invalid(Exception):
  """A measurement that cannot go on; its message is the reason."""


class Hung(Invalid):
  """A session call was abandoned before it returned (`thread` runs it)."""

  def __init__(self, message: str, thread: threading.Thread):
    super().__init__(message)
    self.thread = thread


class WorkerLost(Hung):
  """A cluster worker died while a session call was waiting on it."""


def session_config(*, timeout_s: float = DEFAULT_TIMEOUT_S,
                   graph_rewrites: bool = False,
                   cpu_devices: Optional[int] = None
                  ) -> config_pb2.ConfigProto:
  """The ConfigProto measurements run with (see `measure`'s docstring)."""
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


def call_with_deadline(function, seconds: float, what: str,
                       watch: Optional[Callable[[], Optional[str]]] = None):
  """`function()` in a helper thread; Hung if it has not returned in time.

  TF cancels a step at its timeout, but a kernel that ignores cancellation
  (a Python function, a stuck RPC) keeps `Session.run` waiting; this bounds
  the wait. `watch` is polled meanwhile: a dead worker (its reason) ends the
  wait at once with WorkerLost, where TF's RPCs would retry until the
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
      raise WorkerLost(f"worker unavailable: {lost} during {what}", thread)
  if thread.is_alive():
    raise Hung(f"timeout: {what} did not return within {seconds:.1f} s "
               "(a kernel that ignores cancellation?)", thread)
  if "error" in outcome:
    raise outcome["error"]
  return outcome.get("value")


def _hard_deadline_s(timeout_s: float) -> float:
  """TF's own timeout plus time for its cancellation to come back."""
  return timeout_s + max(1.0, 0.25 * timeout_s)


class Runner:
  """Runs one prepared step; `step` returns its wall-clock microseconds."""

  def __init__(self, session, step_targets, feeds, timeout_s: float,
               watch: Optional[Callable[[], Optional[str]]] = None):
    self._session = session
    self._targets = step_targets
    self._feeds = feeds
    self.options = config_pb2.RunOptions(
        timeout_in_ms=max(1, int(timeout_s * 1000)))
    self.deadline_s = _hard_deadline_s(timeout_s)
    self.watch = watch

  def run(self, fetches, feeds, what: str, options=None, run_metadata=None):
    """session.run with the timeout, abandoned (Hung) if it never returns."""
    options = options or self.options
    return call_with_deadline(
        lambda: self._session.run(fetches, feeds, options=options,
                                  run_metadata=run_metadata),
        self.deadline_s, what, self.watch)

  def step(self) -> float:
    def timed():
      start = time.perf_counter()
      self._session.run(self._targets, self._feeds, options=self.options)
      return (time.perf_counter() - start) * 1e6
    return call_with_deadline(timed, self.deadline_s, "the step", self.watch)

  def steps(self, warmup: int, repeats: int, traced: bool = False) -> list:
    """`warmup` untimed steps, then `repeats` timed (or traced) ones."""
    for _ in range(warmup):
      self.step()
    return [self.traced_step() if traced else self.step()
            for _ in range(repeats)]

  def traced_step(self) -> Dict[str, float]:
    """Node name -> microseconds of one traced step."""
    return profiling.node_micros(self.traced_metadata())

  def traced_metadata(self) -> config_pb2.RunMetadata:
    """The RunMetadata of one step run with FULL_TRACE (step stats)."""
    options = config_pb2.RunOptions()
    options.CopyFrom(self.options)
    options.trace_level = config_pb2.RunOptions.FULL_TRACE
    metadata = config_pb2.RunMetadata()
    self.run(self._targets, self._feeds, "the traced step", options=options,
             run_metadata=metadata)
    return metadata


@contextlib.contextmanager
def placed_session(extracted, placed_graph_def, arg_feeds,
                   opened: targets.OpenTarget, timeout_s: float,
                   graph_rewrites: bool) -> Iterator[Runner]:
  """A session with the placed graph loaded and its variables initialized.

  Raises:
    Invalid: the graph cannot run there (an unknown variable, a device the
      target lacks); Hung or WorkerLost from a session call.
  """
  try:
    runnable = runnable_lib.runnable_graph(
        graph_view.as_graph(extracted), arg_feeds,
        graph_def=placed_graph_def, name_prefix=_VARIABLE_PREFIX)
  except errors.InputError as e:
    raise Invalid(str(e)) from e
  used = sorted({n.device for n in runnable.graph_def.node if n.device})
  cpu_devices = local_cpu_count(used) if opened.local else None
  step = runnable.imported(extracted.fetches)
  config = session_config(timeout_s=timeout_s, graph_rewrites=graph_rewrites,
                          cpu_devices=cpu_devices)
  session = tf.compat.v1.Session(opened.master, graph=step.graph,
                                 config=config)
  hung = None
  try:
    cluster = opened.cluster
    runner = Runner(
        session, step.targets, step.feeds, timeout_s,
        watch=(lambda: targets.dead_worker(cluster)) if cluster else None)
    have = call_with_deadline(session.list_devices, runner.deadline_s,
                              "listing the target's devices", runner.watch)
    _check_devices_exist(have, used, opened.label)
    if step.init_ops:
      runner.run(step.init_ops, step.init_feeds, "variable initialization")
    yield runner
  except Hung as e:
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


def local_cpu_count(devices: Sequence[str]) -> int:
  """CPU devices a local session needs so that every one of `devices` exists."""
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
      raise Invalid(
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
