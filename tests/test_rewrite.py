"""Rewriting device fields: placed graphs run and agree with the original."""

import numpy as np
import pytest
import tensorflow as tf

from grappler_bridge import constraints
from grappler_bridge import errors
from grappler_bridge import extract
from grappler_bridge import rewrite

_CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
_CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


def _two_cpus():
  if len(tf.config.list_logical_devices("CPU")) < 2:
    pytest.skip("needs two logical CPU devices (configured in conftest)")


def _step_and_variable():
  variable = tf.Variable(tf.reshape(tf.range(16, dtype=tf.float32), [4, 4]) / 16)

  @tf.function
  def branch(x, scale):
    return tf.nn.tanh(tf.matmul(x, x) * scale)

  @tf.function
  def step(x):
    left = branch(x, 0.5)
    right = branch(tf.transpose(x), 2.0)
    _, looped = tf.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a + left),
                              [tf.constant(0), right])
    update = tf.cond(tf.reduce_mean(looped) > 0, lambda: looped * 0.1,
                     lambda: -looped)
    variable.assign_add(tf.matmul(update, variable))
    return tf.reduce_sum(variable), looped

  return step, variable


def _alternating_placement(extracted):
  """Spreads ops over two devices, keeping groups with captured variables."""
  graph_def = extracted.graph_def
  pins = dict(zip(extracted.capture_names, extracted.capture_devices))
  placement = {node.name: pins.get(node.name, (_CPU0, _CPU1)[i % 2])
               for i, node in enumerate(graph_def.node)}
  for group in constraints.colocation_groups(graph_def):
    pinned = [pins[name] for name in group if name in pins]
    for name in group:
      placement[name] = pinned[0] if pinned else placement[group[0]]
  return placement


def test_placed_function_matches_unplaced_and_updates_same_variable():
  _two_cpus()
  step, variable = _step_and_variable()
  x = tf.constant(np.random.default_rng(0).normal(size=(4, 4)), tf.float32)
  start = variable.numpy()
  expected_total, expected_looped = (t.numpy() for t in step(x))
  expected_variable = variable.numpy()

  variable.assign(start)
  extracted = extract.from_function(step, x)
  placement = _alternating_placement(extracted)
  assert len(set(placement.values())) == 2
  placed = rewrite.placed_function(extracted, placement)
  total, looped = placed(x)
  np.testing.assert_allclose(total.numpy(), expected_total, rtol=1e-5)
  np.testing.assert_allclose(looped.numpy(), expected_looped, rtol=1e-5)
  np.testing.assert_allclose(variable.numpy(), expected_variable, rtol=1e-5)
  # the device fields of the graph that ran are the placement's
  devices = {op.name.removeprefix("placed/"): op.device
             for op in placed.graph.get_operations()
             if op.name.startswith("placed/")}
  moved = [name for name, device in placement.items()
           if device == _CPU1 and name not in extracted.arg_names]
  assert len(moved) > 10
  assert all(devices[name] == _CPU1 for name in moved)


def test_resource_variable_and_its_update_share_a_group():
  step, _ = _step_and_variable()
  extracted = extract.from_function(step, tf.ones([4, 4]))
  ops = {node.name: node.op for node in extracted.graph_def.node}
  groups = constraints.colocation_groups(extracted.graph_def)
  assign = next(n for n, op in ops.items() if op == "AssignAddVariableOp")
  group = next(g for g in groups if assign in g)
  assert ops[group[0]] == "Placeholder"  # the captured variable handle
  assert any(ops[name] == "ReadVariableOp" for name in group)


def test_splitting_a_colocation_group_is_an_error():
  step, _ = _step_and_variable()
  extracted = extract.from_function(step, tf.ones([4, 4]))
  group = next(g for g in constraints.colocation_groups(extracted.graph_def)
               if len(g) >= 3)
  placement = {name: _CPU0 for name in group}
  placement[group[-1]] = _CPU1
  with pytest.raises(errors.PlacementError, match="split over devices"):
    rewrite.apply_placement(extracted.graph_def, placement)


