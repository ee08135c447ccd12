"""The feature columns of the policy inputs, computed from the IR.

`features` lays the columns out (names, order, padding); each function here
returns its columns by name, for every node, edge or device of one (graph,
topology) pair. Logs are divided by typical magnitudes so that every column
is O(1). TF-free, like `features`.
"""

import math

import numpy as np

from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph
from tf_gdp.graph import scopes

# Scales that bring log-magnitudes to O(1): times in microseconds (1 s ~ 13.8),
# bytes (1 GiB ~ 20.8), degrees and counts (1e4 ~ 9.2).
_TIME_SCALE = 10.0
_BYTES_SCALE = 20.0
_COUNT_SCALE = 10.0
# Device kinds with their own one-hot slot; any other kind sets "other".
DEVICE_KINDS = ("GPU", "CPU")
# Frequencies of the sinusoids of a device's index among devices of its kind.
INDEX_FREQUENCIES = (1.0, 1.0 / 3.0, 1.0 / 9.0)


def groups_in_topological_order(graph: op_graph.OpGraph, order: np.ndarray):
  """Group id per original node, renumbered by first appearance in `order`."""
  raw = graph.group_ids
  num_groups = int(raw.max()) + 1
  first_position = np.full(num_groups, np.iinfo(np.int64).max, np.int64)
  np.minimum.at(first_position, raw[order], np.arange(order.shape[0]))
  rank = np.empty(num_groups, np.int32)
  rank[np.argsort(first_position, kind="stable")] = np.arange(num_groups)
  return rank[raw], num_groups


def _log(x, scale):
  return np.log1p(np.maximum(np.asarray(x, np.float64), 0.0)) / scale


def _mean_link(topology: topology_lib.Topology):
  """(bytes per microsecond, latency us) of an average link between devices."""
  d = topology.num_devices
  if d < 2:
    return None, 0.0
  off = ~np.eye(d, dtype=bool)
  bytes_per_us = float(np.mean(topology.bandwidth_gbps[off])) * 1e3
  return bytes_per_us, float(np.mean(topology.latency_us[off]))


def node_columns(graph, topology, tables, group_of_node, group_allowed, order,
                 position, scope_ranks, scope_counts) -> dict:
  """Node feature name -> float64[n] in original node-id order."""
  n = graph.num_nodes
  allowed = group_allowed[group_of_node]  # [n, d] the group's devices
  duration = tables.duration_us
  masked = np.where(allowed, duration, np.inf)
  fastest = masked.min(axis=1)
  mean = np.where(allowed, duration, 0.0).sum(1) / allowed.sum(1)
  slowest = duration.max(axis=1)
  total = float(fastest.sum())
  mean_op = total / n
  in_degree = np.bincount(graph.edge_dst, minlength=n)
  out_degree = np.bincount(graph.edge_src, minlength=n)
  data = graph.edge_output >= 0
  data_degree = (np.bincount(graph.edge_dst[data], minlength=n) +
                 np.bincount(graph.edge_src[data], minlength=n))
  depth = longest_path_lengths(n, graph.edge_src, graph.edge_dst)
  height = longest_path_lengths(n, graph.edge_dst, graph.edge_src)
  graph_depth = max(int(depth.max()), 1)
  capacity = topology.memory_bytes.astype(np.float64)
  smallest = np.where(allowed, capacity[None, :], np.inf).min(axis=1)
  link_bytes_per_us, link_latency = _mean_link(topology)
  if link_bytes_per_us is None:
    transfer = np.zeros(n)
  else:
    transfer = (graph.output_bytes / link_bytes_per_us +
                np.where(graph.output_bytes > 0, link_latency, 0.0))
  group_size = np.bincount(group_of_node)[group_of_node]
  pinned = np.array([p is not None for p in graph.pinned_devices], np.float64)
  memory = graph.memory_bytes.astype(np.float64)

  columns = {
      "log_cost_fastest": _log(fastest, _TIME_SCALE),
      "log_cost_mean": _log(mean, _TIME_SCALE),
      "log_cost_slowest": _log(slowest, _TIME_SCALE),
      "log_cost_relative": np.log1p(fastest / mean_op) if mean_op > 0
                           else np.zeros(n),
      "work_position": _cumulative_share(fastest, order),
      "memory_position": _cumulative_share(memory, order),
      "log_output_bytes": _log(graph.output_bytes, _BYTES_SCALE),
      "log_memory_bytes": _log(graph.memory_bytes, _BYTES_SCALE),
      "log_temp_bytes": _log(graph.temp_bytes, _BYTES_SCALE),
      "memory_fraction": np.minimum(memory / smallest, 4.0),
      "log_transfer_time": _log(transfer, _TIME_SCALE),
      "log_in_degree": _log(in_degree, _COUNT_SCALE / 2),
      "log_out_degree": _log(out_degree, _COUNT_SCALE / 2),
      "depth": depth / graph_depth,
      "height": height / graph_depth,
      "position": position / max(n - 1, 1),
      "allowed_fraction": allowed.sum(1) / topology.num_devices,
      "is_pinned": pinned,
      "is_control_only": (data_degree == 0).astype(np.float64),
      "log_group_size": _log(group_size - 1, _COUNT_SCALE / 2),
      "graph_log_nodes": np.full(n, math.log1p(n) / _COUNT_SCALE),
      "graph_memory_load": np.full(
          n, min(float(memory.sum()) / float(capacity.sum()), 4.0)),
      "graph_log_depth": np.full(n, math.log1p(graph_depth) / _COUNT_SCALE),
  }
  for slot in range(scopes.NUM_SLOTS):
    columns[f"scope_{slot}_rank"] = scope_ranks[:, slot]
    columns[f"scope_{slot}_log_siblings"] = scope_counts[:, slot]
  return columns


