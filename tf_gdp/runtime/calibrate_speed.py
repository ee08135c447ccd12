"""Each `cpu-workers:K` worker's speed against the roofline.

The roofline (`local_cpu_core`) prices two calibration graphs, training
steps unlike the ones benchmarks use; each is timed on every worker in turn,
and per worker the geometric mean of roofline / (measured - trivial step
time) becomes that device's `speed` in the calibrated topology
(`calibrate`).
"""

from typing import Dict, List

import numpy as np

from grappler_bridge import tf_env

from tf_gdp.cost import topology as topology_lib


_tf = tf_env.import_tensorflow


def calibration_graphs():
  """Training steps unlike the benchmark graphs' (name -> ExtractedGraph).

  Each takes tens of milliseconds on one core, so that the fixed cost of a
  step (RPCs, executor start) is a small correction, and uses layer sizes
  typical of real models (oneDNN is less efficient on tiny channel counts,
  which is not what a speed factor should capture).
  """
  tf = _tf()
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  rng = tf.random.Generator.from_seed(7)
  graphs = {}

  weights = [tf.Variable(rng.uniform([768, 768], -0.05, 0.05),
                         name=f"mm{i}") for i in range(5)]
  inputs = tf.Variable(rng.uniform([192, 768], -1.0, 1.0), name="mm_x")

  graphs["matmul_tanh_mlp"] = extract.from_function(_sgd_step(
      tf, inputs, weights, lambda h, w: tf.tanh(tf.matmul(h, w))))

  kernels = [tf.Variable(rng.uniform([3, 3, 48, 48], -0.05, 0.05),
                         name=f"conv{i}") for i in range(3)]
  images = tf.Variable(rng.uniform([8, 24, 24, 48], -1.0, 1.0),
                       name="conv_x")

  graphs["conv_relu_stack"] = extract.from_function(_sgd_step(
      tf, images, kernels, lambda h, k: tf.nn.relu(tf.nn.conv2d(h, k, 1,
                                                                "SAME"))))
  return graphs


def _sgd_step(tf, inputs, variables, layer):
  """A training step: `layer(h, v)` per variable, squared loss, SGD."""

  def step():
    with tf.GradientTape() as tape:
      h = inputs
      for variable in variables:
        h = layer(h, variable)
      loss = tf.reduce_mean(tf.square(h))
    grads = tape.gradient(loss, variables)
    for variable, grad in zip(variables, grads):
      variable.assign_sub(0.01 * grad)
    return loss

  return step


def measure_speed(cluster, *, step_overhead_us: float = 0.0,
                  repeats: int = 7) -> Dict[str, Dict[str, float]]:
  """Roofline / measured time of each calibration graph on every worker.

  The simulator adds a step's fixed cost itself (the topology's runtime),
  so `step_overhead_us` (a trivial step's time,
  `calibrate_runtime.measure_step_overhead`) is taken off the measured time
  before the ratio. The workers are measured in turn per graph: they are
  not alike (worker 0 also hosts the session's master, and the client's
  process lands on either core), up to 10% apart on this machine, though
  not always the same way round. Per graph: `roofline_us`,
  `measured_us` and `speed` on worker 0, and `measured_us_by_worker` and
  `speed_by_worker` for every worker.
  """
  from tf_gdp.runtime import measure as measure_lib  # pylint: disable=g-import-not-at-top
  from tf_gdp import graph_specs  # pylint: disable=g-import-not-at-top
  label = f"{topology_lib.CPU_WORKERS}:{cluster.num_workers}"
  result = {}
  for name, extracted in calibration_graphs().items():
    graph = graph_specs.op_graph_from_extracted(extracted, name=name,
                                                devices=label)
    roofline_us = float(np.sum(graph.costs["CPU"]))
    measured_us = []
    for device in cluster.device_names:
      placement = {node: device for node in graph.node_names}
      measured = measure_lib.measure(extracted, placement, cluster,
                                     warmup=3, repeats=repeats)
      if not measured.valid:
        raise RuntimeError(f"calibration graph {name} failed on {device}: "
                           f"{measured.reason}")
      measured_us.append(measured.step_time_us)
    speeds = [roofline_us / max(us - step_overhead_us, 1.0)
              for us in measured_us]
    result[name] = {"roofline_us": roofline_us,
                    "measured_us": measured_us[0], "speed": speeds[0],
                    "measured_us_by_worker": measured_us,
                    "speed_by_worker": speeds}
  return result


def worker_speeds(compute: Dict[str, Dict[str, float]]) -> List[float]:
  """Each worker's speed: the geometric mean over the calibration graphs."""
  by_graph = np.array([v["speed_by_worker"] for v in compute.values()])
  return np.exp(np.mean(np.log(by_graph), axis=0)).tolist()
