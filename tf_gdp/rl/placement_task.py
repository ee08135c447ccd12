"""A placement task: an op graph on a topology, what every workflow places.

Kept apart from the environment so that placing a graph zero-shot does not
import tf-agents.
"""

import dataclasses
from typing import Any, Optional

from tf_gdp import errors
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


@dataclasses.dataclass
class PlacementTask:
  """One thing to place: an op graph on a topology.

  Attributes:
    graph: the op graph.
    topology: the devices.
    extracted: the graph's `ExtractedGraph` (needed by the measure backends).
    name: label for logs, summaries and output files (default
      "<graph>@<topology>").
  """
  graph: op_graph.OpGraph
  topology: topology_lib.Topology
  extracted: Optional[Any] = None
  name: Optional[str] = None

  def __post_init__(self):
    if not self.name:
      self.name = f"{self.graph.name}@{self.topology.name}"


def as_task(item, topology=None) -> PlacementTask:
  """`item` if it is a PlacementTask, else the OpGraph `item` on `topology`."""
  if isinstance(item, PlacementTask):
    return item
  if isinstance(item, op_graph.OpGraph) and topology is not None:
    return PlacementTask(item, topology)
  raise errors.InputError(
      "expected a PlacementTask, or an OpGraph and a topology")
