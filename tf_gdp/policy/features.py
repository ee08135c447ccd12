"""Policy inputs: one (op graph, topology) pair as fixed-size numpy arrays.

The policy network and the RL environment exchange observations as a dict of
padded arrays, so that graphs of different sizes batch together and the
tf-agents specs stay fixed. This module and `feature_columns` (which
computes the columns) are the only place that turns the IR (`OpGraph`,
`Topology`) into those arrays; both are TF-free so the environment can build
observations without touching TensorFlow.

Conventions the network relies on:

* Nodes are listed in topological order (`graph.topo_order`): position `i`
  holds original node `order[i]`. The Transformer-XL placer reads them in
  this order, so every node sees (through attention memory) the ops that
  feed it.
* Real nodes, edges, groups and devices come first; padding follows and is
  marked False in the masks. Padded edges point at the last node slot and
  padding nodes at the last group slot; consumers must apply the masks and
  never rely on what padding points at.
* Colocation groups are renumbered densely in order of first appearance in
  the topological order, so group ids also follow the graph's flow.
* Features are scaled to O(1) (logs divided by typical magnitudes) and are
  relative to the topology where that matters (op time on the devices that
  exist, memory relative to device capacity), so one policy sees graphs and
  clusters of very different scales.
"""

import dataclasses
import zlib
from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph
from tf_gdp.graph import scopes
from tf_gdp.policy import feature_columns
from tf_gdp.policy import push_placements

# Hashed op-type vocabulary: id 0 is padding; real types hash into
# [1, OP_VOCAB), so op types never seen in training still get an id.
OP_VOCAB = 1024

NODE_FEATURE_NAMES = (
    "log_cost_fastest",       # op time on the fastest allowed device
    "log_cost_mean",          # mean op time over allowed devices
    "log_cost_slowest",       # op time on the slowest device of any kind
    "log_cost_relative",      # fastest op time relative to the mean op
    "work_position",          # share of the graph's work before the op
    "memory_position",        # share of the persistent bytes before the op
    "log_output_bytes",
    "log_memory_bytes",
    "log_temp_bytes",
    "memory_fraction",        # persistent bytes / smallest allowed memory
    "log_transfer_time",      # moving the op's outputs over a mean link
    "log_in_degree",
    "log_out_degree",
    "depth",                  # longest path from a source / graph depth
    "height",                 # longest path to a sink / graph depth
    "position",               # topological position / num_nodes
    "allowed_fraction",       # devices allowed for the op's group / devices
    "is_pinned",
    "is_control_only",        # no data inputs and no data outputs
    "log_group_size",
    "graph_log_nodes",        # graph-level context, broadcast to every node
    "graph_memory_load",      # total persistent bytes / total device memory
    "graph_log_depth",
    # Numbered name scopes (`scopes`): rank among siblings, sibling count.
    *(f"scope_{slot}_{what}" for slot in range(scopes.NUM_SLOTS)
      for what in ("rank", "log_siblings")),
)
F_NODE = len(NODE_FEATURE_NAMES)

EDGE_FEATURE_NAMES = (
    "log_bytes",
    "is_control",
    "log_transfer_time",      # bytes over a mean link, plus its latency
)
F_EDGE = len(EDGE_FEATURE_NAMES)

DEVICE_FEATURE_NAMES = (
    "kind_gpu", "kind_cpu", "kind_other",
    "log_speed",                  # log of the speed factor
    "relative_speed",             # speed / fastest device's speed
    "log_memory_gib",
    "memory_fraction",            # capacity / total capacity
    "fits_graph",                 # min(1, capacity / graph persistent bytes)
    "mean_log_bandwidth",         # to the other devices, log(GB/s) / 5
    "min_log_bandwidth",
    "mean_log_latency",           # to the other devices, log1p(us) / 10
    "work_share",                 # allowed graph work this device could run
    "relative_index",             # index among devices of its kind / count
    # Sinusoids of the index among devices of its kind: identical devices
    # still need distinct embeddings, or a policy could never send two
    # chains to two different (but identical) GPUs coherently.
    *(f"index_{fn}_{i}"
      for i in range(len(feature_columns.INDEX_FREQUENCIES))
      for fn in ("sin", "cos")),
    "log_num_devices",
)
F_DEVICE = len(DEVICE_FEATURE_NAMES)

