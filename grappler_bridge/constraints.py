"""Hard placement constraints read from a GraphDef and TF's kernel registry.

Two kinds matter to any placer, and both the op-graph document (`costs`)
and the placement checks (`rewrite`) read them from here, so that a
placement the document allows is one the checks accept:

* ops that must share a device: TF's placer colocates every op that takes a
  resource or ref handle with the handle's producer (dataset ops excepted),
  and honours `_class: loc:@name` attributes;
* the device types that have a kernel for an op: a kernel is registered per
  device type with constraints on the op's type attrs (e.g. GPU MatMul is
  registered for float types only, so an int32 MatMul is CPU-only).
"""

import functools
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

from tensorflow.python.framework import kernels  # pylint: disable=g-import-not-at-top

from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top
from grappler_bridge import hardware as hw  # pylint: disable=g-import-not-at-top

# Registry device type of kernels that run on any device.
_ANY_DEVICE = "DEFAULT"
# Ops that take resource inputs without TF colocating them (they run
# functions over the resources): dataset ops, as in TF's
# REGISTER_INPUT_COLOCATION_EXEMPTION list.
_COLOCATION_EXEMPT_SUFFIX = "Dataset"


# ---------------------------------------------------------------------------
# Colocation.


def colocation_groups(graph_def) -> List[List[str]]:
  """Groups (lists of node names, >1 member) that must share one device.

  Each group lists its anchor first (its variable or resource placeholder
  if it has one, else its first node in graph order), so the anchor's name
  is a good label for the group; the other members follow in graph order.
  """
  nodes = graph_def.node
  index = graph_view.node_index(nodes)
  dtypes = [graph_view.output_dtypes(node) for node in nodes]
  sets = colocated_sets(nodes, index,
                        graph_view.handle_inputs(nodes, index, dtypes))
  return [[nodes[i].name for i in group] for group in _groups(nodes, sets)]


def colocation_group_names(nodes, index: Dict[str, int],
                           handle_inputs: graph_view.HandleInputs,
                           extra_groups: Iterable[Sequence[str]] = ()
                          ) -> Dict[int, str]:
  """Node index -> group name (its anchor's), for groups of >1 node.

  Args:
    nodes: the graph's NodeDefs.
    index: node name -> position.
    handle_inputs: per node, (source, slot) of its resource/ref inputs.
    extra_groups: more groups of node names to merge, e.g. Grappler's.

  Returns:
    The group name of every node that shares its device with another.
  """
  sets = colocated_sets(nodes, index, handle_inputs, extra_groups)
  names = {}
  for group in _groups(nodes, sets):
    for i in group:
      names[i] = nodes[group[0]].name
  return names


class UnionFind:
  """Disjoint sets over node indices (path halving, union by size)."""

  def __init__(self, n: int):
    self.parent = list(range(n))
    self.size = [1] * n

  def find(self, x: int) -> int:
    parent = self.parent
    while parent[x] != x:
      parent[x] = parent[parent[x]]
      x = parent[x]
    return x

  def union(self, a: int, b: int):
    a, b = self.find(a), self.find(b)
    if a == b:
      return
    if self.size[a] < self.size[b]:
      a, b = b, a
    self.parent[b] = a
    self.size[a] += self.size[b]


def colocated_sets(nodes, index: Dict[str, int],
                   handle_inputs: graph_view.HandleInputs,
                   extra_groups: Iterable[Sequence[str]] = ()) -> UnionFind:
  """Joins the nodes TF's placer puts on one device."""
  sets = UnionFind(len(nodes))
  for group in extra_groups:
    members = [index[name] for name in group if name in index]
    for member in members[1:]:
      sets.union(members[0], member)
  for i, node in enumerate(nodes):
    if "_class" in node.attr:
      for entry in node.attr["_class"].list.s:
        target = index.get(entry.decode(errors="replace").partition(
            "loc:@")[2])
        if target is not None:
          sets.union(i, target)
    if not node.op.endswith(_COLOCATION_EXEMPT_SUFFIX):
      for src, _ in handle_inputs[i]:
        sets.union(i, src)
  return sets


def _groups(nodes, sets: UnionFind) -> List[List[int]]:
  """Groups of >1 node, anchor first, the rest in graph order."""
  members: Dict[int, List[int]] = {}
  for i in range(len(nodes)):
    if sets.size[sets.find(i)] > 1:
      members.setdefault(sets.find(i), []).append(i)
  groups = []
  for group in members.values():
    anchor = next((i for i in group if _is_anchor(nodes[i])), group[0])
    groups.append([anchor] + [i for i in group if i != anchor])
  return groups


def _is_anchor(node) -> bool:
  return node.op in graph_view.VARIABLE_OPS or (
      graph_view.is_resource_placeholder(node))


# ---------------------------------------------------------------------------
# Kernels.


@functools.lru_cache(maxsize=None)
def registry_has_gpu_kernels() -> bool:
  """False on a TensorFlow build without GPU kernels, where we cannot tell."""
  return any(k.device_type == "GPU"
             for k in kernels.get_registered_kernels_for_op("MatMul").kernel)


