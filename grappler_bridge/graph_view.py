"""The flat graph as given, and the NodeDef reading every analysis shares.

Costs, constraints and profiling all address nodes by their position in the
GraphDef and parse the same "name:slot" / "^name" input strings; they also
need to know which resource placeholders stand for captured variables (and
the shape of each variable), because a flat graph only has a handle where
the function had a variable. This module holds that one view so that each
of them reads the graph the same way.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import attr_value_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import meta_graph_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.python.framework import op_def_registry  # pylint: disable=g-import-not-at-top
from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from grappler_bridge import extract  # pylint: disable=g-import-not-at-top

# Ops that create the buffer of a variable: they own its bytes and anchor
# (name) the colocation group of the ops that use it.
VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
# A ref dtype is its value dtype plus this (DT_FLOAT_REF == DT_FLOAT + 100).
REF_OFFSET = 100

# Placeholder name -> (dtype enum, TensorShapeProto) of a variable.
HandleShapes = Dict[str, Tuple[int, Any]]
# Per node: (source index, output slot) of each resource / ref input.
HandleInputs = List[List[Tuple[int, int]]]


@dataclasses.dataclass
class Graph:
  """The flat graph plus what the caller knows about captured handles."""
  meta_graph: meta_graph_pb2.MetaGraphDef
  fetches: List[str]
  # Placeholder name -> (dtype enum, TensorShapeProto) of the variable whose
  # resource handle the placeholder stands for.
  handle_shapes: HandleShapes
  extracted: Optional[extract.ExtractedGraph] = None

  @property
  def nodes(self):
    return self.meta_graph.graph_def.node


def as_graph(source) -> Graph:
  """Accepts an ExtractedGraph, a MetaGraphDef or a GraphDef."""
  if isinstance(source, extract.ExtractedGraph):
    return Graph(source.meta_graph, list(source.fetches),
                 _captured_handle_shapes(source), source)
  if isinstance(source, meta_graph_pb2.MetaGraphDef):
    meta_graph = source
  elif isinstance(source, tf.compat.v1.GraphDef):
    meta_graph = meta_graph_pb2.MetaGraphDef()
    meta_graph.graph_def.CopyFrom(source)
  else:
    raise errors.InputError(
        f"expected an ExtractedGraph, MetaGraphDef or GraphDef, got "
        f"{type(source).__name__}")
  if not meta_graph.graph_def.node:
    raise errors.InputError("the graph has no nodes")
  fetches = list(
      meta_graph.collection_def[extract.FETCH_COLLECTION].node_list.value)
  graph = Graph(meta_graph, fetches, {})
  graph.handle_shapes = _handle_shapes_from_readers(graph.nodes)
  return graph


def _captured_handle_shapes(extracted) -> HandleShapes:
  """Variable dtype/shape of every captured resource handle we can read."""
  shapes = {}
  for name, value in zip(extracted.capture_names, extracted.captured_values):
    if getattr(value, "dtype", None) != tf.resource:
      continue
    try:
      handle_data = resource_variable_ops.get_eager_safe_handle_data(value)
    except (AssertionError, AttributeError, TypeError, ValueError):
      continue
    if handle_data is not None and handle_data.is_set and (
        handle_data.shape_and_type):
      first = handle_data.shape_and_type[0]
      shapes[name] = (first.dtype, first.shape)
  return shapes


def _handle_shapes_from_readers(nodes) -> HandleShapes:
  """Resource placeholders' variable shapes from readers' `_output_shapes`.

  A bare MetaGraphDef has lost the captured values, but a graph exported by
  TF still records the shape each ReadVariableOp produced.

  Args:
    nodes: the graph's NodeDefs.

  Returns:
    Placeholder name -> (dtype, shape) for the placeholders that are read.
  """
  resource_placeholders = {
      n.name for n in nodes if is_resource_placeholder(n)}
  shapes = {}
  if not resource_placeholders:
    return shapes
  for node in nodes:
    if node.op != "ReadVariableOp" or "_output_shapes" not in node.attr:
      continue
    source = input_name(node.input[0])
    if source in resource_placeholders and source not in shapes:
      shapes[source] = (node.attr["dtype"].type,
                        node.attr["_output_shapes"].list.shape[0])
  return shapes


def node_index(nodes) -> Dict[str, int]:
  """Node name -> position; a duplicate name makes the graph unusable."""
  index = {}
  for i, node in enumerate(nodes):
    if node.name in index:
      raise errors.GraphLoadError(f"duplicate node name {node.name!r}")
    index[node.name] = i
  return index


def input_name(tensor: str) -> str:
  """The node name of an input string ("^a", "a:1", "a" -> "a")."""
  return tensor.lstrip("^").split(":")[0]


def parse_input(tensor: str) -> Tuple[str, int]:
  """"a:1" -> ("a", 1); "a" -> ("a", 0); "^a" -> ("a", -1)."""
  if tensor.startswith("^"):
    return tensor[1:], -1
  name, _, index = tensor.partition(":")
  return name, int(index) if index else 0


def sinks(nodes) -> List[str]:
  """Names of the nodes no other node consumes: what a step must run."""
  consumed = set()
  for node in nodes:
    consumed.update(input_name(i) for i in node.input)
  return [node.name for node in nodes if node.name not in consumed]


def needed_by(nodes, fetches: Sequence[str]) -> set:
  """Names of the nodes a run of `fetches` executes: the fetches and every
  node they reach through data or control inputs."""
  inputs = {node.name: node.input for node in nodes}
  needed, stack = set(), [input_name(name) for name in fetches
                          if input_name(name) in inputs]
  while stack:
    name = stack.pop()
    if name in needed:
      continue
    needed.add(name)
    stack.extend(input_name(i) for i in inputs[name])
  return needed


def is_resource_placeholder(node) -> bool:
  return node.op == "Placeholder" and (
      node.attr["dtype"].type == types_pb2.DT_RESOURCE)


def is_handle_dtype(dtype: int) -> bool:
  """Whether a tensor of `dtype` refers to a buffer (resource or ref)."""
  return dtype == types_pb2.DT_RESOURCE or dtype > REF_OFFSET


def handle_inputs(nodes, index: Dict[str, int],
                  dtypes: Sequence[Sequence[int]]) -> HandleInputs:
  """Per node, (source index, output slot) of each resource or ref input.

  These inputs tie an op to a buffer: TF colocates the op with the buffer,
  and the op reads or writes the buffer's bytes.

  Args:
    nodes: the graph's NodeDefs.
    index: node name -> position.
    dtypes: output dtypes per node (ref dtypes above REF_OFFSET).

  Returns:
    One list per node, in input order; inputs from unknown nodes are skipped.
  """
  result = []
  for node in nodes:
    handles = []
    for tensor in node.input:
      name, slot = parse_input(tensor)
      src = index.get(name)
      if src is None or slot < 0:
        continue
      src_dtypes = dtypes[src]
      dtype = src_dtypes[slot] if slot < len(src_dtypes) else (
          types_pb2.DT_INVALID)
      if is_handle_dtype(dtype):
        handles.append((src, slot))
    result.append(handles)
  return result


def output_dtypes(node) -> List[int]:
  """Output dtypes from the registered OpDef and the node's attrs.

  Ref outputs get REF_OFFSET added, as in TF's own DataType enum. The node
  is only read: a missing attr counts as its default.

  Args:
    node: a NodeDef.

  Returns:
    One DataType enum per output; empty for an op TF does not know.
  """
  op_def = op_def_registry.get(node.op)
  if op_def is None:
    return []
  dtypes = []
  for arg in op_def.output_arg:
    if arg.type_list_attr:
      arg_types = list(_attr(node, arg.type_list_attr, "list").type)
    else:
      dtype = _attr(node, arg.type_attr, "type") if arg.type_attr else arg.type
      count = _attr(node, arg.number_attr, "i") if arg.number_attr else 1
      arg_types = [dtype] * count
    offset = REF_OFFSET if arg.is_ref else 0
    dtypes.extend(t + offset for t in arg_types)
  return dtypes


def _attr(node, name: str, field: str):
  """A field of an attr, or its default if the node lacks the attr."""
  value = node.attr[name] if name in node.attr else attr_value_pb2.AttrValue()
  return getattr(value, field)


def materialize_var_handle(node, dtype: int, shape) -> None:
  """Turns a captured-handle placeholder into the VarHandleOp it stands for.

  Grappler and a Session both need the variable in the graph: Grappler to
  infer its readers' shapes, a Session to hold a copy of its value.

  Args:
    node: the Placeholder NodeDef, changed in place.
    dtype: the variable's dtype enum.
    shape: the variable's TensorShapeProto.
  """
  node.op = "VarHandleOp"
  node.ClearField("attr")
  node.attr["dtype"].type = dtype
  node.attr["shape"].shape.CopyFrom(shape)
  node.attr["shared_name"].s = node.name.encode()
  node.attr["container"].s = b""
