"""A local TF cluster of K single-core worker processes, for real step times.

`cpu-workers:K` is the testbed on which placements are measured for real:
K `tf.distribute.Server` processes on loopback ports, each pinned to its own
core (`taskset -c`, or `os.sched_setaffinity` when taskset is missing) with
one intra-op and one inter-op thread, so that a device of the placement is
one core and two ops on different workers really run in parallel.

    with workers.CpuWorkerCluster(2) as cluster:
      session = tf.compat.v1.Session(cluster.target, graph=g)
      ...   # ops on cluster.device_names[i] run on core i

Workers must never outlive the process that started them (a stray worker
holds a core and skews every later measurement), so there are three layers:
`__exit__` (also on exceptions and Ctrl-C) terminates, then kills, them; an
`atexit` hook does the same for clusters never exited; and each worker
watches its parent: it exits when its parent pid changes, and, when the
cluster was started from the main thread, the kernel also kills it with
PR_SET_PDEATHSIG when the parent dies (SIGKILL included). (The kernel sends
that signal when the *thread* that forked the child ends, which is why it is
only armed for clusters started from the main thread.)

Ports are picked free (bind to port 0), never fixed; if a port was taken
between picking and binding, the whole start is retried with new ports.

Run as a program, this module is one worker:
  python -m tf_gdp.runtime.workers --task=0 --cluster_spec='{"worker": [...]}'
"""

import atexit
import contextlib
import ctypes
# socket.getaddrinfo imports this codec on first use; imported here, the
# start-up wait loop imports nothing, and a Ctrl-C cannot land inside an
# import's lock cleanup, where CPython drops the KeyboardInterrupt.
import encodings.idna  # pylint: disable=unused-import
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import List, Mapping, Optional, Sequence

from tf_gdp import errors

JOB = "worker"
_HOST = "localhost"
# Starting a worker imports TensorFlow (~6 s here; two at once on two busy
# cores take longer).
DEFAULT_START_TIMEOUT_S = 120.0
# How often a worker checks that its parent is still there.
_WATCHDOG_PERIOD_S = 0.25
# Grace period between SIGTERM and SIGKILL on shutdown.
_TERMINATE_GRACE_S = 5.0
# Linux prctl option: signal to get when the parent (thread) dies.
_PR_SET_PDEATHSIG = 1
_LOG_TAIL_CHARS = 600
# The folder that holds the tf_gdp package this module belongs to.
_CODE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class WorkerError(RuntimeError):
  """A worker could not be started or restarted (not an input problem)."""


def device_name(task: int) -> str:
  """The TF device string of worker `task`'s CPU."""
  return f"/job:{JOB}/replica:0/task:{task}/device:CPU:0"


