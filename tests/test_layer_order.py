"""layer_order: forward ops in order, backward and update ops at their owner's."""

import numpy as np

from tf_gdp.graph import layer_order
from tf_gdp.graph import op_graph


def _graph(names, types, edges):
  n = len(names)
  return op_graph.OpGraph.build(
      name="g", node_names=names, op_types=types,
      costs={"GPU": np.full(n, 1.0)}, output_bytes=np.full(n, 8),
      memory_bytes=np.zeros(n, np.int64),
      edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
      edge_bytes=np.full(len(edges), 8))


def test_gradients_follow_the_scope_op_the_forward_pass_uses():
  # A Keras depthwise layer: the kernel read and unused shape constants
  # share the layer's scope; the constants sit at the start of the order.
  names = ["x", "l0/op", "l1/op/Shape", "l1/op/ReadVariableOp", "l1/op",
           "loss", "gradient_tape/l1/op/BackpropInput"]
  types = ["Placeholder", "Relu", "Const", "ReadVariableOp",
           "DepthwiseConv2dNative", "Sum", "DepthwiseConv2dNativeBackpropInput"]
  edges = [(0, 1), (1, 4), (3, 4), (4, 5), (5, 6), (3, 6)]
  graph = _graph(names, types, edges)
  position = layer_order.positions(graph)
  assert position[6] == position[3]
  assert position[6] > position[1] > position[2]


def test_cut_bytes_counts_each_tensor_once_per_cut():
  # a -> b, a -> c, b -> c at positions 0, 1, 2.
  graph = _graph(["a", "b", "c"], ["Relu"] * 3, [(0, 1), (0, 2), (1, 2)])
  cut = layer_order.cut_bytes(graph, np.array([0, 1, 2]), 3)
  # Before 1: a's output; before 2: a's output and b's.
  np.testing.assert_array_equal(cut, [0, 8, 16, 0])
