"""Makes each device run its ops in a given order: control-dependency chains.

TensorFlow's executor has no per-op priorities: among ready ops it picks by
its own rules. The only way to impose an order is a control dependency from
each op to the next one of the same device, so that an op cannot start
before its predecessor in the order has finished. Chains must agree with
the graph's own edges, else the step deadlocks: `chain` refuses an order
that closes a cycle.
"""

from typing import Sequence

from grappler_bridge import edges as edges_lib
from grappler_bridge import errors
from grappler_bridge import graph_view
from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

# A while loop's back edge leaves one of these; it is not an ordering edge.
_BACK_EDGE_OPS = ("NextIteration", "RefNextIteration")


def chain(graph_def, sequences: Sequence[Sequence[str]]
          ) -> tf.compat.v1.GraphDef:
  """A copy of `graph_def` in which each sequence's ops run one after another.

  Every op of a sequence but the first gets a control input on the op
  before it. Raises PlacementError for an op the graph lacks, an op named
  twice, or chains that would close a cycle with the graph's edges.
  """
  chained = tf.compat.v1.GraphDef()
  chained.CopyFrom(graph_def)
  by_name = {node.name: node for node in chained.node}
  seen = set()
  for sequence in sequences:
    for name in sequence:
      if name not in by_name:
        raise errors.PlacementError(
            f"the execution order names op {name!r}, which is not in the graph")
      if name in seen:
        raise errors.PlacementError(
            f"the execution order names op {name!r} twice")
      seen.add(name)
    for before, after in zip(sequence, sequence[1:]):
      by_name[after].input.append("^" + before)
  _check_acyclic(chained)
  return chained


def _check_acyclic(graph_def) -> None:
  """PlacementError if the edges (loop back edges aside) close a cycle."""
  nodes = list(graph_def.node)
  index = {node.name: i for i, node in enumerate(nodes)}
  order_edges = []
  for dst, node in enumerate(nodes):
    for tensor in node.input:
      src = index.get(graph_view.parse_input(tensor)[0])
      if src is not None and nodes[src].op not in _BACK_EDGE_OPS:
        order_edges.append({"src": src, "dst": dst})
  try:
    edges_lib.check_acyclic(nodes, order_edges)
  except errors.GraphLoadError as error:
    raise errors.PlacementError(
        "the execution order contradicts the graph's edges: "
        f"{errors.first_line(error)}") from error
