"""local_search: the search a practitioner would write, the bar for any search.

A learned placer's search (GDP fine-tuning, HDP) spends simulator
evaluations; the question is what the same evaluations buy without any
learning. This is that plain search: start from the best of the cheap
baselines, then hill climbing over colocation groups with an occasional
simulated-annealing step.

* Start: single_device, m_topo, m_etf, m_sct, heft, metis, side_offload,
  contiguous_dp, and stage_pipeline where a stage rule applies, each run
  (its own simulator calls count), then all judged in one batch by the
  simulator on the same topology and costs, each one that does not fit
  memory repaired (`repair`, its simulations counted); the fastest valid
  one is the start.
* Moves, each a change of the current group placement: one group to another
  device; a swap of two groups' devices; every group of a numbered scope
  (`graph.scopes.numbered_scopes`: `layer_3`, `encoder/layer_2`, `block5`,
  a backward op joining its forward scope) to one device; a contiguous
  chunk of the groups' topological order (1-10% of the groups) to one
  device. And two moves along the current cut, which a random device
  rarely helps: one end of a group edge between two devices joins the
  other end's device ("border"), and a run of the topological order that
  ends or starts at such an edge (1 group to 10% of them, log-uniform)
  crosses it ("shift"), sliding a stage boundary. Each of the six is
  proposed equally often (`MOVES`; `PLAIN_MOVES` are the first four). A
  group only goes to a device every member may use (allowed kinds, pins);
  memory is the simulator's exact peak.
* Each round proposes `batch` candidates and simulates them in one
  `simulate_batch`; invalid ones (memory) are rejected; the best candidate
  replaces the current placement if it is faster, or, if slower, with
  probability exp(-(slowdown) / (temperature x current x remaining share
  of the budget)): annealing that cools to a pure hill climb.
* Budget: `evaluations` simulator evaluations in all, the starts' included
  (the last round is cut to what is left), and optionally `seconds`. A
  candidate priced before (a move back, a repeat) takes its known time and
  costs nothing; after `IDLE_ROUNDS` rounds with nothing new (a tiny
  graph whose placements are exhausted) the climb stops. The
  info holds the best-so-far curve `best_so_far`: [evaluations, best step
  time us] after the starts and after every round that improved it.

Deterministic for a given seed.
"""

import dataclasses
import math
import time
from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.baselines import contiguous_dp
from tf_gdp.baselines import heft
from tf_gdp.baselines import m_etf
from tf_gdp.baselines import m_sct
from tf_gdp.baselines import m_topo
from tf_gdp.baselines import metis
from tf_gdp.baselines import repair
from tf_gdp.baselines import side_offload
from tf_gdp.baselines import single_device
from tf_gdp.baselines import stage_pipeline
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph
from tf_gdp.graph import scopes

STARTS = {"single_device": single_device.place, "m_topo": m_topo.place,
          "m_etf": m_etf.place, "m_sct": m_sct.place, "heft": heft.place,
          "metis": metis.place, "side_offload": side_offload.place,
          "contiguous_dp": contiguous_dp.place}
# Random moves (module doc), then the moves along the current cut.
PLAIN_MOVES = ("group", "swap", "scope", "chunk")
BORDER_MOVES = ("border", "shift")
MOVES = PLAIN_MOVES + BORDER_MOVES
# Rounds in a row whose candidates were all priced before: the climb stops.
IDLE_ROUNDS = 20


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, evaluations: int = 2000,
          seconds: Optional[float] = None, batch: int = 16,
          temperature: float = 0.01, moves: tuple = MOVES) -> np.ndarray:
  """Hill climbing with annealing from the best cheap baseline (module doc).

  `moves` are the kinds proposed (`MOVES`, `PLAIN_MOVES`).
  """
  if evaluations < 1 or batch < 1 or temperature < 0:
    raise errors.InputError(
        f"local_search needs evaluations >= 1, batch >= 1 and temperature "
        f">= 0; got {evaluations}, {batch}, {temperature}")
  clock = time.perf_counter()
  start, current, used = _start(graph, topology, seed)
  if seconds is not None:
    seconds = max(0.0, seconds - (time.perf_counter() - clock))
  climbed = climb(graph, topology, start, current, evaluations=evaluations,
                  used=used, seed=seed, seconds=seconds, batch=batch,
                  temperature=temperature, moves=tuple(moves))
  common.note("rounds", climbed.rounds)
  common.note("accepted", climbed.accepted)
  common.note("best_so_far", climbed.curve)
  return climbed.placement


