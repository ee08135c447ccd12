"""contiguous_dp: the optimal contiguous split of the forward pass (a pipeline).

Tarnawski et al., "Efficient Algorithms for Device Placement of DNN Graph
Operators" (NeurIPS 2020): split the forward ops, in topological order, into
at most k contiguous stages (k = the devices placement spreads over), stage
s on device s, by dynamic programming that minimises the largest stage
cost. It is the name-free pipeline baseline: no layer numbers, only order,
costs and links, so it says how much of a hand-written pipeline structure
alone can find.

* Forward and backward. The forward ops are ordered, and every backward
  and update op follows its owner, the forward op it differentiates, by
  `graph.layer_order` (names, op types and edges; a graph with no backward
  ops is all forward).
* Stage cost = the compute of its forward ops and of the backward ops they
  own, on the stage's device, plus the incoming transfer of its cut: the
  bytes of every edge that crosses the cut (activations forward and
  gradients backward), over the link from the previous stage's device
  (`Topology.transfer_us`). A stage whose estimated memory (`common`'s
  model, summed over the ops it holds) exceeds its device's budget costs
  infinity, so splits that do not fit are never chosen.
* Cut points. Every position is a candidate up to `max_cuts`; on larger
  graphs the order is cut into `max_cuts` bins of equal compute and each
  bin offers its position of fewest crossing bytes.

Colocation groups go to the device where most of their members' compute
was put (among the devices the group may use; else its fastest allowed
one), which keeps pins and allowed kinds. The DP's best split and its
neighbours in the number of stages (best - 1, best + 1, k, and 1: one step
without micro-batches may run fastest unsplit) are simulated in one batch
and the fastest valid one is returned. If no split fits the
memory estimate, the unconstrained best split is repaired
(`common.repair_memory`) and the info says so.
"""

import dataclasses
from typing import Callable

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import layer_order
from tf_gdp.graph import op_graph


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, max_cuts: int = 1024, activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """The fastest simulated of the DP's best contiguous splits (module doc)."""
  del seed  # deterministic
  view = common.group_view(graph, topology)
  plan = _plan(view, common.memory_model(
      view, activation_fraction=activation_fraction,
      memory_headroom=memory_headroom), max_cuts)
  if not plan.splits:
    return _repaired(plan)
  splits = plan.splits
  best = min(splits, key=lambda s: splits[s][0])
  tried = sorted({s for s in (1, best - 1, best, best + 1, plan.devices.size)
                  if s in splits})
  group_devices = [plan.group_devices(s) for s in tried]
  view = plan.view
  batch = common.simulate_batch(
      graph, np.stack([view.expand(g) for g in group_devices]), topology)
  pick = min(range(len(tried)), key=lambda i: (not batch.valid[i],
                                               batch.step_time_us[i]))
  common.note("splits", [
      {"stages": s, "bounds": [int(b) for b in splits[s][1]],
       "dp_cost_us": round(float(splits[s][0]), 3),
       "step_time_us": round(float(batch.step_time_us[i]), 3),
       "valid": bool(batch.valid[i])} for i, s in enumerate(tried)])
  common.note("stages", tried[pick])
  return view.expand(group_devices[pick])


def fewest_stages(graph: op_graph.OpGraph,
                  topology: topology_lib.Topology) -> np.ndarray:
  """The split over the fewest devices that fits the memory estimate.

  No placement is judged (the memory estimate calibrates itself on the
  one-device step, as every estimate does). A step without micro-batches
  gains nothing from being cut into more stages than memory needs (each cut
  only adds its transfers), so of the DP's feasible splits this takes the
  one with the fewest stages: all on one GPU when the step fits it, else
  the least-cut pipeline of whole layers that does. If none fits, the DP's best split
  repaired by the estimate (`common.repair_memory`), as `place` does.
  """
  view = common.group_view(graph, topology)
  model = common.memory_model(view)
  if _one_stage_fits(view, model):
    # One stage fits: the DP's answer, without the layer order it needs.
    return _one_stage(view)
  plan = _plan(view, model, 1024)
  if not plan.splits:
    return _repaired(plan)
  return plan.view.expand(plan.group_devices(min(plan.splits)))


def one_stage_beyond_estimate(graph: op_graph.OpGraph,
                              topology: topology_lib.Topology) -> np.ndarray:
  """The whole step on the first primary device, where the memory estimate
  says it does not fit; int64[n] of -1 where the estimate says it fits.

  The estimate is cautious (a headroom, an activation fraction calibrated
  on the one-device step), and a step it puts over one device's budget may
  still fit by the simulator, which judges every placement exactly: a
  memory-tight step's fastest placement is then often that one device.
  Where the estimate says the step fits, `fewest_stages` returns this
  placement already.
  """
  view = common.group_view(graph, topology)
  if _one_stage_fits(view, common.memory_model(view)):
    return np.full(graph.num_nodes, -1, np.int64)
  return _one_stage(view)


def _one_stage_fits(view: common.GroupView, model: common.MemoryModel) -> bool:
  return bool(model.need.sum() <= model.budget[int(view.primary[0])])


def _one_stage(view: common.GroupView) -> np.ndarray:
  """Every group on the first primary device, else its fastest allowed."""
  first = int(view.primary[0])
  return view.expand(np.where(view.allowed[:, first], first, view.fastest))


