"""METIS: balanced k-way partitioning of the group graph, one part per device.

Karypis and Kumar, "Multilevel k-way partitioning scheme for irregular
graphs", J. Parallel Distrib. Comput. 48(1), 1998 (METIS's k-way scheme,
here through pymetis). Partitioning is the
classic non-scheduling placement baseline (used e.g. by Placeto and GDP's
related work): split the work evenly, cut as few bytes as possible.

1. The colocation-group graph (`common.GroupView`), made undirected: vertex
   weight = the group's compute time on a primary device (scaled to
   integers, at least 1), edge weight = bytes between the two groups in both
   directions (each tensor counted once per destination group; scaled to
   integers, at least 1 so a control dependency still weighs).
2. `part_graph` into k parts, one per device, with target part weights
   proportional to device speed, seeded by `seed`.
3. Parts go to devices by memory: the part with the largest estimated need
   to the device with the largest budget, and so on.
4. Fix-ups: a group whose part's device it may not use (a CPU-only op, a
   pin) moves to the allowed device it exchanges most bytes with (ties: the
   fastest); then devices over their memory budget shed groups
   (`common.repair_memory`).

The number of parts. The textbook setting is k = p, the number of primary
devices (the GPUs). A balanced p-way cut must split even a chain whose
transfers cost more than all its compute, so by default every k from 1 to
p is tried (k = 1 is one device; k < p uses the k devices with the largest
memory budgets) and the placement the simulator finds fastest among those
that fit is kept: p simulator evaluations. `num_parts=p` gives the
textbook method alone.

METIS does not see time: a balanced, low-cut partition may still serialise
(e.g. the layers of one LSTM split across devices in alternation), which is
exactly why it is a baseline.
"""

from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

_VERTEX_SCALE = 1e7  # total vertex weight after scaling
_EDGE_SCALE = 1e8  # total edge weight after scaling


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, num_parts: Optional[int] = None,
          activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """k-way partition by compute with minimal byte cut; seeded.

  Args:
    graph, topology: what to place where.
    seed: METIS's random seed.
    num_parts: k; None tries every k from 1 to the number of primary
      devices and keeps the placement the simulator finds fastest.
    activation_fraction, memory_headroom: see `common.memory_model`.
  """
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  primary = view.primary[np.argsort(-model.budget[view.primary],
                                    kind="stable")]
  if num_parts is None:
    counts = range(1, primary.size + 1)
  elif 1 <= num_parts <= primary.size:
    counts = [int(num_parts)]
  else:
    raise errors.InputError(
        f"num_parts must be in [1, {primary.size}] (the primary devices), "
        f"got {num_parts}")
  adjacency = _undirected(view)
  best, best_time, failure, tried = None, np.inf, None, {}
  for count in counts:
    try:
      placement = _place_in_parts(view, model, adjacency, primary[:count],
                                  seed)
    except errors.InputError as e:  # these k devices cannot hold the graph
      failure = e
      continue
    if len(counts) == 1:
      return placement
    result = common.simulate(graph, placement, topology)
    tried[count] = round(float(result.step_time_us), 3)
    # Prefer placements that fit (by simulation), then the fastest.
    key = (not result.valid, result.step_time_us)
    if best is None or key < best_time:
      best, best_time = placement, key
  if best is None:
    raise failure
  common.note("step_time_us_by_parts", tried)
  return best


def partition_devices(graph: op_graph.OpGraph,
                      topology: topology_lib.Topology, *,
                      seed: int = 0,
                      num_parts: Optional[int] = None) -> np.ndarray:
  """int64[n]: each op's device in one balanced cut over the primary devices.

  The textbook METIS placement without its fix-ups: part i of a k-way cut
  of the group graph goes to the i-th of the k primary devices (k =
  `num_parts`, the devices with the most memory; None: all of them), and
  ops whose group may not run on every one of them get -1, as does every op
  when k < 2. Memory is not considered; a caller that needs a valid
  placement repairs it (`repair`). The policy's exploration pushes towards
  the cut over all primary devices (`policy.features`).
  """
  view = common.group_view(graph, topology)
  devices = view.primary
  if num_parts is not None:
    if not 1 <= num_parts <= devices.size:
      raise errors.InputError(
          f"num_parts must be in [1, {devices.size}] (the primary devices), "
          f"got {num_parts}")
    memory = topology.memory_bytes[devices]
    devices = devices[np.argsort(-memory, kind="stable")[:num_parts]]
  free = view.allowed[:, devices].all(axis=1)
  group_device = np.full(view.num_groups, -1, np.int64)
  if devices.size >= 2 and free.any():
    parts = _partition(view, _undirected(view), devices, free, seed)
    group_device[free] = devices[parts[free]]
  return group_device[view.group_of]


