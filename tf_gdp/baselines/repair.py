"""Makes any method's placement valid, so that none is ever returned invalid.

Every placement a method returns (a baseline, the policy's greedy or sampled
placement, a PPO sample, a placement loaded from a file) goes through
`repair` before it is used as a result or trained on. A valid placement is
returned unchanged. Otherwise, on colocation groups (`common.GroupView`):

1. Hard constraints: a group split over devices goes whole to its first
   member's device, and a group on a device its kinds or pins forbid goes
   to the allowed device where it runs fastest.
2. Memory, by the simulator's exact peak, three ways from the given
   placement; the fastest valid result wins.
   a. Spill: groups leave each over-full device until the bytes they carry
      away (persistent plus output bytes) cover the overflow plus a slack.
      First across its cuts: a group with a neighbour on another device
      moves to the allowed device it exchanges the most bytes with, if that
      has room, the group whose move cuts the most bytes first, and its
      neighbours become candidates in turn (a pipeline's cut shifts
      instead of its stages scattering). Then, for what is left, cheapest
      first: the group with the least compute per byte moved goes to the
      fastest allowed device with room for it (the roomiest of equally
      fast ones).
   b. and c. Shift (`graph.layer_order`): each over-full device's last
      (b) or first (c) layers move as one block, a layer with its
      gradients and updates, enough to cover the overflow by the memory
      estimate (`common.memory_model`) and up to `EXTENT` times that,
      ending at the cut of the layer order fewest bytes cross; they go to
      the device of the layers beyond the block if it has room (a stage
      boundary moves), else to the fastest primary device with room. A
      training step that overflows one device this way becomes a pipeline
      of whole layers, where a spill of single groups would part forward
      from backward passes and send every activation over a link.
   Each way is simulated again after each round; the slack doubles each
   round, because a moved group's outputs may not be live at the
   device's peak.
3. If that still does not fit, the repair starts over from a memory-first
   fill: groups in topological order, the primary devices (the GPUs of a
   GPU box) filled up to their share of the estimated need
   (`common.memory_model`) and the rest to the others, then step 2a again;
   then once more from a fill of every device by its share of capacity.
4. Last, overflow descent from where step 3 ended: every
   round simulates single-group moves off the over-full devices (all of
   them on a small graph, the `CANDIDATES` cheapest otherwise) and keeps
   the one that cuts the total overflow most, until it fits or no move
   helps.
5. A small problem, at most `EXHAUSTIVE` group placements in all, that
   steps 2-4 leave invalid is solved exactly: every placement is simulated
   and the fastest valid one kept.

A placement the repair cannot make valid comes back with `valid=False` and
the simulator's reason. Callers then fail with that reason: they never use
it as a result. The simulations the repair makes are counted in
`evaluations`.
"""

import dataclasses
import functools
import heapq
import itertools
from typing import List, Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import layer_order
from tf_gdp.graph import op_graph

ROUNDS = 8  # rounds of each way of step 2, and of the spill after a fill
SLACK = 0.05  # first round's extra bytes to free, as a share of the overflow
CANDIDATES = 64  # single-group moves an overflow-descent round simulates
EXHAUSTIVE = 4096  # group placements few enough to simulate them all
EXTENT = 1.5  # a shifted block's bytes at most, as a multiple of the overflow


@dataclasses.dataclass(frozen=True)
class Repair:
  """A placement after repair.

  Attributes:
    placement: int32[num_nodes] the repaired placement (the input if valid).
    valid: whether it is valid now.
    changed: whether the repair moved anything.
    moved_groups: colocation groups on another device than before.
    evaluations: simulations the repair made.
    step_time_us: the simulated step time of `placement`.
    reason: why `placement` is still invalid, or None.
    original_reason: why the input was invalid, or None if it was valid.
  """
  placement: np.ndarray
  valid: bool
  changed: bool
  moved_groups: int
  evaluations: int
  step_time_us: float
  reason: Optional[str]
  original_reason: Optional[str]

  def summary(self) -> dict:
    """What a report says about the repair (JSON-able)."""
    return {"moved_groups": self.moved_groups, "valid": self.valid,
            "evaluations": self.evaluations,
            "original_reason": self.original_reason,
            "step_time_us": self.step_time_us, "reason": self.reason}


