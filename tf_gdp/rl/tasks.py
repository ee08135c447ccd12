"""Training tasks from a graph spec: each graph on each topology it trains on.

Pre-training places every graph of its spec (`tf_gdp.graph_specs`) on every
topology of the run, except items written `GRAPH@DEVICES`, which train on
their own topology only.
"""

from typing import Callable, List

from tf_gdp import graph_specs
from tf_gdp.cost import topology as topology_lib
from tf_gdp.rl import placement_task


def placement_tasks(items: List[graph_specs.GraphSpec], devices: List[str],
                    *, log: Callable[[str], None] = lambda line: None
                    ) -> List[placement_task.PlacementTask]:
  """PlacementTasks of `items`: each on every one of `devices`, or on its own.

  Task names are `<label>@<devices>`; an item with its own topology
  (`GRAPH@DEVICES`) already carries it in its label.
  """
  # Topology by topology, then the items with their own (the order seeds
  # the task draws of a run).
  pairs = [(item, name) for name in devices for item in items
           if not item.devices]
  pairs += [(item, item.devices) for item in items if item.devices]
  tasks, topologies = [], {}
  for item, name in pairs:
    if name not in topologies:
      topologies[name] = topology_lib.get(name)
    log(f"loading {item.label} for {name}")
    loaded = item.load(name)
    tasks.append(placement_task.PlacementTask(
        loaded.graph, topologies[name], extracted=loaded.extracted,
        name=item.label if item.devices else f"{item.label}@{name}"))
  return tasks
