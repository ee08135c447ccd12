"""contiguous_dp: forward/backward ownership, the DP's split, constraints."""

import numpy as np
import pytest

from tf_gdp import baselines
from tf_gdp.baselines import contiguous_dp
from tf_gdp.cost import simulator
from tf_gdp.cost import topology
from tf_gdp.graph import generators
from tf_gdp.graph import layer_order
from tf_gdp.graph import op_graph

GIB = 1 << 30
MIB = 1 << 20


def _topo(count=2, memory=GIB):
  devices = [topology.Device(f"/job:w/replica:0/task:0/device:GPU:{i}", "GPU",
                             memory) for i in range(count)]
  return topology.custom("gpus", devices, np.full((count, count), 10.0),
                         np.full((count, count), 1.0))


def _training_chain(length=10, memory=0):
  """f0 -> ... -> f{L-1}, then its gradients back and one update per op."""
  names = [f"f{i}/op" for i in range(length)]
  names += [f"gradient_tape/f{i}/op_grad" for i in reversed(range(length))]
  names += [f"f{i}/update" for i in range(length)]
  types = ["MatMul"] * (2 * length) + ["ResourceApplyGradientDescent"] * length
  edges = [(i, i + 1) for i in range(length - 1)]
  edges += [(length - 1, length)]
  edges += [(length + i, length + i + 1) for i in range(length - 1)]
  edges += [(2 * length - 1 - i, 2 * length + i) for i in range(length)]
  n = 3 * length
  return op_graph.OpGraph.build(
      name="chain", node_names=names, op_types=types,
      costs={"GPU": np.full(n, 10.0)}, output_bytes=np.full(n, 1000),
      memory_bytes=[memory] * length + [0] * (2 * length),
      edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
      edge_bytes=np.full(len(edges), 1000))


def test_backward_and_update_ops_follow_their_forward_op():
  graph = _training_chain(4)
  backward = layer_order.backward_ops(graph)
  np.testing.assert_array_equal(backward, [False] * 4 + [True] * 8)
  order = layer_order.forward_order(graph, backward)
  np.testing.assert_array_equal(order, range(4))
  owner = layer_order.owners(graph, backward, order)
  np.testing.assert_array_equal(owner[:4], range(4))
  np.testing.assert_array_equal(owner[4:8], [3, 2, 1, 0])  # by name
  np.testing.assert_array_equal(owner[8:], [0, 1, 2, 3])  # by name scope


def test_a_chain_of_equal_ops_on_two_devices_is_split_in_the_middle():
  result = baselines.run("contiguous_dp", _training_chain(10), _topo(2))
  splits = {s["stages"]: s["bounds"] for s in result.info["splits"]}
  assert splits[2] == [5, 10]


def test_memory_forces_the_middle_split_and_backward_follows():
  # Five layers' variables fit on a device, six do not.
  graph = _training_chain(10, memory=100 * MIB)
  result = baselines.run("contiguous_dp", graph, _topo(2, memory=600 * MIB))
  placement = result.placement
  assert len(set(placement[:5])) == 1 and len(set(placement[5:10])) == 1
  assert placement[0] != placement[9]
  np.testing.assert_array_equal(placement[10:20], placement[9::-1])
  np.testing.assert_array_equal(placement[20:], placement[:10])
  assert simulator.simulate(graph, placement, _topo(2, memory=600 * MIB)).valid


@pytest.mark.parametrize("devices", ["p100x2", "p100x4"])
@pytest.mark.parametrize("make", [
    lambda: generators.random_layered_graph(300, width=20, seed=1),
    lambda: generators.random_cells_graph(300, seed=2)])
def test_a_valid_placement_on_generated_graphs(devices, make):
  graph, topo = make(), topology.get(devices)
  result = baselines.run("contiguous_dp", graph, topo)
  assert simulator.simulate(graph, result.placement, topo).valid
  assert result.evaluations == 1 + len(result.info["splits"])


def test_many_forward_ops_use_candidate_cuts():
  graph = generators.random_layered_graph(400, width=4, seed=3)
  small = baselines.run("contiguous_dp", graph, _topo(4), max_cuts=16)
  assert all(len(s["bounds"]) == s["stages"] for s in small.info["splits"])
  assert simulator.simulate(graph, small.placement, _topo(4)).valid



def test_fewest_stages_is_one_device_when_the_step_fits_and_judges_nothing(
    monkeypatch):
  def refuse(*args, **kwargs):
    raise AssertionError("a push must not judge placements")
  monkeypatch.setattr(simulator, "simulate_batch", refuse)
  placement = contiguous_dp.fewest_stages(
      _training_chain(10, memory=10 * MIB), _topo(4))
  assert len(set(placement.tolist())) == 1


def test_fewest_stages_cuts_only_as_often_as_memory_needs():
  # Four layers' variables fit on a device, five do not: ten layers need
  # three of the four devices, each a contiguous run of whole layers with
  # its gradients and updates.
  graph = _training_chain(10, memory=100 * MIB)
  topo = _topo(4, memory=500 * MIB)
  placement = contiguous_dp.fewest_stages(graph, topo)
  forward = placement[:10]
  assert len(set(forward.tolist())) == 3
  assert (np.diff(forward) >= 0).all()
  np.testing.assert_array_equal(placement[10:20], forward[::-1])
  np.testing.assert_array_equal(placement[20:], forward)
  assert simulator.simulate(graph, placement, topo).valid


def test_one_device_beyond_the_estimate_is_pushed_when_the_judge_finds_room():
  # Ten layers' 1,000 MiB of variables: over the estimate's budget for a
  # 1,050 MiB device (its headroom), yet the step fits there when simulated.
  graph = _training_chain(10, memory=100 * MIB)
  tight = _topo(2, memory=1050 * MIB)
  staged = contiguous_dp.fewest_stages(graph, tight)
  assert len(set(staged.tolist())) == 2
  alone = contiguous_dp.one_stage_beyond_estimate(graph, tight)
  np.testing.assert_array_equal(alone, np.zeros(graph.num_nodes))
  assert simulator.simulate(graph, alone, tight).valid
  # Where the estimate says the step fits, the fewest stages are this
  # placement already and the push is absent.
  roomy = _topo(2, memory=2000 * MIB)
  assert len(set(contiguous_dp.fewest_stages(graph, roomy).tolist())) == 1
  assert (contiguous_dp.one_stage_beyond_estimate(graph, roomy) == -1).all()