def _pinned_variable_graph(device):
  """A TF1 step whose variable is pinned to `device` and whose update is
  colocated with it (the optimizer's `_class`) but carries no pin."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
    with tf.device(device):
      w = tf.compat.v1.get_variable("w", [3, 3], use_resource=True)
    loss = tf.reduce_sum(tf.matmul(x, w), name="loss")
    tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, name="train_op")
  return graph.as_graph_def()


def test_a_short_pin_and_its_full_name_are_one_device():
  graph_def = _pinned_variable_graph("/device:CPU:0")
  group = next(g for g in constraints.colocation_groups(graph_def)
               if "w" in g)
  unpinned = [n.name for n in graph_def.node
              if n.name in group and not n.device]
  assert unpinned  # the update, colocated by `_class` only
  rewrite.apply_placement(graph_def, dict.fromkeys(unpinned, _CPU0))
  with pytest.raises(errors.PlacementError, match="split over devices"):
    rewrite.apply_placement(graph_def, dict.fromkeys(unpinned, _CPU1))


def test_a_pinned_ops_colocation_group_follows_its_pin():
  graph_def = _pinned_variable_graph("/device:CPU:1")
  group = next(g for g in constraints.colocation_groups(graph_def)
               if "w" in g)
  pins = rewrite.group_pins(graph_def)
  assert {pins[name] for name in group} == {"/device:CPU:1"}
  assert "x" not in pins and "loss" not in pins


def test_ops_of_a_captured_variable_must_stay_on_its_device():
  _two_cpus()
  step, variable = _step_and_variable()
  extracted = extract.from_function(step, tf.ones([4, 4]))
  assert extracted.capture_devices == [variable.handle.device]
  group = next(g for g in constraints.colocation_groups(extracted.graph_def)
               if extracted.capture_names[0] in g)
  with pytest.raises(errors.PlacementError, match="lives on"):
    rewrite.placed_function(extracted, {name: _CPU1 for name in group})


def test_op_pinned_by_the_user_cannot_move():
  def pinned(x):
    with tf.device("/device:CPU:0"):
      y = tf.square(x, name="pinned_square")
    return y + 1.0
  extracted = extract.from_function(pinned, tf.ones([2]))
  rewrite.apply_placement(extracted.graph_def, {"pinned_square": _CPU0})
  with pytest.raises(errors.PlacementError, match="is pinned to"):
    rewrite.apply_placement(extracted.graph_def, {"pinned_square": _CPU1})


def test_op_without_gpu_kernel_on_gpu_is_an_error():
  if not constraints.registry_has_gpu_kernels():
    pytest.skip("this TensorFlow build registers no GPU kernels")
  extracted = extract.from_function(
      lambda s: tf.strings.join([s, s]), tf.constant(["a"]))
  join = next(n.name for n in extracted.graph_def.node if n.op == "StringJoin")
  with pytest.raises(errors.PlacementError, match="has no GPU kernel"):
    rewrite.apply_placement(extracted.graph_def, {join: "/device:GPU:0"})


@pytest.mark.parametrize("placement,message", [
    ({"no_such_op": _CPU0}, "not in the graph"),
    ({"x": "gpu zero"}, "not a TF device string"),
])
def test_bad_placements(placement, message):
  extracted = extract.from_function(tf.square, tf.ones([2]))
  with pytest.raises(errors.PlacementError, match=message):
    rewrite.apply_placement(extracted.graph_def, placement)


def test_device_that_does_not_exist_is_reported():
  extracted = extract.from_function(tf.square, tf.ones([2]))
  with pytest.raises(errors.PlacementError,
                     match="does not exist here.*split the host CPU"):
    rewrite.placed_function(extracted, {"x": "/device:CPU:7"})
  with pytest.raises(errors.PlacementError,
                     match="does not exist here.*not attached"):
    rewrite.placed_function(extracted, {"x": "/device:GPU:3"})
