"""Policy inputs: topological layout, padding, masks, constraints, specs."""

from unittest import mock

import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp.baselines import heft
from tf_gdp.baselines import m_etf
from tf_gdp.baselines import m_sct
from tf_gdp.baselines import side_offload
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph
from tf_gdp.policy import feature_columns
from tf_gdp.policy import features
from tf_gdp.policy import push_placements

GIB = 1 << 30


def _graph(n, edges, *, groups=None, kinds=None, pins=None, op_types=None,
           memory=None):
  """Nodes n0..n{n-1}; edges (src, dst, bytes) with bytes < 0 meaning control."""
  return op_graph.OpGraph.build(
      name="t", node_names=[f"n{i}" for i in range(n)],
      op_types=op_types or ["MatMul"] * n,
      costs={"GPU": np.arange(1, n + 1, dtype=float),
             "CPU": 10.0 * np.arange(1, n + 1)},
      output_bytes=[1000 * (i + 1) for i in range(n)],
      memory_bytes=memory if memory is not None else [0] * n,
      edge_src=[e[0] for e in edges], edge_dst=[e[1] for e in edges],
      edge_bytes=[max(e[2], 0) for e in edges],
      edge_output=[-1 if e[2] < 0 else 0 for e in edges],
      colocation_groups=groups, device_kinds=kinds, pinned_devices=pins)


def _topo(kinds=("GPU", "GPU")):
  d = len(kinds)
  devices = [topology.Device(f"/job:w/replica:0/task:0/device:{k}:{i}", k,
                             16 * GIB) for i, k in enumerate(kinds)]
  return topology.custom("test", devices, np.full((d, d), 12.0),
                         np.full((d, d), 10.0))


# A chain written "backwards": node ids are the reverse of the flow.
_BACKWARDS_CHAIN = [(3, 2, 100), (2, 1, 100), (1, 0, -1)]


def test_nodes_are_in_topological_order_and_edges_use_positions():
  graph = _graph(4, _BACKWARDS_CHAIN)
  inputs = features.policy_inputs(graph, _topo())
  assert inputs.order.tolist() == [3, 2, 1, 0]
  assert inputs.edge_src.tolist() == [0, 1, 2]
  assert inputs.edge_dst.tolist() == [1, 2, 3]
  control = features.EDGE_FEATURE_NAMES.index("is_control")
  assert inputs.edge_features[:, control].tolist() == [0, 0, 1]
  depth = features.NODE_FEATURE_NAMES.index("depth")
  height = features.NODE_FEATURE_NAMES.index("height")
  np.testing.assert_allclose(inputs.node_features[:, depth], [0, 1 / 3, 2 / 3, 1])
  np.testing.assert_allclose(inputs.node_features[:, height], [1, 2 / 3, 1 / 3, 0])
  # Cost columns follow the order too: n3 (cost 4) comes first.
  fastest = features.NODE_FEATURE_NAMES.index("log_cost_fastest")
  assert np.all(np.diff(inputs.node_features[:, fastest]) < 0)


def test_exact_sizes_have_all_masks_true():
  inputs = features.policy_inputs(_graph(4, _BACKWARDS_CHAIN), _topo())
  assert (inputs.max_nodes, inputs.max_edges, inputs.max_groups,
          inputs.max_devices) == (4, 3, 4, 2)
  for mask in (inputs.node_mask, inputs.edge_mask, inputs.group_mask,
               inputs.device_mask):
    assert mask.all()
  assert inputs.allowed.all()


def test_padding_is_masked_and_points_at_padding_slots():
  inputs = features.policy_inputs(_graph(4, _BACKWARDS_CHAIN), _topo(),
                                  max_nodes=6, max_edges=5, max_groups=7,
                                  max_devices=4)
  assert inputs.node_mask.tolist() == [True] * 4 + [False] * 2
  assert inputs.edge_mask.tolist() == [True] * 3 + [False] * 2
  assert inputs.group_mask.tolist() == [True] * 4 + [False] * 3
  assert inputs.device_mask.tolist() == [True] * 2 + [False] * 2
  assert inputs.edge_src[3:].tolist() == [5, 5]
  assert inputs.edge_dst[3:].tolist() == [5, 5]
  assert inputs.group_ids[4:].tolist() == [6, 6]
  assert not inputs.node_features[4:].any()
  assert not inputs.device_features[2:].any()
  assert inputs.op_type_ids[4:].tolist() == [0, 0]
  assert (inputs.op_type_ids[:4] > 0).all()
  assert inputs.allowed[:4].tolist() == [[True, True, False, False]] * 4
  assert inputs.allowed[4:].tolist() == [[True, False, False, False]] * 3


