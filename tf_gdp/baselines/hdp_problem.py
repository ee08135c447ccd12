"""The numpy side of the HDP-style baseline: the graph as its search sees it.

`Problem` precomputes, once per search, the colocation units and their
features (what the grouper reads), the per-unit sums that group embeddings
add up (what the placer reads), the device constraints per unit and where a
misplaced unit goes instead. Its methods turn a batch of sampled groupings
and devices into masks, group embeddings and repaired placements. TF-free,
so that importing the baseline does not import TensorFlow; the method is
described in `hdp` (the search), the networks are in `hdp_model`.
"""

import math

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

_NUM_FREQUENCIES = 6


class Problem:
  """Everything about graph x topology that the search reads, precomputed.

  Units are the colocation groups of `common.group_view` (which also gives
  their allowed devices, their compute time per device and the unit-level
  edge bytes, and rejects a unit no device can take). `num_groups` is G
  before capping by the number of units; `num_op_types` is the number of
  most frequent op types given their own feature column.
  """

  def __init__(self, graph: op_graph.OpGraph, topology: topology_lib.Topology,
               *, num_groups: int, num_op_types: int):
    view = common.group_view(graph, topology)
    n, d = graph.num_nodes, topology.num_devices
    self.num_nodes, self.num_devices = n, d
    unit = view.group_of.astype(np.int64)
    num_units = view.num_groups
    self.unit, self.num_units = unit, num_units
    self.num_groups = min(num_groups, num_units)
    size = np.bincount(unit, minlength=num_units).astype(np.float64)

    # Per-node quantities.
    type_index = _op_type_index(graph.op_types, num_op_types)
    num_types = int(type_index.max()) + 1
    cost = np.stack([graph.costs[k] for k in graph.kinds], axis=1)
    cost_min, cost_max = cost.min(axis=1), cost.max(axis=1)
    src, dst = graph.edge_src.astype(np.int64), graph.edge_dst.astype(np.int64)
    ebytes = graph.edge_bytes.astype(np.float64)
    position = np.empty(n, np.float64)
    position[graph.topo_order] = np.arange(n) / max(n - 1, 1)

    # Unit sums (group embeddings add these up per group).
    def unit_sum(values):
      return np.bincount(unit, weights=values, minlength=num_units)

    amounts = [np.ones(n), graph.output_bytes.astype(np.float64),
               graph.memory_bytes.astype(np.float64),
               graph.temp_bytes.astype(np.float64), cost_min, cost_max]
    self.unit_amounts = np.stack([unit_sum(a) for a in amounts], axis=1)
    self.amount_scale = np.log1p(self.unit_amounts.sum(axis=0))
    self.amount_scale[self.amount_scale == 0] = 1.0
    self.unit_types = np.stack(
        [unit_sum((type_index == t).astype(np.float64))
         for t in range(num_types)], axis=1)
    self.type_scale = math.log1p(n)
    self.unit_position_sum = unit_sum(position)

    # Unit features for the grouper: member means, standardised.
    angles = np.pi * position[:, None] * (2.0 ** np.arange(_NUM_FREQUENCIES))
    node_columns = np.concatenate([
        np.eye(num_types)[type_index],
        np.log1p(np.stack([graph.output_bytes, graph.memory_bytes,
                           graph.temp_bytes], axis=1).astype(np.float64)),
        np.log1p(np.stack([cost_min, cost_max], axis=1)),
        np.log1p(np.stack([np.bincount(dst, minlength=n),
                           np.bincount(src, minlength=n),
                           np.bincount(dst, weights=ebytes, minlength=n),
                           np.bincount(src, weights=ebytes, minlength=n)],
                          axis=1)),
        position[:, None], np.sin(angles), np.cos(angles),
    ], axis=1)
    unit_columns = np.stack([unit_sum(c) for c in node_columns.T], axis=1)
    unit_columns /= size[:, None]
    unit_columns = np.concatenate(
        [unit_columns, view.allowed.astype(np.float64),
         np.log1p(size)[:, None]], axis=1)
    mean = unit_columns.mean(axis=0)
    std = unit_columns.std(axis=0)
    std[std < 1e-6] = 1.0
    self.unit_features = ((unit_columns - mean) / std).astype(np.float32)

    # Constraints per unit, and where a misplaced unit goes instead.
    self.unit_allowed = view.allowed
    self.restricted_units = np.flatnonzero(~view.allowed.all(axis=1))
    self.fallback = np.argmin(
        np.where(view.allowed, view.duration, np.inf), axis=1)

    # Unit-level edges (bytes + 1 so that control edges still connect).
    edge_src, edge_dst, edge_bytes = view.edges
    self.edge_src = edge_src.astype(np.int64)
    self.edge_dst = edge_dst.astype(np.int64)
    self.edge_weight = edge_bytes.astype(np.float64) + 1.0
    self.edge_scale = max(math.log1p(self.edge_weight.sum()), 1.0)

  @property
  def num_group_features(self) -> int:
    return (self.unit_amounts.shape[1] + self.unit_types.shape[1] + 2 +
            self.num_devices + 2 + 2 * self.num_groups)

  @property
  def num_unit_features(self) -> int:
    return self.unit_features.shape[1]

  def group_mask(self, groups: np.ndarray) -> np.ndarray:
    """bool[B, G, D]: devices every op of the group may use (all if none)."""
    batch, g, d = groups.shape[0], self.num_groups, self.num_devices
    mask = np.ones((batch, g, d), bool)
    if self.restricted_units.size == 0:
      return mask
    restricted = groups[:, self.restricted_units]
    for j in range(d):
      bad = ~self.unit_allowed[self.restricted_units, j]
      for b in range(batch):
        mask[b, :, j] = np.bincount(restricted[b, bad], minlength=g) == 0
    mask[~mask.any(axis=2)] = True
    return mask

  def group_features(self, groups: np.ndarray,
                     mask: np.ndarray) -> np.ndarray:
    """float32[B, G, E]: the placer's group embeddings."""
    batch, g = groups.shape[0], self.num_groups
    out = np.empty((batch, g, self.num_group_features), np.float32)
    for b in range(batch):
      grouping = groups[b]

      def group_sum(values):
        if values.ndim == 1:
          return np.bincount(grouping, weights=values, minlength=g)
        columns = values.shape[1]
        index = (grouping[:, None] * columns + np.arange(columns)).ravel()
        return np.bincount(index, weights=values.ravel(),
                           minlength=g * columns).reshape(g, columns)

      amounts = group_sum(self.unit_amounts)
      nodes = amounts[:, 0]
      position = group_sum(self.unit_position_sum) / np.maximum(nodes, 1.0)
      adjacency = np.bincount(
          grouping[self.edge_src] * g + grouping[self.edge_dst],
          weights=self.edge_weight, minlength=g * g).reshape(g, g)
      np.fill_diagonal(adjacency, 0.0)
      out[b] = np.concatenate([
          np.log1p(amounts) / self.amount_scale,
          np.log1p(group_sum(self.unit_types)) / self.type_scale,
          position[:, None], (nodes == 0)[:, None],
          mask[b],
          np.log1p(np.stack([adjacency.sum(1), adjacency.sum(0)], 1)) /
          self.edge_scale,
          np.log1p(adjacency) / self.edge_scale,
          np.log1p(adjacency.T) / self.edge_scale,
      ], axis=1)
    return out

  def placements(self, groups: np.ndarray, devices: np.ndarray) -> np.ndarray:
    """int64[B, n]: each op on its group's device, misplaced units repaired."""
    unit_device = np.take_along_axis(devices.astype(np.int64),
                                     groups.astype(np.int64), axis=1)
    if self.restricted_units.size:
      units = self.restricted_units
      chosen = unit_device[:, units]
      ok = self.unit_allowed[units[None, :], chosen]
      unit_device[:, units] = np.where(ok, chosen, self.fallback[units])
    return unit_device[:, self.unit]


def _op_type_index(op_types, limit: int) -> np.ndarray:
  """Column per op: the `limit` most frequent types (ties by name), then
  one shared column for the rest."""
  names, inverse, counts = np.unique(np.asarray(op_types, dtype=object),
                                     return_inverse=True, return_counts=True)
  ranked = sorted(range(len(names)), key=lambda i: (-counts[i], names[i]))
  column = np.full(len(names), min(limit, len(names)), np.int64)
  for position, i in enumerate(ranked[:limit]):
    column[i] = position
  return column[inverse.ravel()]
