"""Writes a placement into a graph's device fields and runs the placed graph.

A placement is a map op name -> TF device string. Illegal placements (an op
on a device kind it has no kernel for, a colocation group split over devices,
an unknown op or a malformed device string) raise `PlacementError`: they are
never silently changed, because a silently moved op makes measured step times
lie.
"""

from typing import Callable, Mapping, Optional

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import constraints  # pylint: disable=g-import-not-at-top
from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from grappler_bridge import extract  # pylint: disable=g-import-not-at-top


def apply_placement(graph_def, placement: Mapping[str, str], *,
                    check_kernels: bool = True,
                    respect_pins: bool = True) -> tf.compat.v1.GraphDef:
  """Returns a copy of `graph_def` whose nodes carry the placement's devices.

  Nodes missing from `placement` keep their current device field. With
  `respect_pins`, a node whose device field is already set (pinned by the
  user, or a captured variable's handle) may only get a matching device.
  """
  by_name = {node.name: node for node in graph_def.node}
  unknown = [name for name in placement if name not in by_name]
  if unknown:
    raise errors.PlacementError(
        f"placement names {len(unknown)} op(s) not in the graph, e.g. {unknown[0]!r}")
  canonical = {}
  for device in set(placement.values()):
    canonical[device] = canonical_device(device)
  placed = tf.compat.v1.GraphDef()
  placed.CopyFrom(graph_def)
  for node in placed.node:
    if node.name not in placement:
      continue
    device = canonical[placement[node.name]]
    if respect_pins and node.device and not _matches(
        tf.DeviceSpec.from_string(node.device),
        tf.DeviceSpec.from_string(device)):
      raise errors.PlacementError(
          f"op {node.name!r} is pinned to {node.device} but the placement puts "
          f"it on {device}")
    node.device = device
  check_placement(placed, check_kernels=check_kernels)
  return placed


def canonical_device(device: str) -> str:
  """Parses a TF device string; PlacementError if it is not one."""
  try:
    spec = tf.DeviceSpec.from_string(device)
  except (ValueError, TypeError) as e:
    raise errors.PlacementError(f"{device!r} is not a TF device string") from e
  if not spec.device_type:
    raise errors.PlacementError(
        f"device {device!r} names no device type (e.g. /device:GPU:0)")
  return spec.to_string()


def check_placement(graph_def, *, check_kernels: bool = True) -> None:
  """Raises PlacementError if the device fields break a hard constraint."""
  devices = {node.name: node.device for node in graph_def.node}
  for group in constraints.colocation_groups(graph_def):
    used = {devices[name] for name in group if devices[name]}
    if len(used) > 1 and not _one_device(used):
      raise errors.PlacementError(
          f"colocation group of {group[0]!r} ({len(group)} ops) is split over "
          f"devices {sorted(used)}; its ops must share one device")
  if not check_kernels:
    return
  for node in graph_def.node:
    if not node.device:
      continue
    kind = tf.DeviceSpec.from_string(node.device).device_type
    if kind and not constraints.node_has_kernel(node, kind):
      raise errors.PlacementError(
          f"op {node.name!r} ({node.op}) has no {kind} kernel but is placed on "
          f"{node.device}")


def group_pins(graph_def) -> dict:
  """{node name: device} for every member of a colocation group that has a
  pinned member: where the group must run (its first pin)."""
  devices = {node.name: node.device for node in graph_def.node}
  pins = {}
  for group in constraints.colocation_groups(graph_def):
    pinned = [devices[name] for name in group if devices[name]]
    if pinned:
      pins.update(dict.fromkeys(group, pinned[0]))
  return pins


def check_devices_exist(graph_def) -> None:
  """Raises PlacementError if a device field names no local logical device."""
  local = [tf.DeviceSpec.from_string(d.name)
           for d in tf.config.list_logical_devices()]
  for device in sorted({node.device for node in graph_def.node if node.device}):
    wanted = tf.DeviceSpec.from_string(device)
    if not any(_matches(wanted, have) for have in local):
      raise errors.PlacementError(
          f"device {device} does not exist here (local devices: "
          f"{', '.join(sorted(have.to_string() for have in local))})"
          f"{_missing_device_hint(wanted)}")


def _missing_device_hint(wanted: tf.DeviceSpec) -> str:
  """What usually makes a placed device missing, and what to do."""
  if wanted.job not in (None, "localhost"):
    return (f"; it is a device of job {wanted.job!r}, and this process is "
            "not connected to that cluster")
  if wanted.device_type == "CPU":
    return ("; to run on several CPU devices of this process, split the "
            "host CPU first: tf.config.set_logical_device_configuration("
            "tf.config.list_physical_devices('CPU')[0], "
            "[tf.config.LogicalDeviceConfiguration()] * K), before "
            "TensorFlow runs anything")
  return ("; a placement for devices that are not attached (a preset such "
          "as p100x4) can be saved and inspected, not run here")


