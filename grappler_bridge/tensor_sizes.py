"""Output dtypes, shapes and bytes of every node, and the bytes of variables.

Edge bytes, memory and the roofline's byte term all come from these sizes,
so the conventions live in one place: an unknown dimension counts as 1
element (and an unknown rank as one element); resource and variant tensors
are handles and count 0 bytes; a string element counts 24 bytes
(sizeof(tstring)). Shapes come from Grappler's static shape inference when
it has them, else from a node's `_output_shapes` attr.
"""

import dataclasses
import math
from typing import Dict, List, Optional

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top

from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top

_STRING_ELEMENT_BYTES = 24  # sizeof(tensorflow::tstring)
_HANDLE_DTYPES = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT})
# Bytes per element by base dtype, filled on first use.
_DTYPE_SIZES: Dict[int, int] = {}


@dataclasses.dataclass
class Outputs:
  """Per node: output dtypes, shapes (None = unknown rank) and bytes."""
  dtypes: List[List[int]]
  shapes: List[List[Optional[List[int]]]]
  nbytes: List[List[int]]
  unknown_shape_nodes: int


def node_outputs(nodes, properties) -> Outputs:
  """Outputs of every node; `properties` are Grappler's, by node name."""
  dtypes, shapes, nbytes = [], [], []
  unknown = 0
  for node in nodes:
    node_dtypes, node_shapes = _output_types(node, properties.get(node.name))
    dtypes.append(node_dtypes)
    shapes.append(node_shapes)
    nbytes.append([tensor_bytes(t, s) for t, s in zip(node_dtypes,
                                                        node_shapes)])
    if any(s is None or -1 in s for s in node_shapes):
      unknown += 1
  return Outputs(dtypes, shapes, nbytes, unknown)


def _output_types(node, tensor_properties):
  """Dtypes and shapes from Grappler, else `_output_shapes` and the OpDef."""
  if tensor_properties:
    return ([p.dtype for p in tensor_properties],
            [dims(p.shape) for p in tensor_properties])
  node_dtypes = graph_view.output_dtypes(node)
  if "_output_shapes" in node.attr:
    listed = [dims(s) for s in node.attr["_output_shapes"].list.shape]
    if len(listed) == len(node_dtypes):
      return node_dtypes, listed
  return node_dtypes, [None] * len(node_dtypes)


def dims(shape) -> Optional[List[int]]:
  """A TensorShapeProto as a list (-1 = unknown dimension; None = rank)."""
  if shape.unknown_rank:
    return None
  return [d.size if d.size >= 0 else -1 for d in shape.dim]


def dtype_size(dtype: int) -> int:
  """Bytes per element; 0 for handles, a tstring's size for strings."""
  base = dtype - graph_view.REF_OFFSET if dtype > graph_view.REF_OFFSET else (
      dtype)
  if base not in _DTYPE_SIZES:
    if base in _HANDLE_DTYPES or base == types_pb2.DT_INVALID:
      size = 0
    elif base == types_pb2.DT_STRING:
      size = _STRING_ELEMENT_BYTES
    else:
      try:
        size = tf.dtypes.as_dtype(base).size
      except TypeError:
        size = 0
    _DTYPE_SIZES[base] = size
  return _DTYPE_SIZES[base]


def num_elements(shape_dims: Optional[List[int]]) -> int:
  """Elements of a shape; an unknown dimension or rank counts as 1."""
  if shape_dims is None:
    return 1
  return math.prod(d if d >= 0 else 1 for d in shape_dims)


def tensor_bytes(dtype: int, shape_dims: Optional[List[int]]) -> int:
  size = dtype_size(dtype)
  return size * num_elements(shape_dims) if size else 0


def memory_bytes(analysis_nodes, num_nodes: int) -> List[int]:
  """Persistent bytes: the variable a node creates (or whose handle it is).

  Reads the analysis copy, where a captured-handle placeholder is already the
  VarHandleOp (with shape) it stands for; constants are not counted.

  Args:
    analysis_nodes: nodes of the analysis copy (originals first, in order).
    num_nodes: number of original nodes.

  Returns:
    Bytes per original node.
  """
  return [_variable_bytes(node) if node.op in graph_view.VARIABLE_OPS else 0
          for node in analysis_nodes[:num_nodes]]


def _variable_bytes(node) -> int:
  """Bytes of the variable a VarHandleOp/VariableV2 node creates."""
  shape = node.attr["shape"].shape if "shape" in node.attr else None
  if shape is None:
    return 0
  return tensor_bytes(node.attr["dtype"].type, dims(shape))