class CpuWorkerCluster:
  """K TF worker processes on this machine, one per core, as a context manager.

  Attributes:
    num_workers: K.
    cluster_spec: {"worker": ["localhost:port", ...]}.
    target: the gRPC session target of task 0 ("grpc://localhost:port").
    device_names: the CPU device of each task, in task order.
    cores: the core each task is pinned to (None when pinning is off).
    env: environment variables the workers get on top of this process's.
  """

  def __init__(self, num_workers: int, *,
               start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
               max_restarts: int = 3, pin: bool = True,
               python: Optional[str] = None,
               log_dir: Optional[str] = None,
               env: Optional[Mapping[str, str]] = None):
    """Configures (does not start) the cluster.

    Args:
      num_workers: K >= 1 worker processes.
      start_timeout_s: how long to wait for all workers to be reachable.
      max_restarts: restarts allowed per worker by `ensure_alive`.
      pin: pin worker i to core i % (cores available to this process).
      python: the interpreter for the workers (default: this one).
      log_dir: where workers' stderr goes (default: a temp dir, removed on
        stop).
      env: environment variables set for the workers on top of this
        process's (e.g. `allocator_stats.COUNTING_ENV`, read when their
        TensorFlow starts).
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or (
        num_workers < 1):
      raise errors.InputError(
          f"num_workers must be a positive integer, got {num_workers!r}")
    if not start_timeout_s > 0 or max_restarts < 0:
      raise errors.InputError(
          "start_timeout_s must be > 0 and max_restarts >= 0")
    self.num_workers = num_workers
    self.start_timeout_s = float(start_timeout_s)
    self.max_restarts = int(max_restarts)
    self.python = python or sys.executable
    allowed = sorted(os.sched_getaffinity(0))
    self.cores = ([allowed[i % len(allowed)] for i in range(num_workers)]
                  if pin else [None] * num_workers)
    self.cluster_spec = {JOB: []}
    self.restarts = [0] * num_workers
    self._procs: List[Optional[subprocess.Popen]] = [None] * num_workers
    self._user_log_dir = log_dir
    self.env = dict(env or {})
    self._log_dir = None
    self._pdeathsig = False
    self._atexit = None

  # ---- properties --------------------------------------------------------

  @property
  def addresses(self) -> List[str]:
    return list(self.cluster_spec[JOB])

  @property
  def target(self) -> str:
    if not self.cluster_spec[JOB]:
      raise WorkerError("the cluster is not started")
    return f"grpc://{self.cluster_spec[JOB][0]}"

  @property
  def device_names(self) -> List[str]:
    return [device_name(i) for i in range(self.num_workers)]

  @property
  def pids(self) -> List[Optional[int]]:
    return [p.pid if p is not None else None for p in self._procs]

  @property
  def running(self) -> bool:
    return any(p is not None for p in self._procs)

  # ---- lifecycle ---------------------------------------------------------

  def __enter__(self) -> "CpuWorkerCluster":
    self.start()
    return self

  def __exit__(self, *exc_info) -> None:
    self.stop()

  def start(self, *, port_attempts: int = 3) -> None:
    """Starts every worker and waits until each accepts connections."""
    if self.running:
      raise WorkerError("the cluster is already running")
    self._log_dir = self._user_log_dir or tempfile.mkdtemp(
        prefix="tf_gdp_workers_")
    self._pdeathsig = threading.current_thread() is threading.main_thread()
    self._atexit = _register_atexit(self)
    self.restarts = [0] * self.num_workers
    last_error = None
    try:
      for _ in range(port_attempts):
        self.cluster_spec = {JOB: [f"{_HOST}:{port}"
                                   for port in _free_ports(self.num_workers)]}
        try:
          for task in range(self.num_workers):
            self._spawn(task)
          self._wait_reachable(range(self.num_workers))
          return
        except WorkerError as e:
          last_error = e
          self._terminate_all()
          if not _looks_like_port_clash(str(e)):
            break
    except BaseException:
      # Ctrl-C or an error while starting: `with` never reaches __exit__
      # when __enter__ fails, so nothing else would stop these workers.
      self.stop()
      raise
    self.stop()
    raise last_error

  def stop(self) -> None:
    """Terminates all workers (SIGTERM, then SIGKILL) and reaps them."""
    self._terminate_all()
    self.cluster_spec = {JOB: []}
    if self._atexit is not None:
      atexit.unregister(self._atexit)
      self._atexit = None
    if self._log_dir and not self._user_log_dir:
      shutil.rmtree(self._log_dir, ignore_errors=True)
    self._log_dir = None

  def ensure_alive(self) -> List[int]:
    """Restarts dead workers on their old ports; returns their task ids.

    Raises:
      WorkerError: a worker died more than `max_restarts` times, or did not
        come back.
    """
    if not self.cluster_spec[JOB]:
      raise WorkerError("the cluster is not started")
    dead = [task for task, proc in enumerate(self._procs)
            if proc is None or proc.poll() is not None]
    for task in dead:
      if self.restarts[task] >= self.max_restarts:
        raise WorkerError(
            f"worker {task} died again after {self.restarts[task]} restarts"
            f"{self._log_tail(task)}")
      self.restarts[task] += 1
      self._reap(task)
      self._spawn(task)
    if dead:
      self._wait_reachable(dead)
    return dead

  def restart(self) -> None:
    """Replaces every worker with a fresh one on the same port.

    For a worker that is alive but stuck (a kernel that ignores
    cancellation holds its only thread); does not count as a restart.
    """
    if not self.cluster_spec[JOB]:
      raise WorkerError("the cluster is not started")
    self._terminate_all()
    for task in range(self.num_workers):
      self._spawn(task)
    self._wait_reachable(range(self.num_workers))

  def alive(self) -> List[bool]:
    return [p is not None and p.poll() is None for p in self._procs]

  # ---- internals ---------------------------------------------------------

  def _spawn(self, task: int) -> None:
    command = [self.python, "-m", "tf_gdp.runtime.workers", f"--task={task}",
               f"--cluster_spec={json.dumps(self.cluster_spec)}",
               f"--parent_pid={os.getpid()}",
               f"--pdeathsig={str(self._pdeathsig).lower()}"]
    core = self.cores[task]
    if core is not None:
      taskset = shutil.which("taskset")
      if taskset:
        command = [taskset, "-c", str(core)] + command
      else:
        command.append(f"--cpu={core}")
    env = dict(os.environ)
    env.update(self.env)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env["OMP_NUM_THREADS"] = "1"
    # The worker runs this very tf_gdp, whatever the working directory or
    # another installed copy would give `-m`.
    env["PYTHONPATH"] = os.pathsep.join(
        [_CODE_ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    log_path = os.path.join(self._log_dir, f"worker{task}.log")
    with open(log_path, "ab") as log:
      self._procs[task] = subprocess.Popen(
          command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
          start_new_session=True)  # a Ctrl-C reaches the parent only

  def _wait_reachable(self, tasks: Sequence[int]) -> None:
    deadline = time.monotonic() + self.start_timeout_s
    pending = list(tasks)
    while pending:
      for task in list(pending):
        proc = self._procs[task]
        if proc.poll() is not None:
          raise WorkerError(
              f"worker {task} exited with code {proc.returncode} while "
              f"starting{self._log_tail(task)}")
        if _port_open(self.cluster_spec[JOB][task]):
          pending.remove(task)
      if pending and time.monotonic() > deadline:
        raise WorkerError(
            f"worker(s) {pending} not reachable after "
            f"{self.start_timeout_s:.0f} s{self._log_tail(pending[0])}")
      if pending:
        time.sleep(0.05)

  def _terminate_all(self) -> None:
    for proc in self._procs:
      if proc is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
          proc.terminate()
    for task in range(self.num_workers):
      self._reap(task)

  def _reap(self, task: int) -> None:
    proc = self._procs[task]
    if proc is None:
      return
    try:
      proc.wait(timeout=_TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
      with contextlib.suppress(ProcessLookupError):
        proc.kill()
      proc.wait()
    self._procs[task] = None

  def _log_tail(self, task: int) -> str:
    if not self._log_dir:
      return ""
    path = os.path.join(self._log_dir, f"worker{task}.log")
    try:
      with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    except OSError:
      return ""
    lines = [l for l in text.splitlines()
             if l.strip() and not l.startswith(("I0000", "WARNING: All log"))]
    tail = " | ".join(lines)[-_LOG_TAIL_CHARS:]
    return f" (log: {tail})" if tail else ""


def _register_atexit(cluster: CpuWorkerCluster):
  """Stops the cluster at interpreter exit without keeping it alive."""
  ref = weakref.ref(cluster)

  def stop():
    alive = ref()
    if alive is not None:
      alive.stop()

  atexit.register(stop)
  return stop


def _free_ports(count: int) -> List[int]:
  """Ports the kernel just gave out for loopback (all held until picked)."""
  sockets, ports = [], []
  try:
    for _ in range(count):
      s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
      s.bind(("127.0.0.1", 0))
      sockets.append(s)
      ports.append(s.getsockname()[1])
  finally:
    for s in sockets:
      s.close()
  return ports


def _port_open(address: str) -> bool:
  host, _, port = address.rpartition(":")
  try:
    with socket.create_connection((host, int(port)), timeout=0.5):
      return True
  except OSError:
    return False


def _looks_like_port_clash(message: str) -> bool:
  text = message.lower()
  return "address already in use" in text or "bind" in text


# ---- the worker program ------------------------------------------------------


def _arm_parent_death_signal() -> None:
  """Asks the kernel to SIGKILL us when our parent dies (Linux only)."""
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  except (OSError, AttributeError):
    pass  # not Linux: the watchdog still works


def _watch_parent(parent_pid: int) -> None:
  """Exits this process as soon as its parent is gone."""
  while True:
    if os.getppid() != parent_pid:
      os._exit(0)  # pylint: disable=protected-access
    time.sleep(_WATCHDOG_PERIOD_S)


def serve(task: int, cluster_spec: dict, *, parent_pid: Optional[int] = None,
          pdeathsig: bool = False, cpu: Optional[int] = None) -> None:
  """Runs worker `task` of `cluster_spec` until the parent goes away."""
  if pdeathsig:
    _arm_parent_death_signal()
  if parent_pid is not None:
    if os.getppid() != parent_pid:
      return  # the parent died before we got here
    threading.Thread(target=_watch_parent, args=(parent_pid,),
                     daemon=True).start()
  if cpu is not None:
    os.sched_setaffinity(0, {cpu})  # before TF starts any thread
  signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # pylint: disable=protected-access
  from grappler_bridge import tf_env  # pylint: disable=g-import-not-at-top
  tf_env.prepare_tensorflow_environment()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                    inter_op_parallelism_threads=1)
  server = tf.distribute.Server(tf.train.ClusterSpec(cluster_spec),
                                job_name=JOB, task_index=task, config=config,
                                start=True)
  while server is not None:  # serve until SIGTERM or the parent is gone
    time.sleep(3600)


def main(argv) -> None:
  del argv
  serve(_TASK.value, json.loads(_CLUSTER_SPEC.value),
        parent_pid=_PARENT_PID.value, pdeathsig=_PDEATHSIG.value,
        cpu=_CPU.value)


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top

  _TASK = flags.DEFINE_integer("task", None, "Task index of this worker.",
                               lower_bound=0)
  _CLUSTER_SPEC = flags.DEFINE_string("cluster_spec", None,
                                      'JSON {"worker": ["host:port", ...]}.')
  _PARENT_PID = flags.DEFINE_integer("parent_pid", None,
                                     "Exit when this process is gone.")
  _PDEATHSIG = flags.DEFINE_boolean("pdeathsig", False,
                                    "Arm PR_SET_PDEATHSIG (SIGKILL).")
  _CPU = flags.DEFINE_integer("cpu", None,
                              "Pin to this core (when taskset is missing).")
  flags.mark_flags_as_required(["task", "cluster_spec"])
  app.run(main)