# Pipeline exploration (see `network`): `exploration_noise` holds a sampled
# placement's random pushes, zeros in every observation a graph produces
# (the greedy policy); samplers fill it. One column per stage rule
# (`scopes.STAGE_RULES`): its value on device 0 is the sample's pipeline
# push, a random gain towards that rule's pipeline (`devices.stage_target`).
PIPELINE_NOISE_COLUMN = 0
NUM_STAGE_RULES = len(scopes.STAGE_RULES)
# And one column of per-device shifts of the stage slots' centres, in slots
# (`devices.stage_direction`): a push with shifts tries a neighbouring
# contiguous split of the stages over the devices.
PIPELINE_SHIFT_COLUMN = PIPELINE_NOISE_COLUMN + NUM_STAGE_RULES
# And one column per placement push (`push_placements.PUSHES`): a random
# gain on the direction of a whole placement of the graph
# (`placement_features`): the balanced cut METIS finds for graphs of
# parallel branches (two directions of a bidirectional RNN, the towers of a
# recommender), which no stage rule names, m-ETF's schedule, the step's
# spine with its side branches offloaded, the fewest contiguous stages that
# fit memory and HEFT's schedule.
PLACEMENT_NOISE_COLUMN = PIPELINE_SHIFT_COLUMN + 1
NUM_PLACEMENT_PUSHES = len(push_placements.PUSHES)
EXPLORATION_SIZE = PLACEMENT_NOISE_COLUMN + NUM_PLACEMENT_PUSHES

# Names and dtypes of the observation dict (`as_tensors`), with the padded
# dimension each axis has: N nodes, E edges, G groups, D devices.
_OBSERVATION_LAYOUT = (
    ("node_features", ("N", F_NODE), np.float32),
    ("op_type_ids", ("N",), np.int32),
    ("scope_ids", ("N", scopes.NUM_SLOTS), np.int32),
    ("edge_src", ("E",), np.int32),
    ("edge_dst", ("E",), np.int32),
    ("edge_features", ("E", F_EDGE), np.float32),
    ("node_mask", ("N",), np.bool_),
    ("edge_mask", ("E",), np.bool_),
    ("group_ids", ("N",), np.int32),
    ("group_mask", ("G",), np.bool_),
    ("device_features", ("D", F_DEVICE), np.float32),
    ("device_mask", ("D",), np.bool_),
    ("exploration_noise", ("D", EXPLORATION_SIZE), np.float32),
    ("stage_features", ("N", 2 * NUM_STAGE_RULES), np.float32),
    ("placement_features", ("N", 2 * NUM_PLACEMENT_PUSHES), np.float32),
    ("allowed", ("G", "D"), np.bool_),
    ("num_nodes", (), np.int32),
    ("num_groups", (), np.int32),
    ("num_devices", (), np.int32),
)
OBSERVATION_KEYS = tuple(name for name, _, _ in _OBSERVATION_LAYOUT)


