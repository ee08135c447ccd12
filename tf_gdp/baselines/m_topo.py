"""m-TOPO: Baechi's memory-constrained topological placement.

Jeon et al., "Baechi: Fast Device Placement of Machine Learning Graphs"
(SoCC 2020). The algorithm:

1. Sort the (co-placement) groups topologically.
2. Give each device a balanced share of the total compute:
   quota_j = total work x speed_j / sum of speeds (work measured on the
   primary kind, so identical GPUs get equal shares).
3. Walk the groups in order, filling the current device; move on to the
   next device once the current one has reached its quota, or when its
   remaining memory cannot hold the next group ("m-": memory-constrained).
   The last device takes whatever remains, memory permitting.

Consecutive groups stay together, so communication is only what crosses the
few cut points; the price is that a device idles while the others work on
other parts of the order (a pipeline without micro-batches).

Groups that may not use the current device (a CPU-only op, a pin) go to
their fastest allowed device with room and do not count towards a quota.
If the walk runs past the last device with groups left, they go to any
allowed device with room (most free first); if none has room, InputError.
Memory is the estimate of `common.memory_model`.
"""

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """Contiguous topological chunks of balanced compute per device."""
  del seed  # deterministic
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  book = common.MemoryBook(view, model)
  primary = view.primary
  speeds = topology.speeds[primary]
  # Work of a group in primary-device time at unit speed.
  work = view.duration[:, primary[0]] * speeds[0]
  free = view.allowed[:, primary].all(axis=1)
  quota = work[free].sum() * speeds / speeds.sum()
  load = np.zeros(primary.size)
  current = 0
  group_device = np.empty(view.num_groups, np.int64)
  for g in view.order:
    if not free[g]:
      group_device[g] = _best_with_room(view, book, g)
      book.take(g, group_device[g])
      continue
    while current < primary.size - 1 and (
        (load[current] > 0 and load[current] + work[g] / 2 > quota[current])
        or not book.fits(g, int(primary[current]))):
      current += 1
    j = int(primary[current])
    if not book.fits(g, j):
      j = _best_with_room(view, book, g, prefer_free=True)
    group_device[g] = j
    book.take(g, j)
    if j == primary[current]:
      load[current] += work[g]
  common.note("quota_us", [round(float(q), 3) for q in quota])
  return view.expand(group_device)


def _best_with_room(view, book, g: int, prefer_free: bool = False) -> int:
  """Fastest allowed device with room (most free memory first if asked)."""
  choices = book.choices(g)
  if choices.size == 0:
    raise book.no_room(g)
  if prefer_free:
    return int(choices[np.argmax(book.free()[choices])])
  return int(choices[np.argmin(view.duration[g, choices])])
