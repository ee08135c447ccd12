"""Relabellings of a topology's devices that the cost model cannot tell apart.

A search names interchangeable GPUs arbitrarily: the same pipeline shows up
as GPUs 0-1 on one graph and 2-3 on the next. Imitating those names teaches
noise, and a placer that decides every group at once cannot learn which of
two equal names a search happened to pick. Imitation therefore scores each
target under every symmetry of its topology and imitates the one closest to
what the policy already predicts (`imitation`).

A symmetry is a permutation of the devices that maps every device to one of
the same kind, speed and memory and every link to one of the same bandwidth,
latency and (with shared channels) channel route, so a relabelled placement
simulates exactly as the original. The identity comes first.
"""

import itertools

import numpy as np

from tf_gdp.cost import topology as topology_lib

# More symmetries than this (8 identical, fully connected GPUs have 40,320)
# are cut to the first ones in enumeration order: the policy is matched to
# the closest of those.
MAX_SYMMETRIES = 1024


def symmetries(topology: topology_lib.Topology) -> np.ndarray:
  """int32[P, D]: the topology's symmetries (module doc), identity first."""
  devices = topology.devices
  classes = {}
  for index, device in enumerate(devices):
    classes.setdefault((device.kind, device.speed, device.memory_bytes),
                       []).append(index)
  members = list(classes.values())
  kept = []
  for choice in itertools.product(*(itertools.permutations(m)
                                    for m in members)):
    permutation = np.empty(len(devices), np.int64)
    for source, image in zip(members, choice):
      permutation[source] = image
    if _preserves_links(topology, permutation):
      kept.append(permutation)
      if len(kept) >= MAX_SYMMETRIES:
        break
  return np.asarray(kept, np.int32)


def _preserves_links(topology: topology_lib.Topology,
                     permutation: np.ndarray) -> bool:
  p = permutation
  for matrix in (topology.bandwidth_gbps, topology.latency_us):
    if not np.array_equal(matrix[np.ix_(p, p)], matrix):
      return False
  if topology.table_us is not None and not np.array_equal(
      topology.table_us[np.ix_(p, p)], topology.table_us):
    return False
  if topology.contended:
    # A route of (p(i), p(j)) must load the channels (i, j)'s route loads,
    # up to one renaming of channels (of equal bandwidth) for every pair.
    d = len(p)
    renaming = {}
    for i in range(d):
      for j in range(d):
        mine, theirs = topology.routes[i][j], topology.routes[p[i]][p[j]]
        if len(mine) != len(theirs):
          return False
        for a, b in zip(mine, theirs):
          if renaming.setdefault(a, b) != b or (
              topology.channel_gbps[a] != topology.channel_gbps[b]):
            return False
    return len(set(renaming.values())) == len(renaming)
  return True
