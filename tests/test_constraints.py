"""Tests for grappler_bridge.constraints: kernels by type, colocation groups."""

import pytest
import tensorflow as tf

from grappler_bridge import constraints


def _node(op, **type_attrs):
  node = tf.compat.v1.NodeDef(name="n", op=op)
  for name, dtype in type_attrs.items():
    node.attr[name].type = dtype.as_datatype_enum
  return node


def _needs_gpu_kernels():
  if not constraints.registry_has_gpu_kernels():
    pytest.skip("this TensorFlow build registers no GPU kernels")


def test_int32_matmul_has_no_gpu_kernel_but_float32_has():
  _needs_gpu_kernels()
  int_matmul = _node("MatMul", T=tf.int32)
  float_matmul = _node("MatMul", T=tf.float32)
  assert not constraints.node_has_kernel(int_matmul, "GPU")
  assert constraints.node_has_kernel(int_matmul, "CPU")
  assert constraints.node_has_kernel(float_matmul, "GPU")
  assert constraints.KernelTable().kinds(int_matmul) == ("CPU",)
  assert constraints.KernelTable().kinds(float_matmul) is None


def test_string_join_is_cpu_only():
  _needs_gpu_kernels()
  join = _node("StringJoin")
  assert not constraints.node_has_kernel(join, "GPU")
  assert constraints.node_has_kernel(join, "CPU")


def test_a_string_valued_kernel_constraint_is_matched_by_its_string():
  # GatherNd's kernels constrain `bad_indices_policy`, a string attr, beside
  # its dtypes: the node's string must be read as a string, or no CPU kernel
  # would fit the graph `tf.sparse.from_dense` writes.
  gather = _node("GatherNd", Tparams=tf.int64, Tindices=tf.int64)
  gather.attr["bad_indices_policy"].s = b""
  types = constraints.KernelTable().device_types(gather)
  assert "CPU" in types
  assert constraints.node_has_kernel(gather, "CPU")
  gather.attr["bad_indices_policy"].s = b"NO_SUCH_POLICY"
  assert "CPU" not in constraints.KernelTable().device_types(gather)


def test_unknowable_kernels_count_as_available():
  assert constraints.node_has_kernel(_node("_Arg", T=tf.float32), "GPU")
  assert constraints.node_has_kernel(_node("NoSuchOp"), "GPU")


def test_resource_variable_and_its_readers_and_writers_are_one_group():
  with tf.Graph().as_default() as graph:
    handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[2],
                                    name="var")
    read = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32,
                                     name="read")
    tf.raw_ops.AssignVariableOp(resource=handle, value=read * 2.0,
                                name="assign")
  groups = constraints.colocation_groups(graph.as_graph_def())
  assert len(groups) == 1
  group, = groups
  assert group[0] == "var"  # the variable anchors its group
  assert set(group) == {"var", "read", "assign"}


def test_class_attr_groups_nodes():
  with tf.Graph().as_default() as graph:
    x = tf.constant(1.0, name="x")
    y = tf.identity(x, name="y")
    z = tf.constant(2.0, name="z")
    with graph.colocate_with(y.op):
      tf.negative(z, name="w")
  graph_def = graph.as_graph_def()
  by_name = {node.name: node for node in graph_def.node}
  assert list(by_name["w"].attr["_class"].list.s) == [b"loc:@y"]
  groups = constraints.colocation_groups(graph_def)
  assert [sorted(g) for g in groups] == [["w", "y"]]