@dataclasses.dataclass(frozen=True, eq=False)
class PolicyInputs:
  """One (graph, topology) pair, padded; see the module docstring.

  Attributes:
    node_features: float32[N, F_NODE], rows in topological order.
    op_type_ids: int32[N] hashed op type in [1, OP_VOCAB); 0 for padding.
    scope_ids: int32[N, scopes.NUM_SLOTS] hashed stems of the numbered name
      scopes in [1, scopes.SCOPE_VOCAB); 0 for none and for padding.
    edge_src, edge_dst: int32[E] node positions (not original ids).
    edge_features: float32[E, F_EDGE].
    node_mask, edge_mask: bool[N], bool[E], True for real entries.
    group_ids: int32[N] dense colocation group in [0, G).
    group_mask: bool[G].
    device_features: float32[D, F_DEVICE].
    device_mask: bool[D].
    exploration_noise: float32[D, EXPLORATION_SIZE], zeros (the greedy
      policy); a sampler sets it per sample.
    stage_features: float32[N, 2 * NUM_STAGE_RULES] per node and stage
      rule r (`scopes.STAGE_RULES`): columns 2r, 2r + 1 are its stage along
      the graph's main stack of numbered blocks in [0, 1]
      (`scopes.stage_coordinates`), and 1.0 if it has one (0.0: none, and
      padding).
    placement_features: float32[N, 2 * NUM_PLACEMENT_PUSHES] per node and
      placement push p (`push_placements.PUSHES`): column 2p is the index
      of the device that placement gives the op, which
      `devices.placement_direction` pulls it to whatever the device's kind
      (a lone GPU, the host CPU); column 2p + 1 is 1.0 if it gives one (0.0:
      an op METIS's cut leaves out, a placement that does not exist, and
      padding).
    allowed: bool[G, D] every member of the group may run on the device;
      padding groups allow device 0 only, padding devices nothing.
    order: int32[num_nodes] position -> original node id.
    num_nodes, num_groups, num_devices: real sizes.
  """
  node_features: np.ndarray
  op_type_ids: np.ndarray
  scope_ids: np.ndarray
  edge_src: np.ndarray
  edge_dst: np.ndarray
  edge_features: np.ndarray
  node_mask: np.ndarray
  edge_mask: np.ndarray
  group_ids: np.ndarray
  group_mask: np.ndarray
  device_features: np.ndarray
  device_mask: np.ndarray
  exploration_noise: np.ndarray
  stage_features: np.ndarray
  placement_features: np.ndarray
  allowed: np.ndarray
  order: np.ndarray
  num_nodes: int
  num_groups: int
  num_devices: int

  @property
  def max_nodes(self) -> int:
    return int(self.node_mask.shape[0])

  @property
  def max_edges(self) -> int:
    return int(self.edge_mask.shape[0])

  @property
  def max_groups(self) -> int:
    return int(self.group_mask.shape[0])

  @property
  def max_devices(self) -> int:
    return int(self.device_mask.shape[0])


def op_type_id(op_type: str) -> int:
  """Stable hashed id of an op type, in [1, OP_VOCAB); unseen types map too."""
  return 1 + zlib.crc32(op_type.encode("utf-8")) % (OP_VOCAB - 1)


