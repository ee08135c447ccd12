"""Topologies made from another: a subset of its devices, or no contention.

`target_devices` places on some devices of a machine (`subset`); the
benchmarks and tests compare the shared-channel model with the one it
replaced (`uncontended`).
"""

from typing import Sequence

import numpy as np

from tf_gdp.cost import topology as topology_lib


def uncontended(topology: topology_lib.Topology) -> topology_lib.Topology:
  """The same devices and pair links with one channel per directed pair.

  Transfers between different pairs then never wait for each other; the
  model of a topology without channel data, kept for comparisons.
  """
  if not topology.contended:
    return topology
  return topology_lib.custom(
      f"{topology.name} (uncontended)", topology.devices,
      topology.bandwidth_gbps, topology.latency_us, topology.hardware,
      topology.table_bytes, topology.table_us, runtime=topology.runtime)


def subset(topology: topology_lib.Topology, index: Sequence[int], name: str) -> topology_lib.Topology:
  """`topology` restricted to the devices `index` (in that order)."""
  pick = np.ix_(index, index)
  table_us = None if topology.table_us is None else topology.table_us[pick]
  kinds = {topology.devices[i].kind for i in index}
  channels = routes = None
  if topology.contended:
    channels = list(zip(topology.channel_names, topology.channel_gbps))
    routes = [[topology.routes[i][j] for j in index] for i in index]
  return topology_lib.custom(
      name, [topology.devices[i] for i in index],
      topology.bandwidth_gbps[pick], topology.latency_us[pick],
      {k: v for k, v in topology.hardware.items() if k in kinds},
      topology.table_bytes, table_us, channels=channels, routes=routes,
      runtime=topology.runtime)