def repair(graph: op_graph.OpGraph, topology: topology_lib.Topology,
           placement) -> Repair:
  """`placement` (int[num_nodes]) made valid if the repair can; module doc."""
  return repair_batch(graph, topology, np.asarray(placement)[None])[0]


def repair_batch(graph: op_graph.OpGraph, topology: topology_lib.Topology,
                 placements) -> List[Repair]:
  """Repairs B placements (int[B, num_nodes]); invalid rows share batches."""
  placements = np.asarray(placements)
  if placements.ndim != 2 or placements.shape[1] != graph.num_nodes:
    raise errors.InputError(
        f"repair needs placements of shape [batch, {graph.num_nodes}], got "
        f"{placements.shape}")
  checked = 0  # the simulation of the check below, when it found work
  if placements.size and placements.min() >= 0 and (
      placements.max() < topology.num_devices):
    checked = 1
    judged = simulator.simulate_batch(graph, placements, topology)
    if judged.valid.all():  # the common case in training: nothing to build
      return [Repair(placement=row.astype(np.int32), valid=True,
                     changed=False, moved_groups=0, evaluations=1,
                     step_time_us=float(t), reason=None, original_reason=None)
              for row, t in zip(placements, judged.step_time_us)]
  view = common.group_view(graph, topology)
  first = view.members[view.member_ptr[:-1]]
  original = np.clip(placements.astype(np.int64), 0, topology.num_devices - 1)
  groups = _obey_constraints(view, original[:, first])
  fixed = groups[:, view.group_of]
  judged = simulator.simulate_batch(graph, fixed, topology)
  evaluations = np.full(len(placements), 1 + checked, np.int64)
  reasons = [None if ok else _reason(graph, row, topology)
             for ok, row in zip(judged.valid, original)]
  step = judged.step_time_us.astype(np.float64)
  valid = judged.valid.copy()
  peak = judged.peak_memory_bytes.copy()
  pending = np.flatnonzero(~valid)
  if pending.size:
    work = _Spill(view, topology)
    # Step 2: each way of moving groups off, from the given placement; the
    # fastest valid result per row.
    tried = [_rounds(graph, topology, view, move, groups[pending],
                     peak[pending])
             for move in (work.spill, work.shift_last, work.shift_first)]
    for attempt in tried:
      evaluations[pending] += attempt[4]
    times = np.stack([np.where(t[3], t[2], np.inf) for t in tried])
    for i, b in enumerate(pending):
      pick = tried[int(np.argmin(times[:, i]))]
      groups[b], peak[b], step[b], valid[b] = (pick[0][i], pick[1][i],
                                               pick[2][i], pick[3][i])
    pending = pending[~valid[pending]]
    # Step 3: the fills, each followed by step 2's spill.
    for primary_first in (True, False):
      if not pending.size:
        break
      groups[pending] = work.fill(primary_first=primary_first)
      peak[pending], step[pending], valid[pending] = _judge(
          graph, topology, view, groups[pending])
      evaluations[pending] += 1
      pending = pending[~valid[pending]]
      if not pending.size:
        break
      (groups[pending], peak[pending], step[pending], valid[pending],
       used) = _rounds(graph, topology, view, work.spill, groups[pending],
                       peak[pending])
      evaluations[pending] += used
      pending = pending[~valid[pending]]
    for b in pending:
      groups[b], peak[b], step[b], valid[b], used = work.descend(
          graph, groups[b], peak[b], step[b])
      evaluations[b] += used
    exact = _exhaustive(graph, topology, view) if not valid[pending].all() \
        else None
    for b in pending:
      if not valid[b] and exact is not None:
        groups[b], step[b], valid[b] = exact[0], exact[1], True
        evaluations[b] += exact[2]
  results = []
  for b in range(len(placements)):
    placement = groups[b][view.group_of].astype(np.int32)
    moved = int((groups[b] != original[b, first]).sum())
    changed = moved > 0 or not np.array_equal(placement, placements[b])
    reason = None if valid[b] else _reason(graph, placement, topology)
    results.append(Repair(
        placement=placement, valid=bool(valid[b]), changed=changed,
        moved_groups=moved, evaluations=int(evaluations[b]),
        step_time_us=float(step[b]), reason=reason,
        original_reason=reasons[b]))
  return results


