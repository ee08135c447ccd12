"""contiguous_dp: the optimal contiguous split of the forward pass (a pipeline).

Tarnawski et al., "Efficient Algorithms for Device Placement of DNN Graph
Operators" (NeurIPS 2020): split the forward ops, in topological order, into
at most k contiguous stages (k = the devices placement spreads over), stage
s on device s, by dynamic programming that minimises the largest stage
cost. It is the name-free pipeline baseline: no layer numbers, only order,
costs and links, so it says how much of a hand-written pipeline structure
alone can find.

* Forward and backward. An op is backward when its name is in a backward
  scope (`graph.scopes.forward_name`: `gradient_tape/`, `gradients/`), when
  it is an optimizer update or assignment (op types `Apply*`,
  `ResourceApply*`, `Assign*`, `ResourceScatter*`), or when it consumes a
  backward op's output; every other op is forward (a graph with no
  backward ops is all forward). A backward op follows its owner, the
  forward op it differentiates: the forward op of its forward name, else
  the first forward op in the longest forward scope that matches it, else
  the owner of its heaviest input (the nearest forward ancestor), else of
  its first consumer.
* Stage cost = the compute of its forward ops and of the backward ops they
  own, on the stage's device, plus the incoming transfer of its cut: the
  bytes of every edge that crosses the cut (activations forward and
  gradients backward), over the link from the previous stage's device
  (`Topology.transfer_us`). A stage whose estimated memory (`common`'s
  model, summed over the ops it holds) exceeds its device's budget costs
  infinity, so splits that do not fit are never chosen.
* Order. The forward ops by their latest level (`forward_order`), so that
  sources sit next to their consumers.
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

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph
from tf_gdp.graph import scopes

_UPDATE_TYPE_PREFIXES = ("Apply", "ResourceApply", "Assign", "ResourceScatter",
                         "ScatterSub", "ScatterAdd", "ScatterUpdate")


def backward_ops(graph: op_graph.OpGraph) -> np.ndarray:
  """bool[n]: the op belongs to the backward pass or the update."""
  n = graph.num_nodes
  backward = np.array([scopes.forward_name(name) is not None or
                       op.startswith(_UPDATE_TYPE_PREFIXES)
                       for name, op in zip(graph.node_names, graph.op_types)],
                      np.bool_)
  if not backward.any() or backward.all():
    return np.zeros(n, np.bool_)
  inputs = _lists(graph.edge_dst, graph.edge_src, n)
  for v in graph.topo_order:
    if not backward[v] and any(backward[u] for u in inputs[v]):
      backward[v] = True
  return backward


def forward_order(graph: op_graph.OpGraph, backward: np.ndarray) -> np.ndarray:
  """int[F]: the forward ops in a topological order that keeps blocks whole.

  Ops are sorted by their latest level (ALAP over the forward edges, an op
  without forward consumers at its earliest level; ties by the graph's
  topological rank), so a constant, a variable read or a
  dropout mask comes right before the op that uses it instead of with
  every other source at the start, where any contiguous split would cut
  it off from its consumer.
  """
  forward = ~backward
  keep = forward[graph.edge_src] & forward[graph.edge_dst]
  src, dst = graph.edge_src[keep], graph.edge_dst[keep]
  consumers = _lists(src, dst, graph.num_nodes)
  rank = np.empty(graph.num_nodes, np.int64)
  rank[graph.topo_order] = np.arange(graph.num_nodes)
  level = np.zeros(graph.num_nodes, np.int64)  # ASAP first
  for v in graph.topo_order:
    for w in consumers[v]:
      level[w] = max(level[w], level[v] + 1)
  for v in graph.topo_order[::-1]:
    if consumers[v]:
      level[v] = min(level[w] for w in consumers[v]) - 1
  ops = np.flatnonzero(forward)
  return ops[np.lexsort((rank[ops], level[ops]))]


def owners(graph: op_graph.OpGraph, backward: np.ndarray,
           order: np.ndarray) -> np.ndarray:
  """int[n]: the forward op each op follows (a forward op: itself).

  `order` is the forward order (`forward_order`); a scope's first op in it
  stands for the scope.
  """
  n = graph.num_nodes
  owner = np.where(backward, -1, np.arange(n))
  by_name, by_scope = {}, {}
  for v in order:
    name = graph.node_names[v]
    by_name[name] = v
    parts = name.split("/")[:-1]
    for i in range(1, len(parts) + 1):
      by_scope.setdefault("/".join(parts[:i]), v)
  inputs = _lists(graph.edge_dst, graph.edge_src, n)
  weight = _lists(graph.edge_dst, graph.edge_bytes, n)
  for v in graph.topo_order:
    if not backward[v]:
      continue
    owner[v] = _by_name(graph.node_names[v], by_name, by_scope)
    if owner[v] < 0:
      known = [(w, u) for u, w in zip(inputs[v], weight[v]) if owner[u] >= 0]
      if known:
        owner[v] = owner[max(known, key=lambda p: (p[0], -p[1]))[1]]
  consumers = _lists(graph.edge_src, graph.edge_dst, n)
  for v in graph.topo_order[::-1]:
    if owner[v] < 0:
      after = [owner[w] for w in consumers[v] if owner[w] >= 0]
      owner[v] = after[0] if after else int(np.flatnonzero(~backward)[0])
  return owner


def _by_name(name: str, by_name: dict, by_scope: dict) -> int:
  forward = scopes.forward_name(name)
  if forward is None:
    return -1
  parts = [p[:-len("_grad")] if p.endswith("_grad") else p
           for p in forward.split("/")]
  if "/".join(parts) in by_name:
    return by_name["/".join(parts)]
  for i in range(len(parts) - 1, 0, -1):
    if "/".join(parts[:i]) in by_scope:
      return by_scope["/".join(parts[:i])]
  return -1


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, max_cuts: int = 1024, activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """The fastest simulated of the DP's best contiguous splits (module doc)."""
  del seed  # deterministic
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  backward = backward_ops(graph)
  forward = forward_order(graph, backward)
  owner = owners(graph, backward, forward)
  position = np.full(graph.num_nodes, -1, np.int64)
  position[forward] = np.arange(forward.size)
  pos = position[owner]  # every op's position in the forward order
  devices = view.primary
  f = model.activation_fraction
  need = graph.memory_bytes + f * graph.output_bytes.astype(np.float64)
  work = np.stack([np.bincount(pos, weights=view.tables.duration_us[:, j],
                               minlength=forward.size) for j in devices])
  memory = np.bincount(pos, weights=need, minlength=forward.size)
  cut = _cut_bytes(graph, pos, forward.size)
  cuts = _candidate_cuts(work[0], cut, max_cuts)
  splits = _dp(view, devices, work, memory, cut, cuts, model.budget[devices])
  common.note("forward_ops", int(forward.size))
  common.note("backward_ops", int(backward.sum()))
  if not splits:
    splits = _dp(view, devices, work, memory, cut, cuts,
                 np.full(devices.size, np.inf))
    common.note("repaired", "no contiguous split fits the memory estimate: "
                "the best split was repaired (common.repair_memory)")
    best = min(splits, key=lambda s: splits[s][0])
    group_device = common.repair_memory(
        view, model, _group_devices(view, devices, splits[best][1], pos))
    return view.expand(group_device)
  best = min(splits, key=lambda s: splits[s][0])
  tried = sorted({s for s in (1, best - 1, best, best + 1, devices.size)
                  if s in splits})
  group_devices = [_group_devices(view, devices, splits[s][1], pos)
                   for s in tried]
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