_LOCAL_DEFAULTS = {"job": "localhost", "replica": 0, "task": 0}
_FIELDS = ("job", "replica", "task", "device_type", "device_index")


def _one_device(names) -> bool:
  """Whether device strings all name one device: a pin written short
  (`/device:CPU:0`) and a placement's full name for the same local device
  are one device."""
  specs = [tf.DeviceSpec.from_string(name) for name in names]
  fullest = max(specs, key=lambda spec: sum(
      getattr(spec, field) is not None for field in _FIELDS))
  return all(_matches(spec, fullest) and _matches(fullest, spec)
             for spec in specs)


def _matches(wanted: tf.DeviceSpec, have: tf.DeviceSpec) -> bool:
  """Whether every field that `wanted` specifies agrees with local `have`."""
  for field in _FIELDS:
    want = getattr(wanted, field)
    got = getattr(have, field)
    if got is None:
      got = _LOCAL_DEFAULTS.get(field)
    if want is not None and str(want).upper() != str(got).upper():
      return False
  return True


def check_captures_stay(graph_def, extracted) -> None:
  """Raises PlacementError if a captured value's ops leave its device.

  Running on the caller's own variables means each variable stays where it
  was created, and TF keeps every op using its handle on that device.
  """
  variables = extracted.resource_captures
  lives_on = {name: device for name, device in
              zip(extracted.capture_names, extracted.capture_devices)
              if device and name in variables}
  if not lives_on:
    return
  devices = {node.name: node.device for node in graph_def.node}
  groups = {name: group for group in constraints.colocation_groups(graph_def)
            for name in group}
  for name, home in lives_on.items():
    home_spec = tf.DeviceSpec.from_string(home)
    for member in groups.get(name, [name]):
      device = devices.get(member)
      if device and not _matches(tf.DeviceSpec.from_string(device), home_spec):
        raise errors.PlacementError(
            f"op {member!r} uses the captured variable {name!r}, which lives "
            f"on {home}, but is placed on {device}")


def placed_function(extracted: "extract.ExtractedGraph",
                    placement: Optional[Mapping[str, str]] = None,
                    *, check_devices: bool = True) -> Callable:
  """A callable that runs the extracted function with `placement` applied.

  It takes the same flattened arguments as the original function, feeds the
  captured tensors (e.g. the same variable handles, so variable updates land
  in the caller's variables) and returns the flat list of outputs.
  """
  if not extracted.output_names and not extracted.fetches:
    raise errors.InputError("the extracted graph has nothing to run")
  graph_def = (apply_placement(extracted.graph_def, placement)
               if placement else extracted.graph_def)
  if check_devices:
    check_devices_exist(graph_def)
  check_captures_stay(graph_def, extracted)
  arg_names = list(extracted.arg_names)
  capture_names = list(extracted.capture_names)
  captured = list(extracted.captured_values)
  output_names = list(extracted.output_names)
  side_effects = [f for f in extracted.fetches
                  if f not in {n.split(":")[0] for n in output_names}]
  graph_def_bytes = graph_def.SerializeToString()

  def run_imported(*args):
    imported = tf.compat.v1.GraphDef.FromString(graph_def_bytes)
    func_graph = tf.compat.v1.get_default_graph()
    input_map = dict(zip(arg_names, args))
    input_map.update((name, func_graph.capture(value))
                     for name, value in zip(capture_names, captured))
    input_map = {f"{name}:0": tensor for name, tensor in input_map.items()}
    results = tf.graph_util.import_graph_def(
        imported, input_map=input_map,
        return_elements=output_names + side_effects, name="placed")
    outputs = results[:len(output_names)]
    effects = results[len(output_names):]
    with tf.control_dependencies(effects):
      return [tf.identity(t) for t in outputs]

  signature = [_placeholder_spec(graph_def, n) for n in arg_names]
  return tf.compat.v1.wrap_function(run_imported, signature)


def _placeholder_spec(graph_def, name: str) -> tf.TensorSpec:
  """The TensorSpec of an argument placeholder, for wrap_function's signature."""
  node = next(n for n in graph_def.node if n.name == name)
  shape = tf.TensorShape(node.attr["shape"].shape) if "shape" in node.attr else None
  return tf.TensorSpec(shape, tf.dtypes.as_dtype(node.attr["dtype"].type))
