"""TensorFlow's allocator statistics of a placed step (runtime.allocator_stats).

The parsing is checked on hand-built step stats; the sampling rule (the
largest in-use while an op ran) is checked against the allocator's own peak
on a real single-threaded step; `measure_memory` runs a tiny training step in
this process.
"""

import pytest
import tensorflow as tf
from tensorflow.core.framework import step_stats_pb2
from tensorflow.core.protobuf import config_pb2

from grappler_bridge import extract
from tf_gdp import errors
from tf_gdp.bench import memory_check
from tf_gdp.runtime import allocator_stats

_CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
_CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"
_MIB = 1 << 20


def _node(stats, name, *memory):
  node = stats.node_stats.add(node_name=name)
  for allocator, in_use, live, peak, total in memory:
    node.memory.add(allocator_name=allocator, allocator_bytes_in_use=in_use,
                    live_bytes=live, peak_bytes=peak, total_bytes=total)


def test_step_peaks_is_the_largest_in_use_while_an_op_ran():
  step = step_stats_pb2.StepStats()
  a = step.dev_stats.add(device="/job:worker/replica:0/task:0/device:CPU:0")
  _node(a, "no_allocation")
  # In use while it ran: 1000 at its end, less its 100 live, plus its 300 peak.
  _node(a, "matmul", ("bfc", 1000, 100, 300, 300))
  _node(a, "add", ("bfc", 1150, 50, 50, 50))
  b = step.dev_stats.add(device="/job:worker/replica:0/task:1/device:CPU:0")
  _node(b, "small", ("bfc", 500, 10, 10, 10), ("host", 700, 0, 20, 20))
  # A second entry for the same device (another partition) merges into it.
  b2 = step.dev_stats.add(device="/job:worker/replica:0/task:1/device:CPU:0")
  _node(b2, "late", ("bfc", 900, 0, 0, 0))

  peaks = allocator_stats.step_peaks(step)
  assert set(peaks) == {"/job:worker/replica:0/task:0/device:CPU:0",
                        "/job:worker/replica:0/task:1/device:CPU:0"}
  first = peaks["/job:worker/replica:0/task:0/device:CPU:0"]
  assert (first.allocator, first.peak_bytes, first.ops) == ("bfc", 1200, 2)
  second = peaks["/job:worker/replica:0/task:1/device:CPU:0"]
  assert (second.allocator, second.peak_bytes, second.ops) == ("bfc", 900, 2)


def test_an_allocator_without_statistics_is_named():
  step = step_stats_pb2.StepStats()
  stats = step.dev_stats.add(device=_CPU0)
  _node(stats, "op", ("cpu", 0, 4096, 4096, 4096))
  with pytest.raises(allocator_stats.NoStatistics, match="'cpu' of .*CPU:0"):
    allocator_stats.step_peaks(step)
  # A device whose other allocator keeps statistics is measured.
  _node(stats, "other", ("bfc", 8192, 4096, 4096, 4096))
  assert allocator_stats.step_peaks(step)[_CPU0].peak_bytes == 8192


def test_on_one_thread_the_sampled_peak_is_the_allocators_own_peak():
  # Tensors of 1 MiB and more: every CPU allocator of this TF counts them.
  with tf.Graph().as_default() as graph:
    with tf.device(_CPU0):
      x = tf.compat.v1.get_variable(
          "x", [8, 64, 64, 16], initializer=tf.compat.v1.ones_initializer())
      w = tf.compat.v1.get_variable(
          "w", [3, 3, 16, 32], initializer=tf.compat.v1.ones_initializer())
      y = tf.nn.conv2d(x, w, 1, "SAME")
      loss = tf.reduce_sum(tf.square(y))
      grad_x, grad_w = tf.gradients(loss, [x, w])
      total = (tf.reduce_sum(grad_x) + tf.reduce_sum(grad_w) +
               tf.sort(tf.reshape(y, [-1]))[0])
      init = tf.compat.v1.global_variables_initializer()
  config = config_pb2.ConfigProto(inter_op_parallelism_threads=1,
                                  intra_op_parallelism_threads=1)
  config.graph_options.rewrite_options.disable_meta_optimizer = True
  with tf.compat.v1.Session(graph=graph, config=config) as session:
    session.run(init)
    session.run(total)
    tf.config.experimental.reset_memory_stats("CPU:0")
    metadata = config_pb2.RunMetadata()
    session.run(total, options=config_pb2.RunOptions(
        trace_level=config_pb2.RunOptions.FULL_TRACE), run_metadata=metadata)
    exact = tf.config.experimental.get_memory_info("CPU:0")["peak"]
  sampled = allocator_stats.step_peaks(metadata.step_stats)[_CPU0]
  assert exact > 4 * _MIB  # the step's own tensors, not just the variables
  assert sampled.peak_bytes == exact


