"""side_offload: the spine stays, weight-gradient branches move when worth it."""

import dataclasses

import numpy as np
import pytest

from tf_gdp import baselines
from tf_gdp import errors
from tf_gdp.baselines import side_offload
from tf_gdp.cost import simulator
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph

GIB = 1 << 30
GB_PER_S = 1.0  # 1000 bytes per us


def _topo(count=4):
  devices = [topology.Device(f"/job:w/replica:0/task:0/device:GPU:{i}", "GPU",
                             GIB) for i in range(count)]
  return topology.custom("gpus", devices, np.full((count, count), GB_PER_S),
                         np.full((count, count), 1.0))


def _training_step(layers=4, weight_grad_us=100.0, activation_bytes=1000,
                   cpu_only_weight_grad=None):
  """A chain of layers, its activation gradients back, and per layer a
  weight gradient (reading the layer's input and output gradient) feeding
  an update that also reads one shared learning-rate scalar."""
  names, types, costs, kinds = [], [], [], []
  edges = []

  def add(name, op_type, cost, kind=None):
    names.append(name)
    types.append(op_type)
    costs.append(cost)
    kinds.append(kind)
    return len(names) - 1

  def edge(src, dst, nbytes=activation_bytes):
    edges.append((src, dst, nbytes))

  inputs = add("input", "Placeholder", 1.0)
  rate = add("learning_rate", "Const", 1.0)
  forward = []
  previous = inputs
  for i in range(layers):
    forward.append(add(f"layer{i}/MatMul", "MatMul", 50.0))
    edge(previous, forward[-1])
    previous = forward[-1]
  loss = add("loss", "Sum", 10.0)
  edge(previous, loss)
  grad = loss
  for i in reversed(range(layers)):
    below = inputs if i == 0 else forward[i - 1]
    kind = ("CPU",) if i == cpu_only_weight_grad else None
    weight = add(f"gradients/layer{i}/MatMul_grad/MatMul_1", "MatMul",
                 weight_grad_us, kind)
    edge(below, weight)
    edge(grad, weight)
    update = add(f"layer{i}/update", "ResourceApplyGradientDescent", 5.0,
                 kind)
    edge(weight, update, 2 * side_offload.SMALL_TENSOR_BYTES)
    edge(rate, update, 4)
    if i:
      grad_in = add(f"gradients/layer{i}/MatMul_grad/MatMul", "MatMul", 50.0)
      edge(grad, grad_in)
      grad = grad_in
  n = len(names)
  src, dst, nbytes = zip(*edges)
  return op_graph.OpGraph.build(
      name="step", node_names=names, op_types=types,
      costs={"GPU": costs, "CPU": [3 * c for c in costs]}, output_bytes=np.full(n, 1000),
      memory_bytes=np.zeros(n, np.int64), edge_src=src, edge_dst=dst, edge_bytes=nbytes,
      device_kinds=kinds)


def _names_on(graph, placement, device):
  return {graph.node_names[i] for i in np.flatnonzero(placement == device)}


def test_weight_gradients_and_updates_leave_the_spine_device():
  graph = _training_step()
  topo = _topo()
  placement = side_offload.place(graph, topo)
  spine = _names_on(graph, placement, 0)
  for i in range(4):
    assert f"layer{i}/MatMul" in spine
  assert "loss" in spine and "learning_rate" in spine
  # The first layer's weight gradient ends the longest path: it stays.
  assert "gradients/layer0/MatMul_grad/MatMul_1" in spine
  for i in range(1, 4):
    assert f"gradients/layer{i}/MatMul_grad/MatMul_1" not in spine
    assert f"layer{i}/update" not in spine
  # Each weight gradient moves with its own update: the shared scalar does
  # not join the branches into one.
  for i in range(1, 4):
    ops = [graph.node_names.index(f"gradients/layer{i}/MatMul_grad/MatMul_1"),
           graph.node_names.index(f"layer{i}/update")]
    assert placement[ops[0]] == placement[ops[1]]
  # Three branches of equal work over three other devices: all are used.
  assert set(placement) == {0, 1, 2, 3}
  single = simulator.simulate(graph, np.zeros(graph.num_nodes, np.int32), topo)
  offloaded = simulator.simulate(graph, placement, topo)
  assert offloaded.step_time_us < 0.8 * single.step_time_us


def test_a_branch_whose_inputs_cost_more_than_its_compute_stays():
  # 25 us of compute against two inputs of 1000 us each at 1000 bytes/us.
  assert 25 / 2000 < side_offload.MIN_COMPUTE_PER_TRANSFER
  graph = _training_step(weight_grad_us=20.0, activation_bytes=1_000_000)
  placement = side_offload.place(graph, _topo())
  assert not placement.any()