def test_groups_are_dense_in_topological_order_and_allow_only_shared_devices():
  # n0 -> n1 -> n2 -> n3; n0 and n3 share a group; n1 is CPU-only; n2 pinned.
  graph = _graph(4, [(0, 1, 8), (1, 2, 8), (2, 3, 8)],
                 groups=["g", None, None, "g"],
                 kinds=[None, ("CPU",), None, ("GPU",)],
                 pins=[None, None, "/device:GPU:1", None])
  inputs = features.policy_inputs(graph, _topo(("GPU", "GPU", "CPU")))
  assert inputs.num_groups == 3
  assert inputs.group_ids.tolist() == [0, 1, 2, 0]
  assert inputs.allowed.tolist() == [[True, True, False],
                                     [False, False, True],
                                     [False, True, False]]
  pinned = features.NODE_FEATURE_NAMES.index("is_pinned")
  assert inputs.node_features[:, pinned].tolist() == [0, 0, 1, 0]


def test_group_to_node_placement_maps_back_to_original_ids():
  graph = _graph(4, _BACKWARDS_CHAIN, groups=["a", None, "a", None])
  inputs = features.policy_inputs(graph, _topo(), max_groups=5)
  # positions: n3, n2, n1, n0 -> groups: n3 first (0), n2 is "a" (1), n1 (2).
  assert inputs.group_ids[:4].tolist() == [0, 1, 2, 1]
  placement = features.group_to_node_placement(inputs, np.array([1, 0, 1, 0, 0]))
  assert placement.dtype == np.int32
  assert placement.tolist() == [0, 1, 0, 1]  # n0 and n2 ("a") share device 0
  with pytest.raises(errors.InputError, match="device 2"):
    features.group_to_node_placement(inputs, np.array([2, 0, 0]))
  with pytest.raises(errors.InputError, match="2 group devices for 3"):
    features.group_to_node_placement(inputs, np.array([0, 0]))


def test_tensors_match_the_observation_spec():
  inputs = features.policy_inputs(_graph(4, _BACKWARDS_CHAIN), _topo(),
                                  max_nodes=8, max_edges=8, max_groups=8,
                                  max_devices=4)
  tensors = features.as_tensors(inputs)
  spec = features.observation_spec(8, 8, 8, 4)
  assert tuple(tensors) == features.OBSERVATION_KEYS == tuple(spec)
  for name, (shape, dtype) in spec.items():
    assert tensors[name].shape == shape, name
    assert tensors[name].dtype == dtype, name
  assert int(tensors["num_nodes"]) == 4 and int(tensors["num_devices"]) == 2


def test_features_are_finite_and_of_order_one_on_a_real_graph():
  rng = np.random.default_rng(0)
  n = 300
  edges = {(int(a), int(b)) for a, b in rng.integers(0, n, (900, 2)) if a < b}
  graph = op_graph.OpGraph.build(
      name="random", node_names=[f"n{i}" for i in range(n)],
      op_types=[f"Op{i % 17}" for i in range(n)],
      costs={"GPU": rng.exponential(50.0, n), "CPU": rng.exponential(500.0, n)},
      output_bytes=rng.integers(0, 1 << 28, n),
      memory_bytes=rng.integers(0, 1 << 26, n),
      edge_src=[a for a, _ in sorted(edges)],
      edge_dst=[b for _, b in sorted(edges)],
      edge_bytes=rng.integers(0, 1 << 28, len(edges)))
  inputs = features.policy_inputs(graph, topology.get("v100x8"))
  for array in (inputs.node_features, inputs.edge_features,
                inputs.device_features):
    assert np.isfinite(array).all()
    assert np.abs(array).max() < 5.0
  # Identical GPUs still get distinct device features.
  gpus = inputs.device_features[:8]
  assert len({row.tobytes() for row in gpus}) == 8


def test_op_type_ids_are_stable_hashes_in_the_vocabulary():
  assert features.op_type_id("MatMul") == features.op_type_id("MatMul")
  ids = {features.op_type_id(f"SomeOp{i}") for i in range(50)}
  assert all(1 <= i < features.OP_VOCAB for i in ids)
  assert len(ids) > 45


@pytest.mark.parametrize("sizes, label", [
    (dict(max_nodes=3), "4 nodes"), (dict(max_edges=2), "3 edges"),
    (dict(max_groups=3), "4 groups"), (dict(max_devices=1), "2 devices")])
def test_too_large_for_the_maxima_is_a_clear_error(sizes, label):
  with pytest.raises(errors.InputError, match=f"has {label}, more than"):
    features.policy_inputs(_graph(4, _BACKWARDS_CHAIN), _topo(), **sizes)


def test_group_without_a_common_device_is_a_clear_error():
  graph = _graph(2, [(0, 1, 8)], groups=["g", "g"],
                 kinds=[("CPU",), ("GPU",)])
  with pytest.raises(errors.InputError, match="all members of its group"):
    features.policy_inputs(graph, _topo(("GPU", "CPU")))


def test_empty_graph_is_a_clear_error():
  graph = _graph(0, [])
  with pytest.raises(errors.InputError, match="no ops"):
    features.policy_inputs(graph, _topo())


def test_longest_paths_match_a_dynamic_program_on_random_dags():
  rng = np.random.default_rng(5)
  for n in (1, 7, 60):
    pairs = rng.integers(0, n, (3 * n, 2))
    src, dst = pairs.min(1), pairs.max(1)
    keep = src < dst
    src, dst = src[keep], dst[keep]
    want = np.zeros(n, int)
    for v in range(n):  # ids are a topological order here
      preds = src[dst == v]
      if preds.size:
        want[v] = want[preds].max() + 1
    got = feature_columns.longest_path_lengths(n, src, dst)
    np.testing.assert_array_equal(got, want)


