"""Which hardware spec prices each device kind for a `--devices` value.

A graph is costed for the machine it will be placed on: `p100x4` prices GPU
ops as a P100 and CPU ops as a server host CPU; `cpu-workers:K` prices CPU
ops as one core of this machine, and so does `local-cpus:K` (this process's
logical CPU devices). The topology's `hardware` field says which.
"""

from grappler_bridge import hardware

from tf_gdp import errors
from tf_gdp.cost import topology

DEFAULT = "p100x4"


def names() -> list:
  return topology.preset_names()


def kind_hardware(devices: str) -> dict:
  """{device kind: HardwareSpec} for a preset name or topology file."""
  return topology_hardware(topology.get(devices))


def topology_hardware(topo: topology.Topology) -> dict:
  """{device kind: HardwareSpec} of a topology built in code or loaded."""
  if not topo.hardware:
    raise errors.InputError(
        f"topology {topo.name!r} has no 'hardware' field saying which hardware "
        "spec prices each device kind")
  return {kind: hardware.get_spec(spec) for kind, spec in topo.hardware.items()}
