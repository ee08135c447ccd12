"""Real step-time measurement in this process (target "local").

Failures of the placed step (a failing kernel, a timeout, a device the target
lacks, an illegal placement) must come back as invalid Measurements, never as
exceptions; only malformed arguments raise InputError.
"""

import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from grappler_bridge import extract
from tf_gdp import errors
from tf_gdp.bench import reliability_run_cases
from tf_gdp.cost import topology
from tf_gdp.runtime import measure
from tf_gdp.runtime import placed_session

_CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
_CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


def _train_step():
  """A tiny step with an argument and a captured variable it updates."""
  weights = tf.Variable(tf.fill([8, 8], 0.01), name="weights")

  @tf.function
  def step(x):
    y = tf.matmul(x, weights)
    weights.assign_sub(0.1 * y)
    return tf.reduce_sum(y)

  return extract.from_function(step, tf.ones([8, 8])), weights


def _all_on(extracted, device):
  return {node.name: device for node in extracted.graph_def.node}


def _local_topology():
  return topology.custom(
      "two-local-cpus",
      [topology.Device(_CPU0, "CPU", 1 << 30),
       topology.Device(_CPU1, "CPU", 1 << 30)],
      [[0, 1.0], [1.0, 0]], [[0, 10.0], [10.0, 0]])


def test_measure_times_a_placed_step_without_touching_the_callers_variable():
  extracted, weights = _train_step()
  before = weights.numpy()
  result = measure.measure(extracted, _all_on(extracted, _CPU0), "local",
                           example_args=[np.full([8, 8], 2.0, np.float32)],
                           warmup=1, repeats=3)
  assert result.valid, result.reason
  assert result.reason is None and result.target == "local"
  assert len(result.times_us) == 3
  assert result.step_time_us == pytest.approx(np.median(result.times_us))
  assert 0 < result.step_time_us < 1e6
  np.testing.assert_array_equal(weights.numpy(), before)


def test_int_placement_over_two_local_cpu_devices():
  extracted, _ = _train_step()
  n = len(extracted.graph_def.node)
  placement = np.zeros(n, np.int64)
  placement[[i for i, node in enumerate(extracted.graph_def.node)
             if node.name == "x"]] = 1  # the fed argument lives on CPU:1
  result = measure.measure(extracted, placement, "local",
                           topology=_local_topology(), warmup=0, repeats=2)
  assert result.valid, result.reason


def test_failing_kernel_is_an_invalid_measurement():
  @tf.function
  def step(x):
    tf.debugging.assert_equal(x, tf.zeros_like(x), message="x must be 0")
    return x * 2.0

  extracted = extract.from_function(step, tf.zeros([4]))
  # Fed ones (the default for missing example_args): the assert fails.
  result = measure.measure(extracted, _all_on(extracted, _CPU0), "local")
  assert not result.valid
  assert np.isnan(result.step_time_us)
  assert "kernel error" in result.reason and "x must be 0" in result.reason


def test_timeout_is_an_invalid_measurement():
  weights = tf.Variable(tf.random.uniform([768, 768], -0.01, 0.01, seed=0))

  @tf.function
  def step():
    h = weights
    for _ in range(40):
      h = tf.matmul(h, weights)
    return tf.reduce_sum(h)

  extracted = extract.from_function(step)
  result = measure.measure(extracted, _all_on(extracted, _CPU0), "local",
                           warmup=0, repeats=1, timeout_s=0.002)
  assert not result.valid
  assert result.reason.startswith("timeout"), result.reason


def test_missing_device_and_illegal_placement_are_invalid():
  extracted, _ = _train_step()
  elsewhere = "/job:worker/replica:0/task:3/device:CPU:0"
  on_worker = measure.measure(extracted, _all_on(extracted, elsewhere),
                              "local")
  assert not on_worker.valid and "does not exist" in on_worker.reason
  split = _all_on(extracted, _CPU0)
  split[extracted.capture_names[0]] = _CPU1  # the handle away from its reader
  illegal = measure.measure(extracted, split, "local")
  assert not illegal.valid and illegal.reason.startswith("illegal placement")


