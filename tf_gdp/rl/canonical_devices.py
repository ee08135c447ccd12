"""An imitation target's device labels in a canonical order, where that is free.

Interchangeable devices (same kind, speed and memory) can trade places: a
search names them arbitrarily (a local search moves a block to GPU 2 where
GPU 1 would do as well), so the same pipeline shape shows up under different
labels on different graphs, and imitating the labels teaches noise. The
canonical labelling numbers each class's devices in the order their first
colocation group appears (the groups follow the graph's topological order).
Links are not all alike (two GPUs behind one PCIe switch talk faster), so it
is kept only if the simulator says the relabelled placement is valid and no
slower; otherwise the search's own labels stay.
"""

from typing import Tuple

import numpy as np

from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.policy import features

# Relative slack when comparing the relabelled step time with the original.
_NO_SLOWER = 1e-9


def first_use_permutation(group_devices: np.ndarray,
                          topology: topology_lib.Topology) -> np.ndarray:
  """int[num_devices] old -> new label: each class numbered by first use."""
  devices = topology.devices
  classes = {}
  for index, device in enumerate(devices):
    classes.setdefault((device.kind, device.speed, device.memory_bytes),
                       []).append(index)
  class_of = {i: key for key, members in classes.items() for i in members}
  free = {key: list(members) for key, members in classes.items()}
  permutation = np.full(len(devices), -1, np.int64)
  for device in list(dict.fromkeys(int(d) for d in group_devices)) + list(
      range(len(devices))):
    if permutation[device] < 0:
      permutation[device] = free[class_of[device]].pop(0)
  return permutation


def canonical(inputs: features.PolicyInputs, graph, topology,
              group_devices: np.ndarray,
              step_time_us: float) -> Tuple[np.ndarray, bool]:
  """(group devices, relabelled?) of a target placed at `step_time_us`."""
  group_devices = np.asarray(group_devices, np.int64)
  permutation = first_use_permutation(group_devices, topology)
  if np.array_equal(permutation, np.arange(len(permutation))):
    return group_devices, False
  relabelled = permutation[group_devices]
  placement = features.group_to_node_placement(inputs, relabelled)
  result = simulator.simulate(graph, placement, topology)
  if result.valid and result.step_time_us <= step_time_us * (1 + _NO_SLOWER):
    return relabelled, True
  return group_devices, False
