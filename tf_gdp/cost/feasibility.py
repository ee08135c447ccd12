"""Says up front when no placement of a graph can run on a topology.

The simulator marks an OOM placement invalid, but a search over placements
of which none can fit only burns its budget and hands back an OOM placement.
These checks are necessary conditions under the simulator's own memory model
(see `simulator`), so they never reject a problem that has a valid placement:

* every colocation group (a lone op is a group of one) needs one device that
  its kind and pin constraints allow;
* on that device it holds the group's persistent bytes, and while one of its
  ops runs, also that op's outputs and scratch bytes;
* at every moment all devices together hold all persistent bytes, plus the
  outputs and scratch bytes of the op that is running.

`check_feasible` raises `InfeasibleError` with the numbers (needed vs
available); `problem` returns the same line, or None.
"""

from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


def check_feasible(graph: op_graph.OpGraph,
                   topology: topology_lib.Topology) -> None:
  """Raises InfeasibleError when no placement can be valid (one line)."""
  message = problem(graph, topology)
  if message is not None:
    raise errors.InfeasibleError(message)


def problem(graph: op_graph.OpGraph,
            topology: topology_lib.Topology) -> Optional[str]:
  """Why no placement of `graph` on `topology` can be valid, or None."""
  groups = graph.group_ids
  num_groups = int(groups.max()) + 1 if groups.size else 0
  allowed = simulator.device_tables(graph, topology).allowed  # [n, d]
  group_allowed = np.ones((num_groups, topology.num_devices), np.bool_)
  np.logical_and.at(group_allowed, groups, allowed)
  homeless = np.flatnonzero(~group_allowed.any(axis=1))
  if homeless.size:
    return _no_device(graph, topology, groups, int(homeless[0]), allowed)

  persistent = np.zeros(num_groups, np.int64)
  np.add.at(persistent, groups, graph.memory_bytes)
  working = graph.output_bytes + graph.temp_bytes  # while the op runs
  peak_working = np.zeros(num_groups, np.int64)
  np.maximum.at(peak_working, groups, working)
  need = persistent + peak_working
  capacity = topology.memory_bytes
  room = np.where(group_allowed, capacity[None, :], 0).max(axis=1)
  too_big = np.flatnonzero(need > room)
  if too_big.size:
    g = int(too_big[np.argmax(need[too_big] - room[too_big])])
    largest = int(np.argmax(np.where(group_allowed[g], capacity, -1)))
    return (f"infeasible: {_label(graph, groups, g)} needs {_size(need[g])} "
            f"(persistent {_size(persistent[g])} + outputs and scratch "
            f"{_size(peak_working[g])}) but the largest device it may use, "
            f"{topology.devices[largest].name}, has {_size(room[g])}")

  total_persistent = int(graph.memory_bytes.sum())
  biggest_op = int(np.argmax(working)) if working.size else 0
  total_need = total_persistent + (int(working[biggest_op]) if working.size
                                   else 0)
  total_capacity = int(capacity.sum())
  if total_need > total_capacity:
    return (f"infeasible: the graph needs at least {_size(total_need)} "
            f"(persistent {_size(total_persistent)} + outputs and scratch of "
            f"op {graph.node_names[biggest_op]!r} {_size(working[biggest_op])})"
            f" but the {topology.num_devices} devices of {topology.name!r} "
            f"have {_size(total_capacity)} in total")
  return None


def _no_device(graph, topology, groups, g, allowed) -> str:
  """The line for a group no device may host (kinds, pins, or both)."""
  members = np.flatnonzero(groups == g)
  lonely = [int(i) for i in members if not allowed[i].any()]
  if lonely:
    i = lonely[0]
    if graph.pinned_devices[i] is not None:
      wanted = f"is pinned to {graph.pinned_devices[i]!r}"
    else:
      wanted = f"may run only on {list(graph.device_kinds[i] or graph.kinds)}"
    return (f"infeasible: op {graph.node_names[i]!r} ({graph.op_types[i]}) "
            f"{wanted}, but topology {topology.name!r} has no such device "
            f"(it has {', '.join(topology.device_names)})")
  return (f"infeasible: {_label(graph, groups, g)} must share one device, "
          "but no single device satisfies the kind and pin constraints of "
          "all its ops")


def _label(graph: op_graph.OpGraph, groups: np.ndarray, g: int) -> str:
  members = np.flatnonzero(groups == g)
  first = int(members[0])
  if graph.colocation_groups[first] is None:
    return f"op {graph.node_names[first]!r} ({graph.op_types[first]})"
  return (f"colocation group {graph.colocation_groups[first]!r} "
          f"({members.size} ops)")


def _size(nbytes) -> str:
  """Bytes in a unit a reader can compare at a glance, plus the exact count."""
  nbytes = int(nbytes)
  for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
    if nbytes >= scale:
      return f"{nbytes / scale:.2f} {unit} ({nbytes} bytes)"
  return f"{nbytes} bytes"
