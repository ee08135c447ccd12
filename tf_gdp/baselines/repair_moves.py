"""The moves of the memory repair (`repair`): groups off over-full devices.

`repair` decides which moves to try and judges each result with the
simulator; this module makes them, on colocation groups
(`common.GroupView`), from a device per group and the simulated peak per
device: the spill of single groups, the shift of a block of whole layers
(`graph.layer_order`), the memory-first fills, and the overflow descent.
"""

import functools
import heapq

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import layer_order

DESCENT_ROUNDS = 32  # overflow-descent rounds at most
CANDIDATES = 64  # single-group moves an overflow-descent round simulates
EXTENT = 1.5  # a shifted block's bytes at most, as a multiple of the overflow


def total_overflow(peak, capacity):
  """Bytes over capacity, summed over devices (per row of `peak`)."""
  return np.maximum(np.asarray(peak, np.float64) - capacity, 0.0).sum(axis=-1)


class Moves:
  """The moves of `repair`'s steps 2-4 over one graph's groups."""

  def __init__(self, view: common.GroupView,
               topology: topology_lib.Topology):
    self.view = view
    self.capacity = topology.memory_bytes.astype(np.float64)
    self.carried = (view.persistent_bytes + view.activation_bytes).astype(
        np.float64)
    self.movable = view.allowed.sum(axis=1) > 1
    src, dst, nbytes = view.edges
    ends = np.concatenate([src, dst])
    order = np.argsort(ends, kind="stable")
    self.neighbours = np.concatenate([dst, src])[order]
    # A control edge weighs one byte: it still costs a cross-device wait.
    self.neighbour_bytes = np.concatenate([nbytes, nbytes])[order] + 1.0
    self.neighbour_ptr = np.searchsorted(ends[order],
                                         np.arange(view.num_groups + 1))

  def spill(self, group_devices: np.ndarray, peak: np.ndarray,
            slack: float) -> np.ndarray:
    """A copy of `group_devices` with groups moved off over-full devices."""
    view = self.view
    group_devices = group_devices.copy()
    load = peak.astype(np.float64)
    for j, excess in self._overflows(load, slack):
      excess = self._erode(group_devices, load, j, excess)
      mine = np.flatnonzero((group_devices == j) & self.movable &
                            (self.carried > 0))
      cost = view.duration[mine, j] / self.carried[mine]
      for g in mine[np.lexsort((view.rank[mine], cost))]:
        if excess <= 0:
          break
        room = np.where(view.allowed[g], self.capacity - load, -np.inf)
        room[j] = -np.inf
        fits = np.flatnonzero(room >= self.carried[g])
        if not fits.size:
          continue
        # The fastest device with room (a GPU before the roomy host CPU),
        # the roomiest among equals.
        target = int(fits[np.lexsort((-room[fits], view.duration[g, fits]))[0]])
        group_devices[g] = target
        load[j] -= self.carried[g]
        load[target] += self.carried[g]
        excess -= self.carried[g]
    return group_devices

  @functools.cached_property
  def need(self) -> np.ndarray:
    """float[G]: each group's share of a device's peak (`common`'s memory
    model: persistent bytes plus the share of outputs alive at the peak)."""
    try:
      return common.memory_model(self.view).need.astype(np.float64)
    except errors.InputError:  # the estimate says no fit: every byte counts
      return self.carried

  @functools.cached_property
  def layers(self) -> tuple:
    """(rank int64[G], position int64[G], cut float[P + 1]): each group's
    rank and position in layer order (`graph.layer_order`, by its earliest
    member; ties by topological rank), and the bytes that cross each cut
    of that order."""
    view = self.view
    position = layer_order.positions(view.graph)
    size = int(position.max(initial=-1)) + 1
    first = np.full(view.num_groups, np.iinfo(np.int64).max)
    np.minimum.at(first, view.group_of, position)
    rank = np.empty(view.num_groups, np.int64)
    rank[np.lexsort((view.rank, first))] = np.arange(view.num_groups)
    return rank, first, layer_order.cut_bytes(view.graph, position, size)

  @functools.cached_property
  def by_rank(self) -> np.ndarray:
    """int64[G]: the groups in layer order (the inverse of its rank)."""
    return np.argsort(self.layers[0])

  def shift_last(self, group_devices, peak, slack) -> np.ndarray:
    """`shift` of each over-full device's last layers."""
    return self.shift(group_devices, peak, slack, last=True)

  def shift_first(self, group_devices, peak, slack) -> np.ndarray:
    """`shift` of each over-full device's first layers."""
    return self.shift(group_devices, peak, slack, last=False)

  def shift(self, group_devices: np.ndarray, peak: np.ndarray, slack: float,
            *, last: bool) -> np.ndarray:
    """A copy of `group_devices` with whole layers moved off over-full devices.

    From each over-full device, a block of its last (or first) groups in
    layer order (`_extent`) moves, the layer nearest the rest first: to the
    device of the layers beyond the block while it has room, then to the
    fastest primary device with room (the roomiest of equally fast ones),
    and so on. A layer moves with its gradients and updates, so a stage
    boundary shifts instead of the step's forward and backward passes
    parting.
    """
    view = self.view
    group_devices = group_devices.copy()
    load = peak.astype(np.float64)
    need = self.need
    rank, position, cut = self.layers
    for j, excess in self._overflows(load, slack):
      mine = np.flatnonzero((group_devices == j) & self.movable & (need > 0))
      mine = mine[np.argsort(rank[mine], kind="stable")]
      if last:
        mine = mine[::-1]
      covered = self._extent(mine, position, cut, excess, last,
                             self.capacity - load, j)
      target, full = -1, np.zeros(view.num_devices, np.bool_)
      full[j] = True
      # The device of the layers just beyond the block, if it has room, so
      # that an existing stage boundary moves instead of a new one opening.
      beyond = rank[mine[0]] + (1 if last else -1) if mine.size else -1
      if 0 <= beyond < view.num_groups:
        k = int(group_devices[self.by_rank[beyond]])
        if k != j and k in view.primary:
          target = k
      for g in mine[:covered][::-1]:
        if target < 0 or not view.allowed[g, target] or (
            self.capacity[target] - load[target] < need[g]):
          # The next target; a full one is never taken up again.
          if target >= 0:
            full[target] = True
          room = np.where(view.allowed[g] & ~full, self.capacity - load,
                          -np.inf)
          fits = np.intersect1d(np.flatnonzero(room >= need[g]), view.primary)
          if not fits.size:  # no primary device has room: any other
            fits = np.flatnonzero(room >= need[g])
          if not fits.size:
            continue
          target = int(fits[np.lexsort((-room[fits],
                                        view.duration[g, fits]))[0]])
        group_devices[g] = target
        load[j] -= need[g]
        load[target] += need[g]
    return group_devices

  def _overflows(self, load: np.ndarray, slack: float):
    """Yields (device, bytes to free) per over-full device, the most
    over-full first; `load` is read as the caller moves groups."""
    for j in np.argsort(self.capacity - load):
      excess = (load[j] - self.capacity[j]) * (1.0 + slack)
      if excess > 0:
        yield int(j), excess

  def _extent(self, mine, position, cut, excess, last, room, j) -> int:
    """How many of `mine` (groups of device j, outermost first) move: at
    least enough to cover `excess`, at most `EXTENT` times that, never all
    of them nor more than the other primary devices have room for, ending
    where the fewest bytes cross the layer order."""
    total = np.cumsum(self.need[mine])
    least = int(np.searchsorted(total, excess)) + 1
    if least >= mine.size:
      return mine.size
    others = np.setdiff1d(self.view.primary, [j])
    elsewhere = np.maximum(room[others], 0.0).sum() if others.size else (
        np.inf)
    most = int(np.searchsorted(total, min(EXTENT * excess, elsewhere),
                               side="right"))
    most = min(max(most, least), mine.size - 1)
    where = position[mine]
    # A block ends only between layers (a layer's groups share its
    # position), the first such end at or after `most` included.
    ends = np.flatnonzero(where[:-1] != where[1:]) + 1  # block sizes
    ends = ends[ends >= least]
    if not ends.size:
      return least
    ends = ends[:max(1, int(np.searchsorted(ends, most, side="right")))]
    # The cut between the block and what stays: before the block's inner
    # layer when the last layers move, before the first that stays when
    # the first ones do.
    at = where[ends - 1] if last else where[ends]
    return int(ends[np.argmin(cut[at])])

  def _erode(self, group_devices: np.ndarray, load: np.ndarray, j: int,
             excess: float) -> float:
    """Moves groups off device j across its cuts (step 2, in place);
    returns the excess left."""
    on_j = group_devices == j
    src, dst, _ = self.view.edges
    across = on_j[src] != on_j[dst]
    frontier = np.unique(np.where(on_j[src[across]], src[across],
                                  dst[across]))
    heap = []
    for g in frontier.tolist():
      self._push(heap, group_devices, g, j)
    while heap and excess > 0:
      gain, _, g = heapq.heappop(heap)
      if group_devices[g] != j:
        continue
      best = self._best_neighbour(group_devices, g, j)
      if best is None:
        continue
      if best[0] != gain:  # its neighbours moved since: queue it again
        heapq.heappush(heap, (best[0], int(self.view.rank[g]), g))
        continue
      k = best[1]
      if self.capacity[k] - load[k] < self.carried[g]:
        continue
      group_devices[g] = k
      load[j] -= self.carried[g]
      load[k] += self.carried[g]
      excess -= self.carried[g]
      lo, hi = self.neighbour_ptr[g], self.neighbour_ptr[g + 1]
      for h in self.neighbours[lo:hi].tolist():
        if group_devices[h] == j:
          self._push(heap, group_devices, h, j)
    return excess

  def _push(self, heap, group_devices, g: int, j: int) -> None:
    if not self.movable[g] or self.carried[g] <= 0:
      return
    best = self._best_neighbour(group_devices, g, j)
    if best is not None:
      heapq.heappush(heap, (best[0], int(self.view.rank[g]), g))

  def _best_neighbour(self, group_devices, g: int, j: int):
    """(bytes kept on j minus bytes to k, k) for the allowed device k != j
    group g exchanges the most bytes with, or None."""
    lo, hi = self.neighbour_ptr[g], self.neighbour_ptr[g + 1]
    to = np.bincount(group_devices[self.neighbours[lo:hi]],
                     weights=self.neighbour_bytes[lo:hi],
                     minlength=self.view.num_devices)
    stay = to[j]
    to[j] = 0.0
    to[~self.view.allowed[g]] = 0.0
    k = int(np.argmax(to))
    if to[k] <= 0:
      return None
    return float(stay - to[k]), k

  def descend(self, graph, group_devices, peak, step):
    """(groups, peak, step, valid, evaluations) of `repair`'s step 4."""
    view, topology = self.view, self.view.topology
    current = total_overflow(peak, self.capacity)
    valid, used = False, 0
    for _ in range(DESCENT_ROUNDS):
      over = np.flatnonzero(peak > self.capacity)
      moves = [(g, j) for g in np.flatnonzero(np.isin(group_devices, over) &
                                              self.movable)
               for j in np.flatnonzero(view.allowed[g])
               if j != group_devices[g]]
      if not moves:
        break
      if len(moves) > CANDIDATES:
        cost = [view.duration[g, group_devices[g]] / max(self.carried[g], 1.0)
                for g, _ in moves]
        moves = [moves[i] for i in np.argsort(cost, kind="stable")[
            :CANDIDATES]]
      candidates = np.repeat(group_devices[None], len(moves), axis=0)
      for row, (g, j) in enumerate(moves):
        candidates[row, g] = j
      judged = simulator.simulate_batch(
          graph, candidates[:, view.group_of], topology)
      used += len(moves)
      overflow = total_overflow(judged.peak_memory_bytes, self.capacity)
      pick = int(np.lexsort((judged.step_time_us, overflow))[0])
      if overflow[pick] >= current:
        break
      group_devices, peak = candidates[pick], judged.peak_memory_bytes[pick]
      current, step = overflow[pick], float(judged.step_time_us[pick])
      valid = bool(judged.valid[pick])
      if valid:
        break
    return group_devices, peak, step, valid, used

  def fill(self, primary_first: bool) -> np.ndarray:
    """int64[G]: groups in topological order, devices filled by share.

    With `primary_first` the primary devices (`GroupView.primary`, the GPUs
    of a GPU box) share the estimated need first, and only what they cannot
    hold goes to the others; else every device takes its share of its
    budget.
    """
    view = self.view
    try:
      model = common.memory_model(view)
    except errors.InputError:  # the estimate says no fit: fill by capacity
      model = common.MemoryModel(
          need=self.carried, budget=self.capacity, activation_fraction=1.0,
          headroom=1.0)
    primary = np.zeros(view.num_devices, bool)
    primary[view.primary if primary_first else slice(None)] = True
    need, room = model.need.sum(), model.budget[primary].sum()
    share = np.where(primary, model.budget * min(1.0, need / max(room, 1.0)),
                     0.0)
    if need > room:  # the rest over the other devices, by their budget
      others = model.budget[~primary].sum()
      share[~primary] = model.budget[~primary] * min(
          1.0, (need - room) / max(others, 1.0))
    used = np.zeros(view.num_devices, np.float64)
    group_devices = np.zeros(view.num_groups, np.int64)
    current = int(view.primary[0])
    for g in view.order:
      if used[current] + model.need[g] > share[current]:
        left = share - used
        left[~view.allowed[g]] = -np.inf
        current = int(np.argmax(left))
      j = current if view.allowed[g, current] else view.fastest_allowed(g)
      group_devices[g] = j
      used[j] += model.need[g]
    return group_devices
