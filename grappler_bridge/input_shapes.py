"""Fixed shapes for a graph's inputs, where the graph leaves them unknown.

A graph file or SavedModel signature often leaves the batch dimension of its
inputs unknown (`[None, 128]`). Static shape inference then leaves every
tensor that depends on it unknown, and `tensor_sizes` counts an unknown
dimension as 1: the graph is priced as a batch of one, and its step time can
be a thousandth of the real one. `--input_shapes=x:32x128,mask:32x128` sets
the named placeholders' shapes in the flat graph before it is costed, so
shape inference, costs, profiles and measurements all see that batch.
"""

from typing import Dict, List, Mapping, Optional, Sequence

from grappler_bridge import errors
from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top

# Ops that feed a graph from outside: the inputs whose shapes can be given.
INPUT_OPS = frozenset({"Placeholder", "PlaceholderWithDefault"})
_HANDLES = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT})


def parse(text: Optional[str]) -> Dict[str, List[int]]:
  """'x:32x128,mask:32' -> {'x': [32, 128], 'mask': [32]}; '' -> {}.

  A scalar input is `name:` (no dimensions). InputError on anything else.
  """
  shapes = {}
  for item in [part.strip() for part in (text or "").split(",")]:
    if not item:
      continue
    name, colon, dims = item.rpartition(":")
    if not colon or not name:
      raise errors.InputError(
          f"--input_shapes: {item!r} is not NAME:DIMS (e.g. x:32x128)")
    try:
      values = [int(d) for d in dims.split("x")] if dims else []
    except ValueError:
      values = None
    if values is None or any(v < 1 for v in values):
      raise errors.InputError(
          f"--input_shapes: {item!r}: dimensions must be positive integers "
          "joined by 'x' (e.g. x:32x128)")
    if name in shapes:
      raise errors.InputError(f"--input_shapes names {name!r} twice")
    shapes[name] = values
  return shapes


def inputs(graph_def) -> Dict[str, Optional[List[int]]]:
  """Placeholder name -> its declared shape (-1 unknown; None: rank unknown),
  for every data input of the graph (not resource or variant handles)."""
  found = {}
  for node in graph_def.node:
    if node.op not in INPUT_OPS:
      continue
    dtype = node.attr["dtype"].type if "dtype" in node.attr else None
    if dtype in _HANDLES:
      continue
    found[node.name] = _declared(node)
  return found


def unknown(graph_def) -> Dict[str, Optional[List[int]]]:
  """The data inputs whose declared shape has an unknown dimension or rank."""
  return {name: dims for name, dims in inputs(graph_def).items()
          if dims is None or -1 in dims}


def apply(graph_def, shapes: Mapping[str, Sequence[int]]) -> None:
  """Sets the named inputs' shapes in `graph_def` (in place).

  InputError if a name is not a data input of the graph, or the given shape
  contradicts a dimension the graph declares.
  """
  nodes = {node.name: node for node in graph_def.node}
  known_inputs = inputs(graph_def)
  for name, dims in shapes.items():
    if name not in known_inputs:
      listed = ", ".join(f"{n} {describe(d)}"
                         for n, d in sorted(known_inputs.items())) or "none"
      raise errors.InputError(
          f"--input_shapes: the graph has no input {name!r} (its inputs: "
          f"{listed})")
    declared = known_inputs[name]
    if declared is not None and (
        len(declared) != len(dims) or
        any(d not in (-1, g) for d, g in zip(declared, dims))):
      raise errors.InputError(
          f"--input_shapes: input {name!r} is {describe(declared)}; "
          f"{describe(list(dims))} does not match it")
    proto = tf.TensorShape(list(dims)).as_proto()
    node = nodes[name]
    node.attr["shape"].shape.CopyFrom(proto)
    if "_output_shapes" in node.attr:
      listed = node.attr["_output_shapes"].list.shape
      del listed[:]
      listed.add().CopyFrom(proto)


def describe(dims: Optional[Sequence[int]]) -> str:
  """[-1, 128] -> '[?, 128]'; None -> '[unknown rank]'."""
  if dims is None:
    return "[unknown rank]"
  return "[" + ", ".join("?" if d < 0 else str(d) for d in dims) + "]"


def _declared(node) -> Optional[List[int]]:
  if "shape" in node.attr:
    shape = node.attr["shape"].shape
  elif "_output_shapes" in node.attr and node.attr["_output_shapes"].list.shape:
    shape = node.attr["_output_shapes"].list.shape[0]
  else:
    return None
  if shape.unknown_rank:
    return None
  return [d.size if d.size >= 0 else -1 for d in shape.dim]
