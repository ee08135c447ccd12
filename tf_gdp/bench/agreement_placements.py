"""The placements `agreement_check` times on two workers.

All on one worker, all on the other, round-robin, random with colocation
groups kept whole, and contiguous splits of a topological order at several
cut points in both orientations. Splits are taken of two topological
orders: `OpGraph.topo_order` (breadth-first: it interleaves parallel
branches) and a depth-first one (its pieces are branches); a variable's
group goes with its first user. Every placement keeps groups whole.
"""

import numpy as np

# Split points of the topological order, as fractions of the total cost.
_CUT_FRACTIONS = (0.15, 0.3, 0.45, 0.6, 0.75, 0.9)
_RANDOM_SHARES = (0.5, 0.5, 0.5, 0.25, 0.25, 0.1)


def _group_placement(graph, group_device: np.ndarray) -> np.ndarray:
  return np.asarray(group_device, np.int64)[graph.group_ids]


def _first_in_order(graph) -> np.ndarray:
  """Groups in the order their first member appears topologically."""
  seen, order = set(), []
  for node in graph.topo_order:
    group = int(graph.group_ids[node])
    if group not in seen:
      seen.add(group)
      order.append(group)
  return np.asarray(order, np.int64)


def depth_first_order(graph) -> np.ndarray:
  """A topological order that follows each chain as far as it can.

  Kahn's algorithm with a stack instead of a queue: the op just made ready
  runs next. Unlike the breadth-first `OpGraph.topo_order` (which
  interleaves independent branches), its contiguous pieces are branches, so
  splitting it gives the branch-parallel placements a human would try.
  """
  n = graph.num_nodes
  indegree = np.zeros(n, np.int64)
  np.add.at(indegree, graph.edge_dst, 1)
  successors = [[] for _ in range(n)]
  for src, dst in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
    successors[src].append(dst)
  stack = [v for v in range(n - 1, -1, -1) if indegree[v] == 0]
  order = []
  while stack:
    v = stack.pop()
    order.append(v)
    for w in sorted(set(successors[v]), reverse=True):
      indegree[w] -= successors[v].count(w)
      if indegree[w] == 0:
        stack.append(w)
  return np.asarray(order, np.int64)


def _keep_groups_with_users(graph, placement: np.ndarray) -> np.ndarray:
  """Moves each multi-op group to the device of its first outside data user.

  A variable's group (handle, read, update) is cheap itself; what matters is
  that it sits with the ops that use its value, as a human would place it.
  Groups without outside consumers go where their first member is.
  """
  order_rank = np.empty(graph.num_nodes, np.int64)
  order_rank[graph.topo_order] = np.arange(graph.num_nodes)
  groups = graph.group_ids
  sizes = np.bincount(groups)
  result = placement.copy()
  best = {}
  data = graph.edge_output >= 0  # control edges carry no value to use
  for src, dst in zip(graph.edge_src[data].tolist(),
                      graph.edge_dst[data].tolist()):
    group = groups[src]
    if sizes[group] < 2 or groups[dst] == group:
      continue
    if group not in best or order_rank[dst] < order_rank[best[group]]:
      best[group] = dst
  for group in np.flatnonzero(sizes >= 2):
    members = np.flatnonzero(groups == group)
    anchor = best.get(group, members[np.argmin(order_rank[members])])
    result[members] = placement[anchor]
  return result


def _splits(graph, order: np.ndarray, label: str) -> dict:
  """Contiguous splits of `order` at cost fractions, both orientations."""
  cost = graph.costs["CPU"][order]
  cumulative = np.cumsum(cost) / max(float(cost.sum()), 1e-9)
  result = {}
  for fraction in _CUT_FRACTIONS:
    cut = int(np.searchsorted(cumulative, fraction))
    split = np.zeros(graph.num_nodes, np.int64)
    split[order[cut + 1:]] = 1
    split = _keep_groups_with_users(graph, split)
    result[f"{label}{fraction:g}_0to1"] = split
    result[f"{label}{fraction:g}_1to0"] = 1 - split
  return result


def placements(graph, d: int, *, num_random: int, seed: int) -> dict:
  """Name -> int[num_nodes] placement; every one keeps groups whole."""
  n = graph.num_nodes
  num_groups = int(graph.group_ids.max()) + 1
  result = {f"all_on_{i}": np.full(n, i, np.int64) for i in range(d)}
  group_order = _first_in_order(graph)
  robin = np.empty(num_groups, np.int64)
  robin[group_order] = np.arange(num_groups) % d
  result["round_robin"] = _group_placement(graph, robin)
  rng = np.random.default_rng(seed)
  for r in range(num_random):
    share = _RANDOM_SHARES[r % len(_RANDOM_SHARES)]
    groups = (rng.random(num_groups) < share).astype(np.int64)
    result[f"random{r}_p{share:g}"] = _group_placement(graph, groups)
  if d == 2:
    result.update(_splits(graph, graph.topo_order, "split"))
    result.update(_splits(graph, depth_first_order(graph), "dfsplit"))
  return result
