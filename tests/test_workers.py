"""The local worker cluster starts, runs placed graphs, restarts, and cleans up.

A worker left behind would hold a core and skew every later measurement, so
each test checks that no worker process survives its cluster.
"""

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from grappler_bridge import extract
from tf_gdp import errors
from tf_gdp.runtime import measure
from tf_gdp.runtime import placed_session
from tf_gdp.runtime import workers


def _gone(pid: int, wait_s: float = 10.0) -> bool:
  """Whether process `pid` has exited (a zombie counts as exited)."""
  deadline = time.monotonic() + wait_s
  while time.monotonic() < deadline:
    try:
      with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
      return True
    if state in ("Z", "X"):
      return True
    time.sleep(0.05)
  return False


def _reaped(cluster, task: int, wait_s: float = 10.0) -> bool:
  """Waits until the cluster sees worker `task` dead.

  A SIGKILLed TF worker has dozens of threads; /proc shows it as a zombie
  while they are still being torn down, before its parent can reap it.
  """
  deadline = time.monotonic() + wait_s
  while time.monotonic() < deadline:
    if not cluster.alive()[task]:
      return True
    time.sleep(0.05)
  return False


def _this_code_env():
  """Environment in which `python -c` imports this checkout's tf_gdp."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return dict(os.environ, PYTHONPATH=root)


def _two_task_graph(cluster):
  """Doubles a matrix on task 0 and sums it on task 1."""
  graph = tf.Graph()
  with graph.as_default():
    with tf.device(cluster.device_names[0]):
      doubled = tf.constant(np.ones([8, 8], np.float32)) * 2.0
    with tf.device(cluster.device_names[1]):
      total = tf.reduce_sum(doubled)
  return graph, total


def _tiny_step():
  weights = tf.Variable(tf.ones([16, 16]) * 0.01)

  @tf.function
  def step():
    y = tf.matmul(weights, weights)
    weights.assign_sub(0.1 * y)
    return tf.reduce_sum(y)

  return extract.from_function(step)


def test_cluster_runs_across_workers_and_leaves_nothing_on_exception():
  pids = []
  with pytest.raises(RuntimeError, match="boom"):
    with workers.CpuWorkerCluster(2) as cluster:
      pids = cluster.pids
      ports = [int(a.rsplit(":", 1)[1]) for a in cluster.addresses]
      assert len(set(ports)) == 2 and all(p > 0 for p in ports)
      assert cluster.target == f"grpc://{cluster.addresses[0]}"
      assert cluster.device_names[1] == (
          "/job:worker/replica:0/task:1/device:CPU:0")
      for pid, core in zip(pids, cluster.cores):
        assert os.sched_getaffinity(pid) == {core}
      graph, total = _two_task_graph(cluster)
      with tf.compat.v1.Session(cluster.target, graph=graph) as session:
        assert session.run(total) == pytest.approx(128.0)
      # measure() on the same cluster, with ops on both workers.
      extracted = _tiny_step()
      placement = np.arange(len(extracted.graph_def.node)) % 2
      # Keep each variable's ops with its handle (a colocation group).
      by_name = {n.name: i for i, n in enumerate(extracted.graph_def.node)}
      for node in extracted.graph_def.node:
        if node.op in ("ReadVariableOp", "AssignSubVariableOp"):
          placement[by_name[node.name]] = placement[
              by_name[node.input[0].split(":")[0]]]
      result = measure.measure(extracted, placement, cluster,
                               topology="cpu-workers:2", warmup=1, repeats=2)
      assert result.valid, result.reason
      assert result.step_time_us > 0 and len(result.times_us) == 2
      # The same cluster named by its address, as a user's grpc:// cluster.
      by_address = measure.measure(extracted, placement, cluster.target,
                                   topology="cpu-workers:2", warmup=0,
                                   repeats=1)
      assert by_address.valid and by_address.target == cluster.target
      raise RuntimeError("boom")
  assert pids and all(_gone(pid) for pid in pids)


def test_dead_worker_is_detected_and_restarted_with_a_limit():
  with workers.CpuWorkerCluster(2, max_restarts=1) as cluster:
    old_pids = cluster.pids
    assert cluster.ensure_alive() == []
    os.kill(old_pids[1], signal.SIGKILL)
    assert _reaped(cluster, 1)
    assert cluster.alive() == [True, False]
    assert cluster.ensure_alive() == [1]
    assert cluster.alive() == [True, True]
    assert cluster.pids[0] == old_pids[0] and cluster.pids[1] != old_pids[1]
    graph, total = _two_task_graph(cluster)
    with tf.compat.v1.Session(cluster.target, graph=graph) as session:
      assert session.run(total) == pytest.approx(128.0)
    # A second death exceeds max_restarts=1: measure() reports it, no raise.
    restarted = cluster.pids[1]
    os.kill(restarted, signal.SIGKILL)
    assert _reaped(cluster, 1)
    with pytest.raises(workers.WorkerError, match="restarts"):
      cluster.ensure_alive()
    result = measure.measure(_tiny_step(), {}, cluster, repeats=1)
    assert not result.valid and "worker unavailable" in result.reason
    pids = [p for p in cluster.pids if p is not None]
  assert all(_gone(pid) for pid in pids)


def test_workers_die_with_a_killed_parent(tmp_path):
  script = textwrap.dedent("""
      import sys, time
      from tf_gdp.runtime import workers
      cluster = workers.CpuWorkerCluster(2)
      cluster.start()
      print(" ".join(str(p) for p in cluster.pids), flush=True)
      time.sleep(600)
  """)
  parent = subprocess.Popen([sys.executable, "-c", script],
                            stdout=subprocess.PIPE, text=True,
                            cwd=str(tmp_path), env=_this_code_env())
  try:
    line = _line_reader(parent)(120)
    pids = [int(p) for p in line.split()]
    assert len(pids) == 2, line
  finally:
    parent.kill()  # SIGKILL: no __exit__, no atexit
    parent.wait()
  assert all(_gone(pid) for pid in pids)


def test_bad_worker_count_is_input_error():
  with pytest.raises(errors.InputError):
    workers.CpuWorkerCluster(0)
  with pytest.raises(errors.InputError):
    workers.CpuWorkerCluster(True)


def test_workers_get_the_clusters_environment(monkeypatch, tmp_path):
  started = []

  class FakeProcess:
    pid = 1

    def __init__(self, command, **kwargs):
      started.append((command, kwargs["env"]))

  monkeypatch.setattr(workers.subprocess, "Popen", FakeProcess)
  cluster = workers.CpuWorkerCluster(1, pin=False, log_dir=str(tmp_path),
                                     env={"TF_CPU_ALLOCATOR_USE_BFC": "1",
                                          "OMP_NUM_THREADS": "4"})
  cluster._log_dir = str(tmp_path)  # pylint: disable=protected-access
  cluster.cluster_spec = {workers.JOB: ["localhost:1"]}
  cluster._spawn(0)  # pylint: disable=protected-access
  (command, env), = started
  assert "tf_gdp.runtime.workers" in command
  assert env["TF_CPU_ALLOCATOR_USE_BFC"] == "1"
  assert env["OMP_NUM_THREADS"] == "1"  # one core per worker, whatever asked
  assert env["PATH"] == os.environ["PATH"]


def test_worker_killed_mid_measurement_is_restarted_and_retried(monkeypatch):
  extracted = _tiny_step()
  with workers.CpuWorkerCluster(1) as cluster:
    victim = cluster.pids[0]
    real_step = placed_session.Runner.step
    kills = []

    def step_that_loses_its_worker(runner):
      if not kills:  # the first step: the worker dies under it
        kills.append(victim)
        os.kill(victim, signal.SIGKILL)
      return real_step(runner)

    monkeypatch.setattr(placed_session.Runner, "step", step_that_loses_its_worker)
    started = time.monotonic()
    result = measure.measure(extracted, {}, cluster, warmup=1, repeats=2,
                             timeout_s=60.0)
    assert result.valid, result.reason
    assert result.attempts == 2 and len(result.times_us) == 2
    assert cluster.restarts == [1] and cluster.pids[0] != victim
    # Noticed by watching the worker, not by waiting out the 60 s timeout.
    assert time.monotonic() - started < 40.0
    # A stuck worker is replaced wholesale (not counted as a restart).
    before = cluster.pids
    cluster.restart()
    assert cluster.pids != before and cluster.restarts == [1]
    assert all(_gone(pid) for pid in before)
    pids = cluster.pids
  assert _gone(victim) and all(_gone(pid) for pid in pids)


def _line_reader(proc):
  """A function returning the child's next stdout line, failing (not hanging)
  after a timeout."""
  lines = queue.Queue()
  threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                   daemon=True).start()

  def next_line(timeout_s: float) -> str:
    try:
      return lines.get(timeout=timeout_s)
    except queue.Empty:
      raise AssertionError(f"no output from the child within {timeout_s} s")

  return next_line


def test_ctrl_c_while_starting_stops_the_workers(tmp_path):
  # The parent survives the Ctrl-C; its half-started workers must not.
  script = textwrap.dedent("""
      import signal
      import time
      from tf_gdp.runtime import workers

      # A shell's background jobs (CI runners, nohup) inherit SIGINT ignored;
      # Python then raises no KeyboardInterrupt. Restore it, as a terminal has.
      signal.signal(signal.SIGINT, signal.default_int_handler)

      class Loud(workers.CpuWorkerCluster):
        def _spawn(self, task):
          super()._spawn(task)
          print(self._procs[task].pid, flush=True)

      cluster = Loud(2, start_timeout_s=600)
      try:
        cluster.start()
      except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("interrupted", cluster.alive(), flush=True)
      time.sleep(600)
  """)
  parent = subprocess.Popen([sys.executable, "-c", script],
                            stdout=subprocess.PIPE, text=True,
                            cwd=str(tmp_path), env=_this_code_env())
  next_line = _line_reader(parent)
  try:
    pids = [int(next_line(120)) for _ in range(2)]
    # CPython drops a KeyboardInterrupt raised inside a weakref callback; a
    # user whose Ctrl-C vanished presses it again, and so does this test.
    for _ in range(4):
      parent.send_signal(signal.SIGINT)
      try:
        line = next_line(30)
        break
      except AssertionError:
        continue
    else:
      raise AssertionError("four Ctrl-Cs did not interrupt the start")
    assert line.strip() == "interrupted [False, False]"
    assert all(_gone(pid) for pid in pids)
    assert parent.poll() is None  # the parent lives on
  finally:
    parent.kill()
    parent.wait()