class KernelTable:
  """Which device types have a kernel for a node (op type + type attrs)."""

  def __init__(self):
    self._kernels = {}  # op -> [(device type, constraints, label)]
    self._constraint_names = {}  # op -> type attrs the kernels constrain
    self._cache = {}

  def device_types(self, node) -> Optional[frozenset]:
    """Registry device types (maybe DEFAULT) whose kernel fits the node.

    Args:
      node: a NodeDef; its type attrs and `_kernel` label select kernels.

    Returns:
      None if the op has no registered kernel at all (the runtime implements
      it, e.g. _Arg or function calls); else the fitting device types, empty
      if no kernel fits.
    """
    op_kernels = self._op_kernels(node.op)
    if not op_kernels:
      return None
    label = node.attr["_kernel"].s.decode() if "_kernel" in node.attr else ""
    key = (node.op, label) + tuple(
        _type_attr_value(node, name)
        for name in self._constraint_names[node.op])
    if key not in self._cache:
      self._cache[key] = frozenset(
          device_type for device_type, constraints, kernel_label in op_kernels
          if kernel_label == label and _satisfies(node, constraints))
    return self._cache[key]

  def kinds(self, node) -> Optional[Tuple[str, ...]]:
    """Kinds (subset of hardware.KINDS) with a kernel; None if unrestricted."""
    types = self.device_types(node)
    if not types or _ANY_DEVICE in types:
      return None
    supported = [k for k in hw.KINDS if k in types]
    if not supported or len(supported) == len(hw.KINDS):
      return None
    return tuple(supported)

  def _op_kernels(self, op: str):
    if op not in self._kernels:
      entries = []
      for k in kernels.get_registered_kernels_for_op(op).kernel:
        constraints = tuple(
            (c.name, _allowed_values(c.allowed_values.list))
            for c in k.constraint if c.allowed_values.HasField("list"))
        entries.append((k.device_type, constraints, k.label))
      self._kernels[op] = entries
      self._constraint_names[op] = sorted(
          {name for _, constraints, _ in entries for name, _ in constraints})
    return self._kernels[op]


def _allowed_values(values) -> frozenset:
  """A kernel constraint's allowed values: dtypes, or strings for a string
  attr (GatherNd's `bad_indices_policy`)."""
  return frozenset(values.type) | frozenset(values.s)


def _type_attr_value(node, name: str):
  """The node's value of a constrained attr: a dtype, a tuple of dtypes, or
  a string (bytes); None if the node does not set it."""
  if name not in node.attr:
    return None
  value = node.attr[name]
  field = value.WhichOneof("value")
  if field == "list":
    return tuple(value.list.type) + tuple(value.list.s)
  if field == "s":
    return value.s
  return value.type


def _satisfies(node, constraints) -> bool:
  for name, allowed in constraints:
    value = _type_attr_value(node, name)
    if value is None:
      continue
    values = value if isinstance(value, tuple) else (value,)
    if any(v not in allowed for v in values):
      return False
  return True


@functools.lru_cache(maxsize=None)
def _shared_table() -> KernelTable:
  return KernelTable()


def node_has_kernel(node_def, device_type: str) -> bool:
  """Whether the node can run on `device_type`, given its type attrs.

  Unknowable cases count as yes: an op without registered kernels, a node
  no kernel fits (so the registry cannot tell), and GPU on a TensorFlow
  build that registers no GPU kernels.

  Args:
    node_def: the NodeDef.
    device_type: a TF device type, e.g. "GPU" or "CPU".

  Returns:
    False only if the registry says the node has no kernel there.
  """
  types = _shared_table().device_types(node_def)
  if not types:
    return True
  if device_type == "GPU" and not registry_has_gpu_kernels():
    return True
  return device_type in types or _ANY_DEVICE in types


def device_kinds(nodes, groups: Dict[int, str], table: KernelTable
                ) -> Tuple[List[Optional[Tuple[str, ...]]], List[str]]:
  """Allowed kinds per node; a group gets the intersection of its members'.

  Args:
    nodes: the graph's NodeDefs.
    groups: node index -> colocation group name.
    table: the kernel table to ask.

  Returns:
    (kinds per node, None = any kind; names of groups no kind can run).
  """
  if not registry_has_gpu_kernels():
    return [None] * len(nodes), []
  kinds = [table.kinds(node) for node in nodes]
  group_kinds: Dict[str, set] = {}
  for i, group in groups.items():
    allowed = set(kinds[i] if kinds[i] is not None else hw.KINDS)
    group_kinds[group] = group_kinds.get(group, set(hw.KINDS)) & allowed
  conflicts = sorted(g for g, allowed in group_kinds.items() if not allowed)
  for i, group in groups.items():
    allowed = group_kinds[group]
    if allowed and allowed != set(hw.KINDS):
      kinds[i] = tuple(k for k in hw.KINDS if k in allowed)
  return kinds, conflicts