def _cumulative_share(values, order) -> np.ndarray:
  """Per node (original ids): share of sum(values) strictly before it in order.

  Where an op sits in the work (or memory) of the whole graph is what a
  pipeline-style split cuts on, so it is given directly.
  """
  values = np.asarray(values, np.float64)
  total = float(values.sum())
  share = np.zeros(values.shape[0])
  if total > 0:
    ordered = values[order]
    share[order] = (np.cumsum(ordered) - ordered) / total
  return share


def edge_columns(graph, topology) -> dict:
  """Edge feature name -> float64[m] in the graph's edge order."""
  link_bytes_per_us, link_latency = _mean_link(topology)
  nbytes = graph.edge_bytes.astype(np.float64)
  if link_bytes_per_us is None:
    transfer = np.zeros_like(nbytes)
  else:
    transfer = nbytes / link_bytes_per_us + link_latency
  columns = {
      "log_bytes": _log(nbytes, _BYTES_SCALE),
      "is_control": (graph.edge_output < 0).astype(np.float64),
      "log_transfer_time": _log(transfer, _TIME_SCALE),
  }
  return columns


def device_columns(graph, topology, tables) -> dict:
  """Device feature name -> float64[d] in the topology's device order."""
  d = topology.num_devices
  kinds = topology.kinds
  speeds = topology.speeds
  capacity = topology.memory_bytes.astype(np.float64)
  graph_memory = float(graph.memory_bytes.sum())
  off = ~np.eye(d, dtype=bool)
  if d > 1:
    log_bw = np.log(np.maximum(topology.bandwidth_gbps, 1e-3)) / 5.0
    log_lat = np.log1p(np.maximum(topology.latency_us, 0.0)) / _TIME_SCALE
    mean_bw = np.where(off, log_bw, 0.0).sum(1) / (d - 1)
    min_bw = np.where(off, log_bw, np.inf).min(1)
    mean_lat = np.where(off, log_lat, 0.0).sum(1) / (d - 1)
  else:
    mean_bw = min_bw = mean_lat = np.zeros(1)
  # Share of the graph's work (at this device's speed) the device may take:
  # a CPU next to GPUs is allowed most ops but runs them much slower.
  inverse_time = np.where(tables.allowed, 1.0 / np.maximum(
      tables.duration_us, 1e-6), 0.0)
  share = inverse_time / np.maximum(inverse_time.sum(1, keepdims=True), 1e-12)
  work = np.maximum(tables.duration_us.min(1), 0.0)
  work_share = (share * work[:, None]).sum(0) / max(float(work.sum()), 1e-12)
  if work.sum() <= 0:
    work_share = tables.allowed.mean(0)
  index_in_kind = np.zeros(d)
  count_of_kind = np.zeros(d)
  for kind in set(kinds):
    members = [j for j, k in enumerate(kinds) if k == kind]
    index_in_kind[members] = np.arange(len(members))
    count_of_kind[members] = len(members)
  columns = {
      "kind_gpu": np.array([k == "GPU" for k in kinds], np.float64),
      "kind_cpu": np.array([k == "CPU" for k in kinds], np.float64),
      "kind_other": np.array([k not in DEVICE_KINDS for k in kinds],
                             np.float64),
      "log_speed": np.log(speeds),
      "relative_speed": speeds / speeds.max(),
      "log_memory_gib": np.log1p(capacity / (1 << 30)) / 5.0,
      "memory_fraction": capacity / capacity.sum(),
      "fits_graph": (np.minimum(capacity / graph_memory, 1.0) if graph_memory
                     else np.ones(d)),
      "mean_log_bandwidth": mean_bw,
      "min_log_bandwidth": min_bw,
      "mean_log_latency": mean_lat,
      "work_share": work_share,
      "relative_index": index_in_kind / count_of_kind,
      "log_num_devices": np.full(d, math.log(d) / 3.0),
  }
  for i, frequency in enumerate(INDEX_FREQUENCIES):
    angle = index_in_kind * frequency
    columns[f"index_sin_{i}"] = np.sin(angle)
    columns[f"index_cos_{i}"] = np.cos(angle)
  return columns


def longest_path_lengths(n: int, src: np.ndarray, dst: np.ndarray):
  """int64[n]: edges on the longest path from any source along src -> dst.

  Kahn's algorithm over Python lists (a 60k-op GNMT graph has thousands of
  levels, too many for one numpy wave per level): an op's length is final
  when its last input is done. Ops on or behind a cycle get 0.
  """
  src = np.asarray(src, np.int64)
  dst = np.asarray(dst, np.int64)
  indegree = np.bincount(dst, minlength=n).tolist()
  by_src = np.argsort(src, kind="stable")
  targets = dst[by_src].tolist()
  ptr = np.searchsorted(src[by_src], np.arange(n + 1)).tolist()
  length = [0] * n
  done = [False] * n
  ready = [v for v in range(n) if not indegree[v]]
  while ready:
    v = ready.pop()
    done[v] = True
    after = length[v] + 1
    for w in targets[ptr[v]:ptr[v + 1]]:
      if length[w] < after:
        length[w] = after
      indegree[w] -= 1
      if not indegree[w]:
        ready.append(w)
  return np.where(done, np.asarray(length, np.int64), 0)