@dataclasses.dataclass
class Climb:
  """What `climb` found.

  Attributes:
    placement: int32[num_nodes] the best placement seen (the start if no
      move beat it).
    step_time_us: its step time (inf if neither it nor any move was valid).
    evaluations: the budget's evaluations used in all, `used` included.
    curve: [[evaluations, best step time us]] at the start and after every
      round that improved it, then at the end.
    rounds: rounds of moves simulated.
    accepted: rounds whose best move replaced the current placement.
  """
  placement: np.ndarray
  step_time_us: float
  evaluations: int
  curve: list
  rounds: int
  accepted: int


def climb(graph: op_graph.OpGraph, topology: topology_lib.Topology,
          start: np.ndarray, start_step_time_us: float, *, evaluations: int,
          used: int = 0, seed: int = 0, seconds: Optional[float] = None,
          batch: int = 16, temperature: float = 0.01,
          moves: tuple = MOVES) -> Climb:
  """Hill climbing with annealing from `start` (module doc: moves, budget).

  `start_step_time_us` is the start's simulated step time (inf if it does
  not fit); `used` evaluations of the `evaluations` budget are already
  spent, and the annealing cools over the rest.
  """
  clock = time.perf_counter()
  view = common.group_view(graph, topology)
  current = float(start_step_time_us)
  current_group = np.asarray(start)[
      view.members[view.member_ptr[:-1]]].astype(np.int64)
  best_group, best = current_group, current
  curve = [[used, best]] if math.isfinite(best) else []
  moves = _Moves(view, np.random.default_rng(seed), moves)
  rounds = accepted = idle = 0
  priced = {common.placement_key(current_group): current}
  while used < evaluations and idle < IDLE_ROUNDS and (
      seconds is None or time.perf_counter() - clock < seconds):
    size = min(batch, evaluations - used)
    candidates = np.stack([moves.propose(current_group) for _ in range(size)])
    times, fresh = _score_distinct(graph, topology, view, candidates, priced)
    used += fresh
    idle = 0 if fresh else idle + 1
    rounds += 1
    pick = int(np.argmin(times))
    if not math.isfinite(times[pick]):
      continue
    heat = temperature * current * (1.0 - used / evaluations)
    if times[pick] < current or (heat > 0 and moves.rng.random() < math.exp(
        -(times[pick] - current) / heat)):
      current_group, current = candidates[pick], float(times[pick])
      accepted += 1
    if current < best:
      best_group, best = current_group, current
      curve.append([used, float(best)])
  if math.isfinite(best) and curve[-1][0] != used:
    curve.append([used, best])
  # Unimproved, the start comes back as given, even where it splits a
  # colocation group.
  placement = (view.expand(best_group) if best < start_step_time_us
               else np.asarray(start))
  return Climb(placement=np.asarray(placement, np.int32), step_time_us=best,
               evaluations=used, curve=curve, rounds=rounds,
               accepted=accepted)


def _start(graph, topology, seed: int):
  """(placement, step time or inf if invalid, evaluations used) of the
  fastest valid cheap baseline."""
  methods = dict(STARTS)
  if stage_pipeline.rule_placements(graph, topology):
    methods["stage_pipeline"] = stage_pipeline.place
  names, placements, problems = [], [], {}
  with common.recording() as inner:
    for name, method in methods.items():
      try:
        placements.append(method(graph, topology, seed=seed))
        names.append(name)
      except errors.InputError as e:
        problems[name] = str(e)
    if not placements:
      raise errors.InputError(
          "local_search has no valid start: " + "; ".join(
              f"{name}: {problem}" for name, problem in problems.items()))
  # Judged as the baseline table judges them: a start that does not fit
  # memory is repaired, and may still be the fastest (on a memory-tight
  # step HEFT repaired can beat every start that fit as it came).
  fixed = repair.repair_batch(graph, topology, np.stack(placements))
  used = inner.evaluations + sum(f.evaluations for f in fixed)
  common.count_evaluations(used)
  order = sorted(range(len(names)), key=lambda i: (
      not fixed[i].valid, fixed[i].step_time_us))
  common.note("starts", {n: round(float(f.step_time_us), 3) if f.valid
                         else None for n, f in zip(names, fixed)})
  common.note("start", names[order[0]])
  common.note("start_evaluations", used)
  common.note("starts_repaired", sorted(
      n for n, f in zip(names, fixed) if f.changed))
  best = fixed[order[0]]
  return (np.asarray(best.placement),
          best.step_time_us if best.valid else math.inf, used)


def _score_distinct(graph, topology, view, group_devices, priced: dict):
  """(float[B] step times, how many were new): `_score` of the candidates
  not in `priced` (placement key -> step time), which learns them."""
  keys = [common.placement_key(g) for g in group_devices]
  fresh = [b for b, key in enumerate(keys)
           if key not in priced and keys.index(key) == b]
  if fresh:
    for b, t in zip(fresh, _score(graph, topology, view,
                                  group_devices[fresh])):
      priced[keys[b]] = float(t)
  return np.array([priced[key] for key in keys]), len(fresh)