def policy_inputs(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
                  max_nodes: Optional[int] = None,
                  max_edges: Optional[int] = None,
                  max_groups: Optional[int] = None,
                  max_devices: Optional[int] = None) -> PolicyInputs:
  """Builds the padded policy inputs of `graph` on `topology`.

  Args:
    graph: the op graph to place.
    topology: the devices to place it on.
    max_nodes, max_edges, max_groups, max_devices: padded sizes; None means
      exactly the graph's (topology's) size.

  Returns:
    The `PolicyInputs`.

  Raises:
    InputError: the graph is empty, does not fit the maxima, or a colocation
      group has no device that every member may run on.
  """
  n, m, d = graph.num_nodes, graph.num_edges, topology.num_devices
  if n == 0:
    raise errors.InputError(f"graph {graph.name!r} has no ops to place")
  order = graph.topo_order.astype(np.int32)
  position = np.empty(n, np.int32)
  position[order] = np.arange(n, dtype=np.int32)
  group_of_node, num_groups = feature_columns.groups_in_topological_order(
      graph, order)

  sizes = {}
  for label, real, wanted in (("nodes", n, max_nodes), ("edges", m, max_edges),
                              ("groups", num_groups, max_groups),
                              ("devices", d, max_devices)):
    size = real if wanted is None else int(wanted)
    if real > size:
      raise errors.InputError(
          f"graph {graph.name!r} on {topology.name!r} has {real} {label}, "
          f"more than the policy's maximum of {size}")
    sizes[label] = size
  big_n, big_e, big_g, big_d = (sizes["nodes"], sizes["edges"],
                                sizes["groups"], sizes["devices"])
  if big_e and not big_n:
    raise errors.InputError("padded edges need at least one node slot")

  tables = simulator.device_tables(graph, topology)
  node_allowed = tables.allowed  # [n, d], original node ids
  group_allowed = np.ones((num_groups, d), bool)
  np.logical_and.at(group_allowed, group_of_node, node_allowed)
  empty = np.flatnonzero(~group_allowed.any(axis=1))
  if empty.size:
    member = int(order[np.flatnonzero(group_of_node[order] == empty[0])[0]])
    raise errors.InputError(
        f"op {graph.node_names[member]!r} (colocation group "
        f"{graph.colocation_groups[member]!r}) has no device on "
        f"{topology.name!r} that all members of its group may run on")

  scope_ids, scope_ranks, scope_counts = scopes.scope_coordinates(
      graph.node_names)
  node_features = np.zeros((big_n, F_NODE), np.float32)
  node_features[:n] = _stacked(feature_columns.node_columns(
      graph, topology, tables, group_of_node, group_allowed, order, position,
      scope_ranks, scope_counts), NODE_FEATURE_NAMES)[order]
  padded_scope_ids = np.zeros((big_n, scopes.NUM_SLOTS), np.int32)
  padded_scope_ids[:n] = scope_ids[order]
  stage_features = np.zeros((big_n, 2 * NUM_STAGE_RULES), np.float32)
  for r, (stage, staged) in enumerate(scopes.stage_coordinates_of_rules(
      graph.node_names, graph.edge_src, graph.edge_dst, order)):
    stage_features[:n, 2 * r] = stage[order]
    stage_features[:n, 2 * r + 1] = staged[order]
  placement_features = np.zeros((big_n, 2 * NUM_PLACEMENT_PUSHES), np.float32)
  for p, name in enumerate(push_placements.PUSHES):
    pushed = push_placements.devices(name, graph, topology)[order]
    placement_features[:n, 2 * p] = np.maximum(pushed, 0)
    placement_features[:n, 2 * p + 1] = pushed >= 0
  op_ids = np.zeros(big_n, np.int32)
  type_ids = {t: op_type_id(t) for t in set(graph.op_types)}
  op_ids[:n] = [type_ids[graph.op_types[i]] for i in order]

  pad_node = big_n - 1
  edge_src = np.full(big_e, pad_node, np.int32)
  edge_dst = np.full(big_e, pad_node, np.int32)
  edge_src[:m] = position[graph.edge_src]
  edge_dst[:m] = position[graph.edge_dst]
  edge_features = np.zeros((big_e, F_EDGE), np.float32)
  edge_features[:m] = _stacked(feature_columns.edge_columns(graph, topology),
                               EDGE_FEATURE_NAMES)

  group_ids = np.full(big_n, big_g - 1, np.int32)
  group_ids[:n] = group_of_node[order]
  allowed = np.zeros((big_g, big_d), bool)
  allowed[:num_groups, :d] = group_allowed
  allowed[num_groups:, 0] = True
  device_features = np.zeros((big_d, F_DEVICE), np.float32)
  device_features[:d] = _stacked(
      feature_columns.device_columns(graph, topology, tables),
      DEVICE_FEATURE_NAMES)

  return PolicyInputs(
      node_features=node_features, op_type_ids=op_ids,
      scope_ids=padded_scope_ids,
      edge_src=edge_src, edge_dst=edge_dst, edge_features=edge_features,
      node_mask=np.arange(big_n) < n, edge_mask=np.arange(big_e) < m,
      group_ids=group_ids, group_mask=np.arange(big_g) < num_groups,
      device_features=device_features, device_mask=np.arange(big_d) < d,
      exploration_noise=np.zeros((big_d, EXPLORATION_SIZE), np.float32),
      stage_features=stage_features,
      placement_features=placement_features,
      allowed=allowed, order=order, num_nodes=n, num_groups=num_groups,
      num_devices=d)


