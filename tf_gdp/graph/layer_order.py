"""The layer order of a training step: forward ops, and the backward ops each follows.

A training step runs its forward pass, then its backward pass in reverse,
then the updates. Splitting it by topological order would put the forward
pass on one device and the backward pass on another, so that every
activation crosses a link. Layer order instead gives each backward and
update op the position of its owner, the forward op it differentiates, so
that a contiguous range of positions is a range of layers with their
gradients and updates: the shape of a pipeline stage.

* An op is backward when its name is in a backward scope
  (`scopes.forward_name`: `gradient_tape/`, `gradients/`), when it is an
  optimizer update or assignment (op types `Apply*`, `ResourceApply*`,
  `Assign*`, `ResourceScatter*`), or when it consumes a backward op's output;
  every other op is forward (a graph with no backward ops is all forward).
* Forward ops are ordered by their latest level (`forward_order`), so that
  sources sit next to their consumers.
* A backward op's owner is the forward op of its forward name, else the
  first forward op in the longest forward scope that matches it, else the
  owner of its heaviest input (the nearest forward ancestor), else of its
  first consumer.

TF-free: used by `contiguous_dp` and by the memory repair.
"""

import numpy as np

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
  that the forward pass uses (with a forward input or consumer) stands for
  the scope. An op it does not use, such as a constant nothing reads or
  one only gradients read, sits at the start of the order and would pull
  the scope's gradients there.
  """
  n = graph.num_nodes
  owner = np.where(backward, -1, np.arange(n))
  forward_edge = ~backward[graph.edge_src] & ~backward[graph.edge_dst]
  used = np.zeros(n, np.bool_)
  used[graph.edge_src[forward_edge]] = True
  used[graph.edge_dst[forward_edge]] = True
  by_name, by_scope = {}, {}
  for v in np.concatenate([order[used[order]], order[~used[order]]]):
    name = graph.node_names[v]
    by_name.setdefault(name, v)
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


def positions(graph: op_graph.OpGraph) -> np.ndarray:
  """int[n]: each op's position in the forward order, a backward or update
  op at its owner's (ties: ops of one layer share a position)."""
  backward = backward_ops(graph)
  forward = forward_order(graph, backward)
  owner = owners(graph, backward, forward)
  position = np.full(graph.num_nodes, -1, np.int64)
  position[forward] = np.arange(forward.size)
  return position[owner]


def cut_bytes(graph: op_graph.OpGraph, pos: np.ndarray,
              size: int) -> np.ndarray:
  """float[size + 1]: bytes crossing the cut before each position of `pos`
  (int[n], positions in [0, size)), were the ops before it on one device and
  the rest on another.

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


def _lists(keys, values, n: int) -> list:
  lists = [[] for _ in range(n)]
  for key, value in zip(np.asarray(keys).tolist(), np.asarray(values).tolist()):
    lists[key].append(value)
  return lists