@dataclasses.dataclass(frozen=True)
class _Plan:
  """The DP's splits of one graph: stages -> (max stage cost, bounds)."""
  view: common.GroupView
  model: common.MemoryModel
  devices: np.ndarray
  position: np.ndarray  # every op's position in the forward order
  splits: dict
  unconstrained: Callable[[], dict]

  def group_devices(self, stages: int) -> np.ndarray:
    return _group_devices(self.view, self.devices, self.splits[stages][1],
                          self.position)


def _plan(view: common.GroupView, model: common.MemoryModel,
          max_cuts: int) -> _Plan:
  graph = view.graph
  backward = layer_order.backward_ops(graph)
  forward = layer_order.forward_order(graph, backward)
  owner = layer_order.owners(graph, backward, forward)
  position = np.full(graph.num_nodes, -1, np.int64)
  position[forward] = np.arange(forward.size)
  pos = position[owner]
  devices = view.primary
  f = model.activation_fraction
  need = graph.memory_bytes + f * graph.output_bytes.astype(np.float64)
  work = np.stack([np.bincount(pos, weights=view.tables.duration_us[:, j],
                               minlength=forward.size) for j in devices])
  memory = np.bincount(pos, weights=need, minlength=forward.size)
  cut = layer_order.cut_bytes(graph, pos, forward.size)
  cuts = _candidate_cuts(work[0], cut, max_cuts)
  common.note("forward_ops", int(forward.size))
  common.note("backward_ops", int(backward.sum()))
  return _Plan(
      view, model, devices, pos,
      _dp(view, devices, work, memory, cut, cuts, model.budget[devices]),
      lambda: _dp(view, devices, work, memory, cut, cuts,
                  np.full(devices.size, np.inf)))


def _repaired(plan: _Plan) -> np.ndarray:
  """The unconstrained best split, repaired by the memory estimate."""
  splits = plan.unconstrained()
  common.note("repaired", "no contiguous split fits the memory estimate: "
              "the best split was repaired (common.repair_memory)")
  best = min(splits, key=lambda s: splits[s][0])
  group_device = common.repair_memory(
      plan.view, plan.model,
      _group_devices(plan.view, plan.devices, splits[best][1],
                     plan.position))
  return plan.view.expand(group_device)


def _candidate_cuts(work: np.ndarray, cut: np.ndarray,
                    max_cuts: int) -> np.ndarray:
  """Sorted positions in [0, size] a stage may start or end at."""
  size = work.size
  if size + 1 <= max_cuts:
    return np.arange(size + 1)
  prefix = np.concatenate([[0.0], np.cumsum(work)])
  edges = np.searchsorted(prefix, np.linspace(0, prefix[-1], max_cuts - 1))
  edges = np.unique(np.clip(edges, 1, size))
  picks = [0, size]
  for a, b in zip(edges[:-1], edges[1:]):
    if b > a:
      picks.append(int(a + np.argmin(cut[a:b])))
  return np.unique(picks)


def _dp(view, devices, work, memory, cut, cuts, budget) -> dict:
  """stages -> (max stage cost, stage bounds) for every feasible count."""
  k, m = devices.size, cuts.size
  prefix = np.concatenate([np.zeros((k, 1)), np.cumsum(work, axis=1)], axis=1)
  mem = np.concatenate([[0.0], np.cumsum(memory)])[cuts]
  span = mem[None, :] - mem[:, None]  # [a, b]: memory of cuts[a]..cuts[b]
  later = np.triu(np.ones((m, m), np.bool_), 1)
  best = np.full(m, np.inf)
  best[0] = 0.0
  back = np.zeros((k + 1, m), np.int64)
  found = {}
  for s in range(1, k + 1):
    j = int(devices[s - 1])
    compute = prefix[s - 1][cuts]
    cost = compute[None, :] - compute[:, None]
    if s > 1:
      link = np.array([view.topology.transfer_us(int(devices[s - 2]), j,
                                                 float(cut[c])) for c in cuts])
      cost = cost + np.where(cuts > 0, link, 0.0)[:, None]
    cost = np.where(later & (span <= budget[s - 1]), cost, np.inf)
    total = np.maximum(best[:, None], cost)
    back[s] = np.argmin(total, axis=0)
    best = total[back[s], np.arange(m)]
    if np.isfinite(best[-1]):
      bounds, b = [], m - 1
      for t in range(s, 0, -1):
        bounds.append(int(cuts[b]))
        b = int(back[t][b])
      found[s] = (float(best[-1]), bounds[::-1])
  return found


def _group_devices(view, devices, bounds, pos) -> np.ndarray:
  """int[G]: each group where most of its members' compute went."""
  stage = np.searchsorted(np.asarray(bounds), pos, side="right")
  device = devices[np.minimum(stage, len(bounds) - 1)]
  weight = np.zeros((view.num_groups, view.num_devices))
  op_time = view.tables.duration_us[np.arange(pos.size), device] + 1e-9
  np.add.at(weight, (view.group_of, device), op_time)
  weight = np.where(view.allowed, weight, -1.0)
  choice = np.argmax(weight, axis=1)
  empty = weight[np.arange(view.num_groups), choice] <= 0
  for g in np.flatnonzero(empty):
    choice[g] = view.fastest_allowed(int(g))
  return choice
