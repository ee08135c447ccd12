"""critical_path_order: ready ops run longest remaining path first."""

import numpy as np

from tf_gdp.baselines import critical_path_order
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


def _fork():
  """`long` (100 us, nothing after it) and `feeder` (10 us) on GPU 0;
  `feeder` feeds `far` (100 us) on GPU 1. Topological order runs `long`
  first (lower id), so `far` waits for it."""
  return op_graph.OpGraph.build(
      name="fork", node_names=["long", "feeder", "far"],
      op_types=["MatMul"] * 3, costs={"GPU": np.array([100.0, 10.0, 100.0])},
      output_bytes=np.full(3, 1024), memory_bytes=np.zeros(3, np.int64),
      edge_src=[1], edge_dst=[2], edge_bytes=[1024])


def test_the_op_with_the_longer_path_runs_first():
  graph, topology = _fork(), topology_lib.get("p100x2")
  placement = np.array([0, 0, 1])
  rank = critical_path_order.priority(graph, topology, placement)
  assert rank[1] < rank[0]  # `feeder` before `long`
  default = simulator.simulate(graph, placement, topology).step_time_us
  ordered = critical_path_order.simulate(graph, topology, placement)
  assert default > 200.0  # `far` started after `long` and `feeder`
  assert ordered.step_time_us < 120.0 + topology.latency_us[0, 1]
  assert ordered.step_time_us < default


def test_on_one_device_the_order_changes_nothing():
  graph, topology = _fork(), topology_lib.get("p100x2")
  placement = np.zeros(3, np.int64)
  ordered = critical_path_order.simulate(graph, topology, placement)
  assert ordered.step_time_us == simulator.simulate(
      graph, placement, topology).step_time_us