def _score(graph, topology, view, group_devices) -> np.ndarray:
  """float[B] step times, inf where a candidate is invalid (one batch)."""
  placements = np.stack([view.expand(g) for g in group_devices])
  result = common.simulate_batch(graph, placements, topology)
  return np.where(result.valid, result.step_time_us, np.inf)


class _Moves:
  """Random moves of the module doc over a `GroupView`."""

  def __init__(self, view: common.GroupView, rng: np.random.Generator,
               kinds: tuple = MOVES):
    unknown = set(kinds) - set(MOVES)
    if unknown or not kinds:
      raise ValueError(f"unknown local_search moves: {sorted(unknown)}")
    self.view = view
    self.rng = rng
    self.kinds = tuple(kinds)
    if set(kinds) & set(BORDER_MOVES):
      src, dst, _ = view.edges
      self.edge_src, self.edge_dst = src, dst
    self.movable = np.flatnonzero(view.allowed.sum(axis=1) > 1)
    members_of = {}
    for op, name in enumerate(view.graph.node_names):
      for scope in scopes.numbered_scopes(name):
        members_of.setdefault(scope, set()).add(int(view.group_of[op]))
    self.scopes = [np.array(sorted(groups)) for _, groups in
                   sorted(members_of.items()) if len(groups) > 1]
    g = view.num_groups
    self.chunk = (max(1, g // 100), max(1, g // 10))

  def propose(self, group_device: np.ndarray) -> np.ndarray:
    """A changed copy of `group_device` (unchanged only if nothing moves)."""
    kinds = [m for m in self.kinds if m != "scope" or self.scopes]
    for _ in range(8):
      move = kinds[self.rng.integers(len(kinds))]
      proposal = getattr(self, "_" + move)(group_device)
      if not np.array_equal(proposal, group_device):
        return proposal
    return group_device.copy()

  def _to_device(self, group_device, groups):
    """Every group of `groups` that may use it to one random device."""
    j = int(self.rng.integers(self.view.num_devices))
    proposal = group_device.copy()
    proposal[groups[self.view.allowed[groups, j]]] = j
    return proposal

  def _group(self, group_device):
    if not self.movable.size:
      return group_device
    g = int(self.movable[self.rng.integers(self.movable.size)])
    choices = np.flatnonzero(self.view.allowed[g])
    choices = choices[choices != group_device[g]]
    proposal = group_device.copy()
    proposal[g] = int(choices[self.rng.integers(choices.size)])
    return proposal

  def _swap(self, group_device):
    a, b = self.rng.integers(self.view.num_groups, size=2)
    ja, jb = group_device[a], group_device[b]
    proposal = group_device.copy()
    if self.view.allowed[a, jb] and self.view.allowed[b, ja]:
      proposal[a], proposal[b] = jb, ja
    return proposal

  def _scope(self, group_device):
    groups = self.scopes[self.rng.integers(len(self.scopes))]
    return self._to_device(group_device, groups)

  def _cut_edge(self, group_device):
    """A random group edge whose ends are on different devices, or None."""
    cut = np.flatnonzero(group_device[self.edge_src] !=
                         group_device[self.edge_dst])
    if not cut.size:
      return None
    e = int(cut[self.rng.integers(cut.size)])
    return int(self.edge_src[e]), int(self.edge_dst[e])

  def _border(self, group_device):
    edge = self._cut_edge(group_device)
    if edge is None:
      return group_device
    mover, anchor = edge if self.rng.random() < 0.5 else edge[::-1]
    proposal = group_device.copy()
    if self.view.allowed[mover, group_device[anchor]]:
      proposal[mover] = group_device[anchor]
    return proposal

  def _shift(self, group_device):
    """A run of the topological order beside a cut joins the other side."""
    edge = self._cut_edge(group_device)
    if edge is None:
      return group_device
    src, dst = edge
    order, rank = self.view.order, self.view.rank
    # Log-uniform lengths: one group as often as a tenth of the graph's.
    length = int(np.exp(self.rng.uniform(0.0, np.log(self.chunk[1] + 1))))
    if self.rng.random() < 0.5:  # the run ending at src joins dst's device
      groups = order[max(0, rank[src] - length + 1):rank[src] + 1]
      device = group_device[dst]
    else:  # the run starting at dst joins src's device
      groups = order[rank[dst]:rank[dst] + length]
      device = group_device[src]
    proposal = group_device.copy()
    proposal[groups[self.view.allowed[groups, device]]] = device
    return proposal

  def _chunk(self, group_device):
    order = self.view.order
    length = int(self.rng.integers(self.chunk[0], self.chunk[1] + 1))
    first = int(self.rng.integers(max(1, order.size - length + 1)))
    return self._to_device(group_device, order[first:first + length])