def test_bad_arguments_raise_input_error():
  extracted, _ = _train_step()
  placement = _all_on(extracted, _CPU0)
  with pytest.raises(errors.InputError):
    measure.measure(extracted, placement, "local", repeats=0)
  with pytest.raises(errors.InputError):
    measure.measure(extracted, placement, "local", timeout_s=0)
  with pytest.raises(errors.InputError):
    measure.measure(extracted, placement, "tpu-pod")
  with pytest.raises(errors.InputError):
    measure.measure(extracted, placement, "cpu-workers:0")
  with pytest.raises(errors.InputError):
    measure.measure(extracted, np.zeros(3, np.int64), "local",
                    topology=_local_topology())
  with pytest.raises(errors.InputError):
    measure.measure(extracted, np.zeros(len(extracted.graph_def.node), int),
                    "local")  # an int placement needs a topology
  with pytest.raises(errors.InputError):
    measure.measure(extracted.graph_def, placement, "local")
  with pytest.raises(errors.InputError):
    measure.measure(extracted, placement, "local",
                    example_args=[np.ones([8, 8]), np.ones([8, 8])])


def test_profile_op_times_reports_the_ops_of_the_step():
  extracted, _ = _train_step()
  times = measure.profile_op_times(extracted, "local", warmup=1, repeats=2)
  assert times["MatMul"] > 0
  assert set(times) <= {node.name for node in extracted.graph_def.node}


def test_rewrites_switch_changes_only_the_session_config():
  off = placed_session.session_config(graph_rewrites=False)
  on = placed_session.session_config(graph_rewrites=True)
  assert off.graph_options.rewrite_options.disable_meta_optimizer
  assert not on.graph_options.rewrite_options.disable_meta_optimizer
  assert not off.allow_soft_placement and off.isolate_session_state


def test_check_numerics_failure_is_an_invalid_measurement():
  @tf.function
  def step(x):
    return tf.debugging.check_numerics(tf.math.log(x), "log of x") * 2.0

  extracted = extract.from_function(step, tf.ones([4]))
  result = measure.measure(extracted, _all_on(extracted, _CPU0), "local",
                           example_args=[np.array([-1, 1, 1, 1], np.float32)],
                           warmup=0, repeats=1)
  assert not result.valid and result.attempts == 1
  assert result.reason == "kernel error: log of x : Tensor had NaN values"


@pytest.mark.skipif(not reliability_run_cases.oom_test_is_safe(),
                    reason="vm.overcommit_memory=1 might really allocate")
def test_out_of_memory_is_an_invalid_measurement():
  @tf.function
  def step(n):
    # 2**46 floats (256 TiB) exceed the address space: the allocation fails
    # at once, whatever the free memory (TF retries it for ~10 s first).
    return tf.reduce_sum(tf.fill(tf.stack([n, n]), 1.0))

  extracted = extract.from_function(step, tf.constant(1 << 23))
  result = measure.measure(extracted, _all_on(extracted, _CPU0), "local",
                           example_args=[np.int32(1 << 23)], warmup=0,
                           repeats=1)
  assert not result.valid
  assert result.reason.startswith(
      "out of memory: OOM when allocating tensor with shape[8388608,8388608]")


def test_kernel_that_ignores_cancellation_times_out():
  release = threading.Event()

  def stuck(x):
    release.wait(30.0)  # TF cannot cancel a Python function
    return x

  @tf.function
  def step(x):
    return tf.py_function(stuck, [x], tf.float32) * 2.0

  extracted = extract.from_function(step, tf.ones([4]))
  started = time.monotonic()
  result = measure.measure(extracted, _all_on(extracted, _CPU0), "local",
                           warmup=0, repeats=1, timeout_s=0.3,
                           allow_side_effects=True)  # py_function
  elapsed = time.monotonic() - started
  release.set()
  assert not result.valid
  assert result.reason.startswith(
      "timeout: the step did not return within 1.3 s"), result.reason
  assert elapsed < 5.0


def test_measure_retries_must_be_a_count():
  extracted, _ = _train_step()
  with pytest.raises(errors.InputError, match="retries"):
    measure.measure(extracted, _all_on(extracted, _CPU0), "local", retries=-1)
