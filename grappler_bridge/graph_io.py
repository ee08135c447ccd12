"""Graph protos as file bytes: serialized by extension, or built node by node."""

from typing import Optional, Sequence, Tuple

from google.protobuf import text_format

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

from tensorflow.core.framework import graph_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top


def serialize_meta_graph(meta_graph, path: str) -> bytes:
  """The bytes to write at `path`: text format for .pbtxt, binary otherwise."""
  if path.endswith(".pbtxt"):
    return text_format.MessageToString(meta_graph).encode("utf-8")
  return meta_graph.SerializeToString()


def graph_def_bytes(nodes: Sequence[Tuple[str, str, Sequence[str]]], *,
                    producer: Optional[int] = None) -> bytes:
  """A binary GraphDef of (name, op, inputs) nodes, each with attr T=float.

  TensorFlow's own builders refuse graphs that a file may still hold (an
  unknown op type, a cycle, an input naming no node); this writes them as
  given, so that the loaders' refusals can be checked. `producer` sets the
  GraphDef's producer version (a GraphDef without nodes or versions would
  serialize to no bytes at all).
  """
  graph_def = graph_pb2.GraphDef()
  if producer is not None:
    graph_def.versions.producer = producer
  for name, op, inputs in nodes:
    node = graph_def.node.add(name=name, op=op, input=inputs)
    node.attr["T"].type = types_pb2.DT_FLOAT
  return graph_def.SerializeToString()
