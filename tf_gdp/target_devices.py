"""What `devices=` names, as a topology: presets, files, "local" or a device list.

`gdp.place(..., devices=...)` takes a preset name (`p100x4`, `local-cpus:2`),
a topology JSON file, a `Topology`, "local" (this process's GPUs if it has
any, else its logical CPU devices), or a list of TF device strings and
`tf.config.LogicalDevice`s such as `["/device:CPU:0", "/device:CPU:1"]`.

A list is priced from the attached hardware when every device in it is one of
this process's devices (GPUs by the hardware spec their name mentions, CPUs as
`local-cpus`); otherwise from the first preset that has all of them
(`presets.DEFAULT` first, so unattached GPUs are priced as its GPUs; a
`/job:worker/task:i` device is a `cpu-workers:K` worker). A device that is in
neither is an error that names what would have been accepted.
"""

import os
from typing import Sequence, Union

from tf_gdp import errors
from tf_gdp.cost import presets
from tf_gdp.cost import derived_topologies
from tf_gdp.cost import topology as topology_lib

# `devices=LOCAL`: this process's GPUs if it has any, else its CPU devices.
LOCAL = "local"
# GPU hardware specs recognized in a local GPU's name (grappler_bridge.hardware).
_GPU_SPECS = ("h100", "v100", "p100")
_LOCAL_JOB = "localhost"

Devices = Union[str, os.PathLike, topology_lib.Topology, Sequence]


def resolve(devices: Devices) -> topology_lib.Topology:
  """The topology `devices` names (module doc); InputError when it names none."""
  if isinstance(devices, topology_lib.Topology):
    return devices
  if isinstance(devices, (str, os.PathLike)):
    devices = os.fspath(devices)
    if devices == LOCAL:
      return local_topology()
    return topology_lib.get(devices)
  if isinstance(devices, (list, tuple)):
    return from_device_list(devices)
  raise errors.InputError(
      "devices must be a preset name, a topology JSON path, a Topology or a "
      f"list of TF device strings, got {type(devices).__name__}")


def from_device_list(devices: Sequence) -> topology_lib.Topology:
  """A topology of exactly `devices` (strings or LogicalDevices), in order."""
  if not devices:
    raise errors.InputError("devices: the list names no device")
  wanted = [full_name(_device_string(d)) for d in devices]
  if len(set(wanted)) != len(wanted):
    raise errors.InputError(f"devices: the list names a device twice: {wanted}")
  candidates = list(_candidates(wanted))
  for candidate in candidates:
    names = [device.name for device in candidate.devices]
    if all(name in names for name in wanted):
      return _subset(candidate, [names.index(name) for name in wanted])
  known = {device.name for topo in candidates for device in topo.devices}
  unknown = [name for name in wanted if name not in known]
  attached = ", ".join(full_name(d.name) for d in _logical_devices())
  if not unknown:
    raise errors.InputError(
        f"devices: no attached set or preset holds all of {', '.join(wanted)}"
        " together; pass a topology file for such a cluster")
  raise errors.InputError(
      f"devices: {', '.join(unknown)} is neither attached here ({attached}) "
      f"nor in a preset ({', '.join(topology_lib.preset_names())})")


def local_topology() -> topology_lib.Topology:
  """Attached GPUs if any (plus the host CPU), else `local-cpus:K`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_logical_devices("GPU")
  if gpus:
    return local_gpu_topology(len(gpus), _local_gpu_name())
  count = len(tf.config.list_logical_devices("CPU"))
  return topology_lib.get(f"{topology_lib.LOCAL_CPUS}:{count}")


def local_gpu_topology(count: int, gpu_name: str) -> topology_lib.Topology:
  """`count` GPUs named `gpu_name`, priced by the spec its name mentions."""
  from grappler_bridge import hardware  # pylint: disable=g-import-not-at-top
  spec = next((s for s in _GPU_SPECS if s in gpu_name.lower()), None)
  if spec is None:
    raise errors.InputError(
        f"no hardware spec for the local GPU {gpu_name!r} (known: "
        f"{', '.join(_GPU_SPECS)}); pass devices= a preset or a topology file")
  return topology_lib.local_gpus(count, spec,
                                 hardware.get_spec(spec).memory_bytes)


def runs_here(topo: topology_lib.Topology) -> bool:
  """Whether every device of the topology is a device of this process.

  Only then does calling the placed function run it (on the caller's own
  variables); other topologies are placed for a plan, a file or `measure`.
  """
  local = {full_name(d.name) for d in _logical_devices()}
  return all(full_name(name) in local for name in topo.device_names)


def full_name(device: str) -> str:
  """`device` with this process's job, replica and task filled in."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    spec = tf.DeviceSpec.from_string(device)
  except (ValueError, TypeError) as e:
    raise errors.InputError(f"devices: {device!r} is not a TF device string "
                            "(e.g. /device:GPU:0)") from e
  if spec.device_type is None or spec.device_index is None:
    raise errors.InputError(f"devices: {device!r} names no device type and "
                            "index (e.g. /device:GPU:0)")
  here = tf.DeviceSpec(job=_LOCAL_JOB, replica=0, task=0)
  return here.make_merged_spec(spec).to_string()


def _device_string(device) -> str:
  if isinstance(device, str):
    return device
  name = getattr(device, "name", None)  # tf.config.LogicalDevice
  if isinstance(name, str) and hasattr(device, "device_type"):
    return name
  raise errors.InputError(
      "devices: each entry must be a TF device string or a "
      f"tf.config.LogicalDevice, got {type(device).__name__}")


def _candidates(wanted: Sequence[str]):
  """Topologies that may hold `wanted`: this process's, then the presets."""
  local = {full_name(d.name) for d in _logical_devices()}
  if all(name in local for name in wanted):
    yield local_topology()
    cpus = sum(1 for name in local if "/device:CPU:" in name)
    yield topology_lib.get(f"{topology_lib.LOCAL_CPUS}:{cpus}")
  tasks = [_field(name, "/task:") for name in wanted if "/job:worker/" in name]
  if tasks:
    yield topology_lib.get(f"{topology_lib.CPU_WORKERS}:{max(tasks) + 1}")
  yield topology_lib.get(presets.DEFAULT)
  for name in presets.names():
    if name != presets.DEFAULT and ":" not in name:
      yield topology_lib.get(name)


def _field(name: str, prefix: str) -> int:
  return int(name.split(prefix, 1)[1].split("/", 1)[0])


def _subset(topo: topology_lib.Topology, index) -> topology_lib.Topology:
  """`topo` restricted to the devices `index` (in that order)."""
  if list(index) == list(range(len(topo.devices))):
    return topo
  short = ",".join(topo.devices[i].name.split("/device:", 1)[-1] for i in index)
  return derived_topologies.subset(topo, index, f"{topo.name}[{short}]")


def _logical_devices():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.config.list_logical_devices()