def _cut_bytes(graph, pos: np.ndarray, size: int) -> np.ndarray:
  """float[size + 1]: bytes crossing the cut before each position.

  A tensor crosses every cut between its producer and its farthest
  consumers (either way), once: the simulator sends it once per device.
  """
  data = graph.edge_output >= 0
  tensor = graph.edge_src[data].astype(np.int64) * (
      int(graph.edge_output.max(initial=0)) + 1) + graph.edge_output[data]
  keys, inverse = np.unique(tensor, return_inverse=True)
  lo = np.full(keys.size, np.iinfo(np.int64).max)
  hi = np.full(keys.size, -1)
  producer_pos = pos[graph.edge_src[data]]
  np.minimum.at(lo, inverse, np.minimum(producer_pos,
                                        pos[graph.edge_dst[data]]))
  np.maximum.at(hi, inverse, np.maximum(producer_pos,
                                        pos[graph.edge_dst[data]]))
  nbytes = np.zeros(keys.size)
  np.maximum.at(nbytes, inverse, graph.edge_bytes[data].astype(np.float64))
  delta = np.zeros(size + 2)
  np.add.at(delta, lo + 1, nbytes)
  np.add.at(delta, hi + 1, -nbytes)
  return np.cumsum(delta)[:size + 1]


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


def _lists(keys, values, n: int) -> list:
  lists = [[] for _ in range(n)]
  for key, value in zip(np.asarray(keys).tolist(), np.asarray(values).tolist()):
    lists[key].append(value)
  return lists