def test_placement_pushes_cut_parallel_branches_and_follow_m_etf():
  # Two chains of equal work joined at a sink that may only run on the
  # CPU: a balanced cut gives each chain a GPU, the CPU-only op no part.
  edges = [(0, 1, 1000), (1, 2, 1000), (3, 4, 1000), (4, 5, 1000),
           (2, 6, 10), (5, 6, 10)]
  kinds = [None] * 6 + [["CPU"]]
  graph = op_graph.OpGraph.build(
      name="branches", node_names=[f"n{i}" for i in range(7)],
      op_types=["MatMul"] * 7,
      costs={"GPU": [5.0] * 7, "CPU": [50.0] * 7},
      output_bytes=[1000] * 7, memory_bytes=[0] * 7,
      edge_src=[e[0] for e in edges], edge_dst=[e[1] for e in edges],
      edge_bytes=[e[2] for e in edges], device_kinds=kinds)
  topology = _topo(("GPU", "GPU", "CPU"))
  inputs = features.policy_inputs(graph, topology)
  assert push_placements.PUSHES == ("metis_cut", "m_etf", "side_offload",
                                    "contiguous_split", "heft", "m_sct",
                                    "one_device")
  by_node = np.zeros((7, 14), np.float32)
  by_node[inputs.order] = inputs.placement_features[:inputs.num_nodes]
  assert by_node[:6, 1].tolist() == [1.0] * 6 and by_node[6, 1] == 0.0
  first, second = by_node[:3, 0], by_node[3:6, 0]
  assert len(set(first)) == 1 and len(set(second)) == 1
  assert {first[0], second[0]} == {0.0, 1.0}
  # m-ETF's schedule: each op's device index, the CPU's included.
  scheduled = m_etf.place(graph, topology)
  assert scheduled[6] == 2
  np.testing.assert_array_equal(by_node[:, 3], np.ones(7))
  np.testing.assert_array_equal(by_node[:, 2], scheduled)
  # The side-branch offload: both chains feed the sink, so all is spine and
  # stays on the first GPU (the CPU-only sink on the CPU).
  offloaded = side_offload.place(graph, topology)
  np.testing.assert_array_equal(offloaded, [0] * 6 + [2])
  np.testing.assert_array_equal(by_node[:, 5], np.ones(7))
  np.testing.assert_array_equal(by_node[:, 4], offloaded)
  # The fewest contiguous stages: everything fits the first GPU (the
  # CPU-only sink goes where it must).
  np.testing.assert_array_equal(by_node[:, 7], np.ones(7))
  np.testing.assert_array_equal(by_node[:, 6], [0] * 6 + [2])
  # HEFT's schedule, as m-ETF's.
  np.testing.assert_array_equal(by_node[:, 9], np.ones(7))
  np.testing.assert_array_equal(by_node[:, 8], heft.place(graph, topology))
  # m-SCT's schedule, as m-ETF's.
  np.testing.assert_array_equal(by_node[:, 11], np.ones(7))
  np.testing.assert_array_equal(by_node[:, 10], m_sct.place(graph, topology))
  # One device: the memory estimate says the step fits the first GPU, so
  # the fewest stages push that placement already and this one is absent.
  assert not by_node[:, 12:14].any()
  # Above its op limit m-SCT's LP is not run for a push.
  with mock.patch.object(push_placements, "M_SCT_MAX_OPS", 6):
    assert (push_placements.devices("m_sct", graph, topology) == -1).all()
  # One primary device: nothing to cut, and m-SCT is m-ETF.
  alone = features.policy_inputs(graph, _topo(("GPU", "CPU")))
  assert not alone.placement_features[:, :2].any()
  assert not alone.placement_features[:, 10:12].any()
  assert alone.placement_features[:, 3].all()


def test_a_placement_that_does_not_exist_pushes_no_op():
  # One op needs more memory than any device has: m-ETF finds no room, so
  # its push is absent (flag 0) while the cut still splits the chain.
  graph = op_graph.OpGraph.build(
      name="too_big", node_names=["a", "b", "c", "d"], op_types=["MatMul"] * 4,
      costs={"GPU": [5.0] * 4}, output_bytes=[1000] * 4,
      memory_bytes=[0, 40 * GIB, 0, 0], edge_src=[0, 1, 2], edge_dst=[1, 2, 3],
      edge_bytes=[1000] * 3)
  topology = _topo()
  with pytest.raises(errors.InputError):
    m_etf.place(graph, topology)
  inputs = features.policy_inputs(graph, topology)
  placed = inputs.placement_features[:inputs.num_nodes]
  with pytest.raises(errors.InputError):
    heft.place(graph, topology)
  # Nor do the offload, the fewest stages and HEFT.
  assert not placed[:, 2:].any()
  assert placed[:, 1].all()
