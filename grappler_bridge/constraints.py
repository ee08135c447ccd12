"""Hard placement constraints read from a GraphDef and TF's kernel registry.

Two kinds matter to any placer: ops that must share a device (TF's placer
colocates every op that touches a resource handle with the handle's
producer, and honours `_class: loc:@name` attributes), and ops that have no
kernel for a device kind (e.g. string ops have no GPU kernel).
"""

import functools
from typing import Iterable

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

# pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import kernels
from tensorflow.python.framework import op_def_registry
# pylint: enable=g-import-not-at-top

# Registry device types that run on any device.
_ANY_DEVICE = "DEFAULT"


@functools.lru_cache(maxsize=None)
def kernel_device_types(op: str) -> frozenset:
  """Device types with a registered kernel for `op` (may include DEFAULT)."""
  return frozenset(k.device_type
                   for k in kernels.get_registered_kernels_for_op(op).kernel)


@functools.lru_cache(maxsize=None)
def registry_has_gpu_kernels() -> bool:
  """False on a TensorFlow build without GPU kernels, where we cannot tell."""
  return "GPU" in kernel_device_types("MatMul")


def has_kernel(op: str, device_type: str) -> bool:
  """Whether `op` can run on `device_type`; unknowable cases count as yes."""
  types = kernel_device_types(op)
  if not types:
    return True  # runtime-implemented ops (_Arg, _Retval, function calls)
  if device_type == "GPU" and not registry_has_gpu_kernels():
    return True
  return device_type in types or _ANY_DEVICE in types


def output_dtypes(node) -> list:
  """DataType enum of every output of `node`, from its OpDef and attrs."""
  op_def = op_def_registry.get(node.op)
  if op_def is None:
    return []
  dtypes = []
  for arg in op_def.output_arg:
    if arg.type_list_attr:
      types = list(node.attr[arg.type_list_attr].list.type)
    else:
      dtype = arg.type or node.attr[arg.type_attr].type
      count = node.attr[arg.number_attr].i if arg.number_attr else 1
      types = [dtype] * count
    dtypes.extend(types)
  return dtypes


def colocation_groups(graph_def) -> list:
  """Groups (lists of node names, >1 member) that must share one device.

  Each group lists its resource producer (or `_class` target) first when
  there is one, so its name is a good label for the group.
  """
  names = [node.name for node in graph_def.node]
  index = {name: i for i, name in enumerate(names)}
  parent = list(range(len(names)))

  def find(i):
    while parent[i] != i:
      parent[i] = parent[parent[i]]
      i = parent[i]
    return i

  def union(anchor, other):
    # The anchor (producer / class target) stays the root: it names the group.
    root_a, root_b = find(anchor), find(other)
    if root_a != root_b:
      parent[root_b] = root_a

  resource_outputs = {}
  for node in graph_def.node:
    dtypes = output_dtypes(node)
    resource_outputs[node.name] = {
        k for k, t in enumerate(dtypes) if t == types_pb2.DT_RESOURCE}
  for i, node in enumerate(graph_def.node):
    for source, slot in _data_inputs(node.input):
      if source in index and slot in resource_outputs.get(source, ()):
        union(index[source], i)
    for target in _class_targets(node):
      if target in index:
        union(index[target], i)
  groups = {}
  for i in range(len(names)):
    groups.setdefault(find(i), []).append(i)
  return [[names[root]] + [names[i] for i in members if i != root]
          for root, members in groups.items() if len(members) > 1]


def _data_inputs(inputs: Iterable[str]):
  for name in inputs:
    if name.startswith("^"):
      continue
    source, _, slot = name.partition(":")
    yield source, int(slot) if slot else 0


def _class_targets(node):
  if "_class" not in node.attr:
    return []
  return [value.decode("utf-8")[len("loc:@"):]
          for value in node.attr["_class"].list.s
          if value.startswith(b"loc:@")]