def group_to_node_placement(inputs: PolicyInputs,
                            group_devices: np.ndarray) -> np.ndarray:
  """Device index per original node id, from one device per (padded) group.

  Args:
    inputs: the `PolicyInputs` the groups refer to.
    group_devices: int[G] (or int[num_groups]) device index per group.

  Returns:
    int32[num_nodes], indexed by the graph's original node ids, ready for
    `simulator.simulate`.

  Raises:
    InputError: too few groups, or a real group names a padding device.
  """
  group_devices = np.asarray(group_devices).reshape(-1)
  if group_devices.shape[0] < inputs.num_groups:
    raise errors.InputError(
        f"{group_devices.shape[0]} group devices for {inputs.num_groups} "
        "groups")
  real = group_devices[:inputs.num_groups].astype(np.int64)
  bad = np.flatnonzero((real < 0) | (real >= inputs.num_devices))
  if bad.size:
    raise errors.InputError(
        f"group {int(bad[0])} is placed on device {int(real[bad[0]])}; the "
        f"topology has {inputs.num_devices} devices")
  placement = np.empty(inputs.num_nodes, np.int32)
  placement[inputs.order] = real[inputs.group_ids[:inputs.num_nodes]]
  return placement


def node_to_group_placement(inputs: PolicyInputs,
                            placement: np.ndarray) -> np.ndarray:
  """int32[num_groups] device per group of a placement that keeps groups whole.

  The inverse of `group_to_node_placement`: what the policy would have had
  to choose to give `placement` (e.g. one repaired after sampling).
  """
  placement = np.asarray(placement).reshape(-1)
  if placement.shape[0] != inputs.num_nodes:
    raise errors.InputError(
        f"a placement of {placement.shape[0]} ops for {inputs.num_nodes}")
  groups = inputs.group_ids[:inputs.num_nodes]
  _, first = np.unique(groups, return_index=True)
  return placement[inputs.order[first]].astype(np.int32)


def as_tensors(inputs: PolicyInputs) -> dict:
  """The observation dict (numpy arrays, keys `OBSERVATION_KEYS`)."""
  out = {}
  for name, _, dtype in _OBSERVATION_LAYOUT:
    out[name] = np.asarray(getattr(inputs, name), dtype)
  return out


def observation_spec(max_nodes: int, max_edges: int, max_groups: int,
                     max_devices: int) -> dict:
  """name -> (shape, numpy dtype) of one unbatched observation."""
  dims = {"N": int(max_nodes), "E": int(max_edges), "G": int(max_groups),
          "D": int(max_devices)}
  return {name: (tuple(dims.get(a, a) for a in axes), np.dtype(dtype))
          for name, axes, dtype in _OBSERVATION_LAYOUT}


def _stacked(columns: dict, names) -> np.ndarray:
  """float64[rows, len(names)]: the named columns side by side."""
  return np.stack([columns[name] for name in names], axis=1)


def trim_batch(batch: dict) -> dict:
  """Stacked observations [B, ...] cut to the largest real sizes among them.

  An environment pads every task to its largest graph, so a batch of small
  graphs would pay for the largest one's nodes. Cutting the padding keeps
  every real entry where it was, and the padding's pointers (edges to the
  last node slot, padding nodes to the last group slot) are moved to the
  new last slots. Entries not in the observation layout pass unchanged.
  """
  node_mask, edge_mask = batch["node_mask"], batch["edge_mask"]
  sizes = {"N": int(np.max(batch["num_nodes"])),
           "E": max(int(edge_mask.sum(-1).max()), 1),
           "G": int(np.max(batch["num_groups"])),
           "D": int(np.max(batch["num_devices"]))}
  out = dict(batch)
  for name, axes, _ in _OBSERVATION_LAYOUT:
    cuts = tuple(slice(None, sizes[a]) if a in sizes else slice(None)
                 for a in axes)
    out[name] = np.asarray(batch[name])[(slice(None),) + cuts]
  real_edges = edge_mask[:, :sizes["E"]]
  for name in ("edge_src", "edge_dst"):
    out[name] = np.where(real_edges, out[name], sizes["N"] - 1)
  out["group_ids"] = np.where(node_mask[:, :sizes["N"]], out["group_ids"],
                              sizes["G"] - 1)
  return out