def _place_in_parts(view, model, adjacency, devices: np.ndarray,
                    seed: int) -> np.ndarray:
  """One METIS placement over `devices` (one part each), fixed up."""
  free = view.allowed[:, devices].all(axis=1)
  if devices.size == 1:
    parts = np.zeros(view.num_groups, np.int64)
  else:
    parts = _partition(view, adjacency, devices, free, seed)
  part_device = _devices_for_parts(model, parts, devices)
  group_device = part_device[parts]
  for g in np.flatnonzero(~view.allowed[np.arange(view.num_groups),
                                        group_device]):
    group_device[g] = _closest_allowed(view, adjacency, group_device, int(g))
  group_device = common.repair_memory(view, model, group_device)
  return view.expand(group_device)


def _undirected(view: common.GroupView) -> tuple:
  """CSR (ptr, neighbours, bytes) of the group graph, both directions merged."""
  src, dst, nbytes = view.edges
  count = view.num_groups
  low, high = np.minimum(src, dst), np.maximum(src, dst)
  pair, inverse = np.unique(low * count + high, return_inverse=True)
  total = np.bincount(inverse, weights=nbytes.astype(np.float64),
                      minlength=pair.shape[0])
  a, b = pair // count, pair % count
  ends = np.concatenate([a, b])
  others = np.concatenate([b, a])
  weights = np.concatenate([total, total])
  by_vertex = np.lexsort((others, ends))
  ptr = np.searchsorted(ends[by_vertex], np.arange(count + 1))
  return ptr, others[by_vertex], weights[by_vertex]


def _partition(view, adjacency, devices, free, seed: int) -> np.ndarray:
  """pymetis k-way parts (0..p-1) per group."""
  try:
    import pymetis  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise errors.InputError(
        "METIS needs pymetis (a tf-gdp dependency): pip install pymetis") from e
  ptr, neighbours, nbytes = adjacency
  speeds = view.topology.speeds[devices]
  work = np.where(free, view.duration[:, devices[0]] * speeds[0], 0.0)
  total_work = work.sum()
  scale = _VERTEX_SCALE / total_work if total_work > 0 else 0.0
  vweights = 1 + np.floor(work * scale).astype(np.int64)
  total_bytes = nbytes.sum()
  scale = _EDGE_SCALE / total_bytes if total_bytes > 0 else 0.0
  eweights = 1 + np.floor(nbytes * scale).astype(np.int64)
  tpwgts = None
  if not np.allclose(speeds, speeds[0]):
    tpwgts = (speeds / speeds.sum()).tolist()
  result = pymetis.part_graph(
      int(devices.size),
      pymetis.CSRAdjacency(ptr.tolist(), neighbours.tolist()),
      vweights=vweights.tolist(), eweights=eweights.tolist(), tpwgts=tpwgts,
      options=pymetis.Options(seed=int(seed)))
  return np.asarray(result.vertex_part, np.int64)


def _devices_for_parts(model, parts: np.ndarray,
                       devices: np.ndarray) -> np.ndarray:
  """Largest estimated part need -> largest device budget (stable)."""
  need = np.bincount(parts, weights=model.need, minlength=devices.size)
  by_need = np.argsort(-need, kind="stable")
  by_budget = devices[np.argsort(-model.budget[devices], kind="stable")]
  part_device = np.empty(devices.size, np.int64)
  part_device[by_need] = by_budget
  return part_device


def _closest_allowed(view, adjacency, group_device, g: int) -> int:
  """Allowed device of group g holding most bytes of its neighbours."""
  ptr, neighbours, nbytes = adjacency
  choices = np.flatnonzero(view.allowed[g])
  near = group_device[neighbours[ptr[g]:ptr[g + 1]]]
  weight = np.bincount(near, weights=nbytes[ptr[g]:ptr[g + 1]],
                       minlength=view.num_devices)[choices]
  best = choices[weight == weight.max()]
  return int(best[np.argmin(view.duration[g, best])])