def _train_step():
  weights = tf.Variable(tf.fill([512, 512], 0.001), name="weights")  # 1 MiB

  @tf.function
  def step(x):
    y = tf.tanh(tf.matmul(x, weights))
    weights.assign_sub(0.1 * tf.matmul(x, y, transpose_a=True))
    return tf.reduce_sum(y)

  return extract.from_function(step, tf.ones([512, 512]))


def test_measure_memory_reads_peak_and_floor_of_a_local_step():
  extracted = _train_step()
  result = allocator_stats.measure_memory(
      extracted, {n.name: _CPU0 for n in extracted.graph_def.node}, "local",
      warmup=1, repeats=2)
  assert result.valid, result.reason
  assert set(result.devices) == {_CPU0}
  got = result.devices[_CPU0]
  assert len(got.step_peak_bytes) == 2 and got.peak_bytes == max(
      got.step_peak_bytes)
  assert got.floor_bytes >= _MIB  # the in-graph copy of the variable
  assert got.peak_bytes - got.floor_bytes >= 2 * _MIB  # fed x and y
  assert got.complete == (got.allocator != "mklcpu")
  assert not got.shared


def test_local_cpu_devices_share_one_allocator():
  extracted = _train_step()
  placement = {n.name: _CPU1 if n.op == "MatMul" else _CPU0
               for n in extracted.graph_def.node}
  result = allocator_stats.measure_memory(extracted, placement, "local",
                                          warmup=0, repeats=1)
  assert result.valid, result.reason
  assert set(result.devices) == {_CPU0, _CPU1}
  assert all(d.shared for d in result.devices.values())


def test_failures_are_invalid_and_bad_arguments_raise():
  extracted = _train_step()
  missing = allocator_stats.measure_memory(
      extracted, {n.name: "/job:localhost/replica:0/task:0/device:GPU:7"
                  for n in extracted.graph_def.node}, "local")
  assert not missing.valid and missing.devices == {}
  assert "GPU:7" in missing.reason
  with pytest.raises(errors.InputError, match="repeats"):
    allocator_stats.measure_memory(extracted, {}, "local", repeats=0)


def test_memory_check_rows_take_the_median_round_and_its_range():
  device = "/job:worker/replica:0/task:0/device:CPU:0"

  def round_with(peak, floor):
    return allocator_stats.MemoryMeasurement({
        device: allocator_stats.DeviceMemory(device, "bfc", peak, floor,
                                             (peak,), 10)})

  rounds = [round_with(100 * _MIB, 40 * _MIB), round_with(80 * _MIB, 40 * _MIB),
            round_with(90 * _MIB, 40 * _MIB),
            allocator_stats.MemoryMeasurement({}, valid=False, reason="oom")]
  row = memory_check._row("g", "single_device", 0, device, 99 * _MIB,
                          36 * _MIB, rounds)
  assert row["measured_peak_bytes"] == 90 * _MIB
  assert (row["measured_peak_min_bytes"], row["measured_peak_max_bytes"]) == (
      80 * _MIB, 100 * _MIB)
  assert row["ratio"] == pytest.approx(1.1)
  assert row["ratio_to_max"] == pytest.approx(0.99)
  assert row["persistent_ratio"] == pytest.approx(0.9)
  assert row["step_ratio"] == pytest.approx(63 / 50)
  assert row["measured_reasons"] == ["oom"]
  table = memory_check.format_table([{"rows": [row]}])
  assert "90.0 (80.0-100.0)" in table and "median 1.10" in table
  unmeasured = memory_check._row("g", "m", 1, "other", 5, 0, rounds)
  assert "ratio" not in unmeasured
  assert unmeasured["predicted_step_bytes"] == 5
