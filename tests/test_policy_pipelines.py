"""The stage rules' own placements (the reference beside GDP)."""

import numpy as np

from tf_gdp.cost import topology
from tf_gdp.graph import op_graph
from tf_gdp.policy import pipelines

GIB = 1 << 30


def _two_gpus_and_cpu():
  kinds = ["GPU", "GPU", "CPU"]
  devices = [topology.Device(f"/job:localhost/replica:0/task:0/device:{k}:"
                             f"{i if k == 'GPU' else 0}", k, 16 * GIB)
             for i, k in enumerate(kinds)]
  return topology.custom("gpus2", devices, np.full((3, 3), 12.0),
                         np.full((3, 3), 10.0))


def _grid_graph():
  """layer_i/segment_j/op for 2 x 2 blocks (a chain per segment), a
  CPU-only op in layer_1, and layer 0's two ops of segment 0 colocated
  with an unnumbered op."""
  names = ["layer_0/segment_0/a", "layer_1/segment_0/a",
           "layer_0/segment_1/a", "layer_1/segment_1/a",
           "layer_1/segment_1/cpu_only", "glue"]
  n = len(names)
  kinds = [("CPU",) if i == 4 else None for i in range(n)]
  groups = ["g" if i in (0, 5) else None for i in range(n)]
  edges = [(0, 1), (2, 3), (0, 2), (1, 3), (3, 4), (5, 0)]
  return op_graph.OpGraph.build(
      name="grid", node_names=names, op_types=["MatMul"] * n,
      costs={"GPU": np.full(n, 10.0), "CPU": np.full(n, 50.0)},
      output_bytes=np.full(n, 1 << 10), memory_bytes=np.zeros(n, int),
      edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
      edge_bytes=np.full(len(edges), 1 << 10), colocation_groups=groups,
      device_kinds=kinds)


def test_each_rule_sends_its_stages_to_their_devices():
  found = pipelines.stage_placements(_grid_graph(), _two_gpus_and_cpu())
  assert set(found) == {"latest_input", "neighbour_median", "inner_major"}
  # One level: layer i on GPU i; the CPU-only op stays on the CPU and the
  # colocated unnumbered op follows layer 0.
  np.testing.assert_array_equal(found["latest_input"], [0, 1, 0, 1, 2, 0])
  # Segment-major over 2 GPUs: stages 0, 1/3 -> GPU 0, 2/3, 1 -> GPU 1.
  np.testing.assert_array_equal(found["inner_major"], [0, 0, 1, 1, 2, 0])


def test_rules_without_stages_are_left_out():
  graph = op_graph.OpGraph.build(
      name="flat", node_names=["a", "b"], op_types=["MatMul"] * 2,
      costs={"GPU": np.full(2, 10.0), "CPU": np.full(2, 50.0)},
      output_bytes=np.full(2, 1 << 10), memory_bytes=np.zeros(2, int),
      edge_src=[0], edge_dst=[1], edge_bytes=[1 << 10])
  assert pipelines.stage_placements(graph, _two_gpus_and_cpu()) == {}
