"""Makes any method's placement valid, so that none is ever returned invalid.

Every placement a method returns (a baseline, the policy's greedy or sampled
placement, a PPO sample, a placement loaded from a file) goes through
`repair` before it is used as a result or trained on. A valid placement is
returned unchanged. Otherwise, on colocation groups (`common.GroupView`):

1. Hard constraints: a group split over devices goes whole to its first
   member's device, and a group on a device its kinds or pins forbid goes
   to the allowed device where it runs fastest.
2. Memory, by the simulator's exact peak, from the given placement: the
   two shifts first, the fastest valid result of the two wins; the spill
   only where neither shift fits.
   a. and b. Shift (`graph.layer_order`): each over-full device's last
      (a) or first (b) layers move as one block, a layer with its
      gradients and updates, enough to cover the overflow by the memory
      estimate (`common.memory_model`) and up to `repair_moves.EXTENT`
      times that, ending at the cut of the layer order fewest bytes
      cross; they go to the device of the layers beyond the block if it
      has room (a stage boundary moves), else to the fastest primary
      device with room. A training step that overflows one device this
      way becomes a pipeline of whole layers, where a spill of single
      groups would part forward from backward passes and send every
      activation over a link.
   c. Spill: groups leave each over-full device until the bytes they carry
      away (persistent plus output bytes) cover the overflow plus a slack.
      First across its cuts: a group with a neighbour on another device
      moves to the allowed device it exchanges the most bytes with, if that
      has room, the group whose move cuts the most bytes first, and its
      neighbours become candidates in turn (a pipeline's cut shifts
      instead of its stages scattering). Then, for what is left, cheapest
      first: the group with the least compute per byte moved goes to the
      fastest allowed device with room for it (the roomiest of equally
      fast ones).
   Each way is simulated again after each round that moved something;
   the slack doubles each round, because a moved group's outputs may not
   be live at the device's peak. A shift fits in one or two rounds as a
   rule; the spill takes about six (its bytes carried away overstate what
   leaves the peak), and it was the fastest way on few placements, so it
   runs only where it is needed: the repair's simulations count against
   every search's budget.
3. If that still does not fit, the repair starts over from a memory-first
   fill: groups in topological order, the primary devices (the GPUs of a
   GPU box) filled up to their share of the estimated need
   (`common.memory_model`) and the rest to the others, then step 2a again;
   then once more from a fill of every device by its share of capacity.
4. Last, overflow descent from where step 3 ended: every round
   simulates single-group moves off the over-full devices (all of them on
   a small graph, the `repair_moves.CANDIDATES` cheapest otherwise) and
   keeps the one that cuts the total overflow most, until it fits or no
   move helps.
5. A small problem, at most `EXHAUSTIVE` group placements in all, that
   steps 2-4 leave invalid is solved exactly: every placement is simulated
   and the fastest valid one kept.

A placement the repair cannot make valid comes back with `valid=False` and
the simulator's reason. Callers then fail with that reason: they never use
it as a result. The simulations the repair makes are counted in
`evaluations`.
"""

import dataclasses
import itertools
from typing import List, Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.baselines import repair_moves
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

ROUNDS = 8  # rounds of each way of step 2, and of the spill after a fill
SLACK = 0.05  # first round's extra bytes to free, as a share of the overflow
EXHAUSTIVE = 4096  # group placements few enough to simulate them all


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
  # Rows the constraints left as they were keep the check's simulation.
  again = ~np.all(fixed == placements, axis=1) if checked else np.ones(
      len(placements), np.bool_)
  step = judged.step_time_us.astype(np.float64) if checked else np.zeros(
      len(placements), np.float64)
  valid = judged.valid.copy() if checked else np.zeros(len(placements),
                                                      np.bool_)
  peak = judged.peak_memory_bytes.astype(np.float64) if checked else (
      np.zeros((len(placements), topology.num_devices), np.float64))
  if again.any():
    peak[again], step[again], valid[again] = _judge(
        graph, topology, view, groups[again])
  evaluations = checked + again.astype(np.int64)
  reasons = [None if ok else _reason(graph, row, topology)
             for ok, row in zip(valid, original)]
  pending = np.flatnonzero(~valid)
  if pending.size:
    work = repair_moves.Moves(view, topology)
    # Step 2: the shifts, then the spill where neither fits (module doc).
    for ways in ((work.shift_last, work.shift_first), (work.spill,)):
      if not pending.size:
        break
      tried = [_rounds(graph, topology, view, move, groups[pending],
                       peak[pending], step[pending]) for move in ways]
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
                       peak[pending], step[pending])
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


def _rounds(graph, topology, view, move, group_devices, peak, step):
  """(groups, peak, step, valid, evaluations) per row after up to ROUNDS
  `move`s, each judged, until the row is valid; the slack doubles each
  round, because a moved group's outputs may not be live at the peak. A
  move that changes nothing is not simulated again."""
  group_devices, peak, step = group_devices.copy(), peak.copy(), step.copy()
  rows = np.arange(len(group_devices))
  valid = np.zeros(rows.size, np.bool_)
  used = np.zeros(rows.size, np.int64)
  for round_index in range(ROUNDS):
    if not rows.size:
      break
    slack = SLACK * 2.0**round_index
    moved = np.stack([move(group_devices[b], peak[b], slack) for b in rows])
    changed = rows[(moved != group_devices[rows]).any(axis=1)]
    group_devices[rows] = moved
    if changed.size:
      peak[changed], step[changed], valid[changed] = _judge(
          graph, topology, view, group_devices[changed])
      used[changed] += 1
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
