"""Names a graph by what it is: a content fingerprint and a file-safe label."""

import hashlib
import re

import numpy as np

from tf_gdp.graph import op_graph


def graph_fingerprint(graph: op_graph.OpGraph) -> str:
  """sha256 of the graph's ops, types and edges (not its costs).

  Placement files carry it, so a placement is never applied to another
  graph by mistake, while re-costing the same graph keeps it valid.
  """
  digest = hashlib.sha256()
  for name, op_type in zip(graph.node_names, graph.op_types):
    digest.update(name.encode("utf-8") + b"\0" + op_type.encode("utf-8") + b"\n")
  digest.update(np.ascontiguousarray(graph.edge_src, np.int64).tobytes())
  digest.update(np.ascontiguousarray(graph.edge_dst, np.int64).tobytes())
  return digest.hexdigest()


def safe_name(name: str) -> str:
  """A file-name-safe version of a graph or task name.

  Never "." or ".." (or empty): output folders named after graphs must stay
  inside the output directory.
  """
  safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")
  return safe if safe.strip(".") else "graph" + safe.replace(".", "_")
