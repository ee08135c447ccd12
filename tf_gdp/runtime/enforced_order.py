"""A placed step whose devices run their ops in a simulated schedule's order.

The simulator prices a placement in the executor's order or in any given
per-device order (`simulator.simulate(priority=...)`), and list schedulers
are judged in their own plan as well. TensorFlow's executor follows no such
plan; the only way to impose one is a control dependency from each op to
the next of its device (`grappler_bridge.execution_order`). This builds
that graph from a simulated schedule, so that `measure` can tell whether an
order's predicted gain survives the real runtime.

Only ops the step runs (some fetch needs them) and that wait on some data
are chained. Sources (constants, placeholders, variable handles) are ready
when the step starts, and a variable's handle is also used by the
initializers, which must not wait on the step's own ops.
"""

import dataclasses
from typing import List

import numpy as np

from grappler_bridge import errors
from grappler_bridge import execution_order
from grappler_bridge import extract
from grappler_bridge import graph_view
from tf_gdp.cost import sim_results
from tf_gdp.graph import op_graph


def device_sequences(extracted: extract.ExtractedGraph,
                     graph: op_graph.OpGraph, placement,
                     schedule: sim_results.Schedule) -> List[List[str]]:
  """Per device, the names of the chained ops in the schedule's start order
  (ties by topological order, so that the chains agree with the edges)."""
  graph_def = extracted.graph_def
  placement = np.asarray(placement, np.int64)
  if placement.shape != (graph.num_nodes,):
    raise errors.PlacementError(
        f"the placement has {placement.size} entries for {graph.num_nodes} ops")
  runs = graph_view.needed_by(graph_def.node, extracted.fetches)
  rank = np.empty(graph.num_nodes, np.int64)
  rank[graph.topo_order] = np.arange(graph.num_nodes)
  chained = []
  for node in graph_def.node:
    if node.name in runs and any(not i.startswith("^") for i in node.input):
      op = graph.node_index.get(node.name)
      if op is None:
        raise errors.PlacementError(
            f"op {node.name!r} of the TensorFlow graph is not in the op graph")
      chained.append(op)
  chained = np.asarray(chained, np.int64)
  sequences = []
  for device in np.unique(placement[chained]):
    ops = chained[placement[chained] == device]
    ops = ops[np.lexsort((rank[ops], schedule.op_start_us[ops]))]
    sequences.append([graph.node_names[i] for i in ops])
  return sequences


def ordered(extracted: extract.ExtractedGraph, graph: op_graph.OpGraph,
            placement, schedule: sim_results.Schedule
            ) -> extract.ExtractedGraph:
  """A copy of `extracted` whose devices run in `schedule`'s order."""
  chained = execution_order.chain(
      extracted.graph_def,
      device_sequences(extracted, graph, placement, schedule))
  meta_graph = type(extracted.meta_graph)()
  meta_graph.CopyFrom(extracted.meta_graph)
  meta_graph.graph_def.CopyFrom(chained)
  return dataclasses.replace(extracted, meta_graph=meta_graph)