def _obey_constraints(view: common.GroupView,
                      group_devices: np.ndarray) -> np.ndarray:
  """[B, G] device per group with every group on a device it may use."""
  groups = np.arange(view.num_groups)
  fastest = np.argmin(np.where(view.allowed, view.duration, np.inf), axis=1)
  ok = view.allowed[groups[None, :], group_devices]
  return np.where(ok, group_devices, fastest[None, :])


def _judge(graph, topology, view, group_devices):
  """(peak [B, d], step [B], valid [B]) of group placements, one batch."""
  result = simulator.simulate_batch(graph, group_devices[:, view.group_of],
                                    topology)
  return (result.peak_memory_bytes, result.step_time_us.astype(np.float64),
          result.valid)


def _rounds(graph, topology, view, move, group_devices, peak):
  """(groups, peak, step, valid, evaluations) per row after up to ROUNDS
  `move`s, each judged, until the row is valid; the slack doubles each
  round, because a moved group's outputs may not be live at the peak."""
  group_devices, peak = group_devices.copy(), peak.copy()
  rows = np.arange(len(group_devices))
  step = np.full(rows.size, np.inf)
  valid = np.zeros(rows.size, np.bool_)
  used = np.zeros(rows.size, np.int64)
  for round_index in range(ROUNDS):
    if not rows.size:
      break
    slack = SLACK * 2.0**round_index
    group_devices[rows] = np.stack([move(group_devices[b], peak[b], slack)
                                    for b in rows])
    peak[rows], step[rows], valid[rows] = _judge(graph, topology, view,
                                                 group_devices[rows])
    used[rows] += 1
    rows = rows[~valid[rows]]
  return group_devices, peak, step, valid, used


def _reason(graph, placement, topology) -> Optional[str]:
  return simulator.simulate(graph, np.asarray(placement, np.int32),
                            topology).reason


def _exhaustive(graph, topology, view):
  """(groups, step, evaluations) of the fastest valid placement of a small
  problem (step 5), or None: too big, or none is valid."""
  choices = [np.flatnonzero(view.allowed[g]) for g in range(view.num_groups)]
  if EXHAUSTIVE < 1 or sum(np.log(max(c.size, 1)) for c in choices) > (
      np.log(EXHAUSTIVE)):
    return None
  every = np.array(list(itertools.product(*choices)), np.int64).reshape(
      -1, view.num_groups)
  judged = simulator.simulate_batch(graph, every[:, view.group_of], topology)
  if not judged.valid.any():
    return None
  best = int(np.argmin(np.where(judged.valid, judged.step_time_us, np.inf)))
  return every[best], float(judged.step_time_us[best]), len(every)


def _overflow(peak, capacity):
  """Bytes over capacity, summed over devices (per row of `peak`)."""
  return np.maximum(np.asarray(peak, np.float64) - capacity, 0.0).sum(axis=-1)


class _Spill:
  """Moves of step 2 and the fill of step 3 over one graph's groups."""

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
    for j, excess in self._overflows(load, slack):
      need = self.need
      rank, position, cut = self.layers
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
        if target >= 0 and view.allowed[g, target] and (
            self.capacity[target] - load[target] >= need[g]):
          pass
        else:  # the next target; a full one is never taken up again
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
    """(groups, peak, step, valid, evaluations) of step 4 (module doc)."""
    view, topology = self.view, self.view.topology
    current = _overflow(peak, self.capacity)
    valid, used = False, 0
    for _ in range(ROUNDS * 4):
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
      overflow = _overflow(judged.peak_memory_bytes, self.capacity)
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
