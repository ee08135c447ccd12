"""Named device presets: which hardware spec prices each device kind.

A preset name (the CLI's `--devices`) says what machine the graph is costed
for: `p100x4` prices GPU ops as a P100 and CPU ops as a server host CPU. The
full topologies (device counts, memory, links) build on these names.
"""

from grappler_bridge import hardware

from tf_gdp import errors

# preset -> {device kind: hardware spec name}
_KIND_SPECS = {
    "p100x2": {"GPU": "p100", "CPU": "host_cpu"},
    "p100x4": {"GPU": "p100", "CPU": "host_cpu"},
    "v100x8": {"GPU": "v100", "CPU": "host_cpu"},
    "h100x8": {"GPU": "h100", "CPU": "host_cpu"},
}
_CPU_WORKERS = "cpu-workers"
DEFAULT = "p100x4"


def names() -> list:
  return sorted(_KIND_SPECS) + [f"{_CPU_WORKERS}:K"]


def kind_hardware(preset: str) -> dict:
  """{device kind: HardwareSpec} used to cost graphs for `preset`."""
  if preset in _KIND_SPECS:
    return {kind: hardware.get_spec(spec)
            for kind, spec in _KIND_SPECS[preset].items()}
  name, _, count = preset.partition(":")
  if name == _CPU_WORKERS and count.isdigit() and int(count) > 0:
    return {"CPU": hardware.get_spec("local_cpu_core")}
  raise errors.InputError(
      f"unknown device preset {preset!r} (known: {', '.join(names())})")
