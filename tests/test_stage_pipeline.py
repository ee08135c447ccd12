"""The stage rules' own placements as the `stage_pipeline` baseline, and the
three pipeline and search baselines on a small zoo graph."""

import numpy as np
import pytest

from tf_gdp import baselines
from tf_gdp import graph_specs
from tf_gdp.baselines import stage_pipeline
from tf_gdp.cost import simulator
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph
from tf_gdp.graph import scopes

GIB = 1 << 30
_TINY_GNMT = ("gnmt:hidden_size=8:vocab_size=20:batch=2:source_length=3:"
              "target_length=3")


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
  found = stage_pipeline.rule_placements(_grid_graph(), _two_gpus_and_cpu())
  assert set(found) == {"latest_input", "neighbour_median", "inner_major"}
  # One level: layer i on GPU i; the CPU-only op stays on the CPU and the
  # colocated unnumbered op follows layer 0.
  np.testing.assert_array_equal(found["latest_input"], [0, 1, 0, 1, 2, 0])
  # Segment-major over 2 GPUs: stages 0, 1/3 -> GPU 0, 2/3, 1 -> GPU 1.
  np.testing.assert_array_equal(found["inner_major"], [0, 0, 1, 1, 2, 0])


def test_the_pull_is_the_policy_stage_direction():
  from tf_gdp.policy import devices  # pylint: disable=g-import-not-at-top
  from tf_gdp.policy import features  # pylint: disable=g-import-not-at-top
  graph, topo = _grid_graph(), topology.get("p100x4")
  inputs = features.policy_inputs(graph, topo)
  for r, rule in enumerate(scopes.STAGE_RULES):
    stage, known = scopes.stage_coordinates(
        graph.node_names, graph.edge_src, graph.edge_dst, graph.topo_order,
        rule=rule)
    pair = inputs.stage_features[None, :, 2 * r:2 * r + 2]
    policy_pull = devices.stage_direction(
        pair, inputs.device_features[None], inputs.device_mask[None]).numpy()
    np.testing.assert_allclose(
        stage_pipeline.stage_pull(stage, known, topo)[inputs.order],
        policy_pull[0, :graph.num_nodes], atol=1e-6)


def test_a_pipeline_push_targets_the_rule_placement():
  from tf_gdp.policy import devices  # pylint: disable=g-import-not-at-top
  from tf_gdp.policy import features  # pylint: disable=g-import-not-at-top
  graph = _grid_graph()
  for topo in (topology.get("p100x4"), topology.get("p100x3")):
    inputs = features.policy_inputs(graph, topo)
    found = stage_pipeline.rule_placements(graph, topo)
    for r, rule in enumerate(scopes.STAGE_RULES):
      pair = inputs.stage_features[None, :, 2 * r:2 * r + 2]
      target = devices.stage_target(
          pair, inputs.device_features[None], inputs.device_mask[None])
      target = target.numpy()[0, :graph.num_nodes]
      assert set(np.unique(target.sum(-1))) <= {0.0, 1.0}
      # Where the pulled device is allowed (not the CPU-only op).
      groups = inputs.group_ids[:graph.num_nodes]
      pulled = (target.sum(-1) > 0) & inputs.allowed[
          groups, target.argmax(-1)]
      assert pulled.sum() >= 4
      np.testing.assert_array_equal(
          target.argmax(-1)[pulled], found[rule][inputs.order][pulled])


def test_without_stages_it_falls_back_and_says_so():
  graph = op_graph.OpGraph.build(
      name="flat", node_names=["a", "b"], op_types=["MatMul"] * 2,
      costs={"GPU": np.full(2, 10.0), "CPU": np.full(2, 50.0)},
      output_bytes=np.full(2, 1 << 10), memory_bytes=np.zeros(2, int),
      edge_src=[0], edge_dst=[1], edge_bytes=[1 << 10])
  assert stage_pipeline.rule_placements(graph, _two_gpus_and_cpu()) == {}
  result = baselines.run("stage_pipeline", graph, _two_gpus_and_cpu())
  assert result.info["fallback"].startswith("m_topo")
  np.testing.assert_array_equal(
      result.placement,
      baselines.run("m_topo", graph, _two_gpus_and_cpu()).placement)


@pytest.fixture(scope="module")
def zoo_graph():
  return graph_specs.parse(_TINY_GNMT)[0].load("p100x4").graph


def test_stage_pipeline_returns_the_best_rule_on_a_zoo_graph(zoo_graph):
  topo = topology.get("p100x4")
  found = stage_pipeline.rule_placements(zoo_graph, topo)
  assert found
  result = baselines.run("stage_pipeline", zoo_graph, topo)
  best = min(found, key=lambda r: simulator.simulate(
      zoo_graph, found[r], topo).step_time_us)
  assert result.info["rule"] == best
  np.testing.assert_array_equal(result.placement, found[best])
  assert result.evaluations == len(found)


@pytest.mark.parametrize("method", ["stage_pipeline", "contiguous_dp",
                                    "local_search"])
@pytest.mark.parametrize("devices", ["p100x2", "p100x4"])
def test_a_valid_placement_on_a_zoo_graph(zoo_graph, method, devices):
  topo = topology.get(devices)
  result = baselines.run(method, zoo_graph, topo, seed=0,
                         **({"evaluations": 120} if method == "local_search"
                            else {}))
  assert simulator.simulate(zoo_graph, result.placement, topo).valid
  assert not result.info["memory_problems"]
  assert result.evaluations > 0
