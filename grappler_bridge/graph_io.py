"""Serializes graph protos for files: binary or text by the file's extension."""

from google.protobuf import text_format


def serialize_meta_graph(meta_graph, path: str) -> bytes:
  """The bytes to write at `path`: text format for .pbtxt, binary otherwise."""
  if path.endswith(".pbtxt"):
    return text_format.MessageToString(meta_graph).encode("utf-8")
  return meta_graph.SerializeToString()