def test_the_send_budget_caps_how_much_leaves(monkeypatch):
  graph = _training_step()
  monkeypatch.setattr(side_offload, "SEND_BUDGET", 0.0)
  assert not side_offload.place(graph, _topo()).any()
  monkeypatch.setattr(side_offload, "SEND_BUDGET", 0.015)  # one branch
  moved = side_offload.place(graph, _topo()) != 0
  assert moved.sum() == 2  # one weight gradient and its update


def test_a_branch_goes_only_where_every_op_of_it_may_run():
  graph = _training_step(cpu_only_weight_grad=2)
  cpu = topology.Device("/job:w/replica:0/task:0/device:CPU:0", "CPU", GIB)
  gpus = _topo().devices
  devices = list(gpus) + [cpu]
  topo = topology.custom("mixed", devices, np.full((5, 5), GB_PER_S),
                         np.full((5, 5), 1.0))
  placement = side_offload.place(graph, topo)
  for name in ("gradients/layer2/MatMul_grad/MatMul_1", "layer2/update"):
    assert placement[graph.node_names.index(name)] == 4
  assert (placement[:2] == 0).all()


def test_memory_moves_more_branches_before_spilling_the_spine():
  # Each update holds 400 MiB of optimizer state; a GPU's budget (0.9 GiB)
  # holds two: the worth test alone would keep them all on the spine's GPU.
  # Layer 0's update is on the spine; two of the other three must leave,
  # each for the GPU with the most room.
  graph = _training_step(weight_grad_us=20.0, activation_bytes=1_000_000)
  state = np.zeros(graph.num_nodes, np.int64)
  for i in range(4):
    state[graph.node_names.index(f"layer{i}/update")] = 400 << 20
  graph = dataclasses.replace(graph, memory_bytes=state)
  placement = side_offload.place(graph, _topo(), activation_fraction=0.0)
  spine = _names_on(graph, placement, 0)
  assert {f"layer{i}/MatMul" for i in range(4)} <= spine
  assert sum(f"layer{i}/update" in spine for i in range(4)) == 2
  moved = [placement[graph.node_names.index(f"layer{i}/update")]
           for i in range(4)]
  assert sorted(moved) == [0, 0, 1, 2]
  result = simulator.simulate(graph, placement, _topo())
  assert result.valid


def test_a_spine_too_big_for_one_device_becomes_stages_with_branches_beside():
  # Each layer's weights take 400 MiB: the forward chain alone needs two of
  # the 0.9 GiB budgets, and no branch holds memory to give. The spine is
  # then two stages of whole layers, and the weight gradients off the
  # longest path (all but the first layer's) go to the two GPUs the stages
  # left idle.
  graph = _training_step(weight_grad_us=100.0)
  weights = np.zeros(graph.num_nodes, np.int64)
  for i in range(4):
    weights[graph.node_names.index(f"layer{i}/MatMul")] = 400 << 20
  graph = dataclasses.replace(graph, memory_bytes=weights)
  result = baselines.run("side_offload", graph, _topo(),
                         activation_fraction=0.0)
  assert result.info["staged"]
  placement = result.placement
  layer = [placement[graph.node_names.index(f"layer{i}/MatMul")]
           for i in range(4)]
  assert layer[0] == layer[1] != layer[2] == layer[3]
  gradient = [placement[graph.node_names.index(
      f"gradients/layer{i}/MatMul_grad/MatMul_1")] for i in range(4)]
  assert gradient[0] == layer[0]
  assert set(gradient[1:]) == set(range(4)) - set(layer)
  assert simulator.simulate(graph, placement, _topo()).valid


def test_an_impossible_budget_is_an_input_error():
  graph = _training_step()
  state = np.full(graph.num_nodes, 1 << 30, np.int64)
  graph = dataclasses.replace(graph, memory_bytes=state)
  with pytest.raises(errors.InputError, match=r"needs \d+\.\d+ GiB"):
    side_offload.place(graph, _topo(), activation_fraction=0.0)


def test_on_one_device_nothing_moves_and_the_gate_accepts_it():
  graph = _training_step()
  assert not side_offload.place(graph, _topo(1)).any()
  result = baselines.run("side_offload", graph, _topo())
  assert result.info["offloaded_ops"] == 6
  assert result.info["side_ops"] == 6


@pytest.mark.parametrize("layers", [1, 6])
def test_side_groups_are_exactly_the_weight_gradients_and_updates(layers):
  graph = _training_step(layers=layers)
  view = baselines.common.group_view(graph, _topo())
  side = side_offload.side_groups(view)[view.group_of]
  names = {graph.node_names[i] for i in np.flatnonzero(side)}
  # Layer 0's weight gradient and update end the longest path.
  assert names == ({f"gradients/layer{i}/MatMul_grad/MatMul_1"
                    for i in range(1, layers)} |
                   {f"layer{i}/update" for i in range(1, layers)})
