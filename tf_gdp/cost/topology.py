"""Device topologies: the devices a graph is placed on and the links between them.

A topology names each device (a TF device string), its kind (whose cost
column of the op graph prices its ops), a speed factor and a memory capacity,
and for every ordered pair of devices the link bandwidth and latency. Presets
describe real machines (their wiring and sources: `interconnects`); custom
clusters come from a JSON file:

  {"format": "tf-gdp-topology", "version": 1, "name": "my-box",
   "hardware": {"GPU": "v100", "CPU": "host_cpu"},
   "devices": [{"name": "/job:localhost/replica:0/task:0/device:GPU:0",
                "kind": "GPU", "memory_bytes": 34359738368, "speed": 1.0}, ...],
   "links": {"bandwidth_gbps": [[...], ...], "latency_us": [[...], ...],
             "table_bytes": [...], "table_us": [[[...], ...], ...],
             "channels": [{"name": "GPU:0 PCIe out", "bandwidth_gbps": 12},
                          ...],
             "routes": [[[], ["GPU:0 PCIe out", "GPU:1 PCIe in"]], ...]}}

`hardware` says which hardware spec priced each kind's op costs (see
`grappler_bridge.hardware`), so a graph and a topology can be checked to
agree. `bandwidth_gbps` is in GB/s (1e9 bytes per second), `latency_us` in
microseconds; diagonal entries are ignored.

Links are shared channels. A transfer src -> dst occupies every channel of
its route `routes[src][dst]` (channel names) for its whole duration, and a
channel carries one transfer at a time: a GPU's PCIe port in one direction,
a PCIe switch's uplink, an NVLink. The pair's bandwidth is then its route's
slowest channel (`bandwidth_gbps` may be left out; when given it must say
the same). A file without `channels` and `routes` has one channel per
directed pair: transfers between different pairs never wait for each other.

A link costs `latency + bytes / bandwidth` unless the optional measured
table is given (calibrated clusters): `table_us[src][dst][i]` is the time
for `table_bytes[i]` bytes, interpolated linearly (from `(0, latency)`
below the first point), each byte past the last costing `1 / bandwidth`:
between local gRPC workers the per-byte rate drops ~2x past ~1 MB (caches),
which no single latency/bandwidth pair fits. An optional top-level
"runtime" object holds the runtime's own costs (`runtime_costs`).
"""

import dataclasses
import json
import os
from typing import Mapping, Optional, Sequence

import numpy as np

from grappler_bridge import hardware as hardware_lib
from grappler_bridge import limits

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.cost import interconnects
from tf_gdp.cost import runtime_costs

FORMAT = "tf-gdp-topology"
VERSION = 1
GIB = 1 << 30

# Host memory available to the CPU device in the presets (a server host).
_HOST_MEMORY = 256 * GIB


@dataclasses.dataclass(frozen=True)
class Device:
  """One placeable device."""
  name: str
  kind: str
  memory_bytes: int
  speed: float = 1.0  # op time = the kind's cost / speed


@dataclasses.dataclass(frozen=True, eq=False)
class Topology:
  """Devices, [d, d] link bandwidth (GB/s) and latency (us), and channels.

  Without channel data (`contended` False) each directed pair is its own
  channel; `channel_routes` gives the simulator either form as arrays.
  """
  name: str
  devices: tuple
  bandwidth_gbps: np.ndarray
  latency_us: np.ndarray
  hardware: Mapping[str, str]
  # Optional measured link table: bytes [k] and times [d, d, k] (see above).
  table_bytes: Optional[np.ndarray] = None
  table_us: Optional[np.ndarray] = None
  # Optional shared channels (see above): names [c], GB/s [c], routes[s][d].
  channel_names: Optional[tuple] = None
  channel_gbps: Optional[np.ndarray] = None
  routes: Optional[tuple] = None
  runtime: runtime_costs.RuntimeCosts = runtime_costs.RuntimeCosts()

  def __post_init__(self):
    d = len(self.devices)
    if d == 0:
      raise errors.InputError(f"topology {self.name!r} has no devices")
    names = [dev.name for dev in self.devices]
    if len(set(names)) != d:
      raise errors.InputError(f"topology {self.name!r} names a device twice")
    for dev in self.devices:
      if dev.memory_bytes <= 0 or not np.isfinite(dev.speed) or dev.speed <= 0:
        raise errors.InputError(
            f"device {dev.name}: memory and speed must be positive")
    for label, matrix in (("bandwidth_gbps", self.bandwidth_gbps),
                          ("latency_us", self.latency_us)):
      if matrix.shape != (d, d):
        raise errors.InputError(f"{label} must be a {d}x{d} matrix")
      off_diagonal = matrix[~np.eye(d, dtype=bool)]
      if not np.all(np.isfinite(off_diagonal)) or np.any(off_diagonal < 0):
        raise errors.InputError(f"{label} must be finite and >= 0")
    self._check_channels()
    if d > 1 and np.any(self.bandwidth_gbps[~np.eye(d, dtype=bool)] <= 0):
      raise errors.InputError(
          f"topology {self.name!r}: every link needs a bandwidth > 0")
    self._check_table()

  def _check_table(self):
    if (self.table_bytes is None) != (self.table_us is None):
      raise errors.InputError("links need both table_bytes and table_us, "
                              "or neither")
    if self.table_bytes is None:
      return
    d, sizes = len(self.devices), self.table_bytes
    if (sizes.ndim != 1 or sizes.size == 0 or not np.all(np.isfinite(sizes))
        or sizes[0] <= 0 or np.any(np.diff(sizes) <= 0)):
      raise errors.InputError(
          "table_bytes must be a non-empty, strictly increasing list of "
          "positive sizes")
    if self.table_us.shape != (d, d, sizes.size):
      raise errors.InputError(
          f"table_us must be {d}x{d}x{sizes.size} (device x device x size)")
    for i in range(d):
      for j in range(d):
        if i == j:
          continue
        row = self.table_us[i, j]
        if (not np.all(np.isfinite(row)) or row[0] < self.latency_us[i, j]
            or np.any(np.diff(row) < 0)):
          raise errors.InputError(
              f"table_us[{i}][{j}] must be finite, non-decreasing and start "
              f"at or above the link latency ({self.latency_us[i, j]} us)")

  def _check_channels(self):
    given = [x is not None for x in (self.channel_names, self.channel_gbps,
                                     self.routes)]
    if any(given):
      if not all(given):
        raise errors.InputError(
            "links need both channels and routes, or neither")
      interconnects.check_channels(self.channel_names, self.channel_gbps,
                                   self.routes, self.bandwidth_gbps)

  @property
  def contended(self) -> bool:
    """Whether links share channels (else one channel per directed pair)."""
    return self.routes is not None

  def channel_routes(self) -> tuple:
    """(number of channels, route_ptr int64[d*d + 1], route_channels int64[]).

    The route of pair (src, dst) is
    route_channels[route_ptr[src*d + dst]:route_ptr[src*d + dst + 1]];
    without channel data, pair src -> dst is channel src*d + dst alone.
    """
    d = len(self.devices)
    if self.routes is None:
      return (d * d, np.arange(d * d + 1, dtype=np.int64),
              np.arange(d * d, dtype=np.int64))
    return (len(self.channel_names),) + interconnects.route_csr(self.routes)

  @property
  def num_devices(self) -> int:
    return len(self.devices)

  @property
  def device_names(self) -> list:
    return [dev.name for dev in self.devices]

  @property
  def kinds(self) -> list:
    return [dev.kind for dev in self.devices]

  @property
  def memory_bytes(self) -> np.ndarray:
    return np.array([dev.memory_bytes for dev in self.devices], np.int64)

  @property
  def speeds(self) -> np.ndarray:
    return np.array([dev.speed for dev in self.devices], np.float64)

  def transfer_us(self, src: int, dst: int, nbytes: float) -> float:
    """Time to move `nbytes` from device `src` to `dst` (0 on one device)."""
    if src == dst:
      return 0.0
    bytes_per_us = self.bandwidth_gbps[src, dst] * 1e3
    if self.table_bytes is None:
      return float(self.latency_us[src, dst] + nbytes / bytes_per_us)
    sizes, times = self.table_bytes, self.table_us[src, dst]
    if nbytes >= sizes[-1]:
      return float(times[-1] + (nbytes - sizes[-1]) / bytes_per_us)
    # The same arithmetic as the simulator's compiled twin, so they agree
    # to the last bit.
    low_bytes, low_us = 0.0, float(self.latency_us[src, dst])
    for size, time_us in zip(sizes, times):
      if nbytes <= size:
        return float(low_us + (time_us - low_us) * (
            (nbytes - low_bytes) / (size - low_bytes)))
      low_bytes, low_us = size, time_us
    return float(low_us)

  def devices_of_kind(self, kind: str) -> list:
    return [i for i, dev in enumerate(self.devices) if dev.kind == kind]


def _gpu_box(name: str, gpu_spec: str, count: int, gpu_memory: int,
             wiring: interconnects.Wiring,
             speeds: Optional[Sequence[float]] = None) -> Topology:
  """`count` GPUs plus the host CPU, linked by `wiring`'s channels.

  `speeds`: each GPU's speed relative to `gpu_spec` (default all 1).
  """
  speeds = speeds or [1.0] * count
  devices = [Device(f"/job:localhost/replica:0/task:0/device:GPU:{i}", "GPU",
                    gpu_memory, speeds[i]) for i in range(count)]
  devices.append(Device("/job:localhost/replica:0/task:0/device:CPU:0", "CPU",
                        _HOST_MEMORY))
  return custom(name, devices, None, wiring.latency_us,
                {"GPU": gpu_spec, "CPU": "host_cpu"},
                channels=list(zip(wiring.channel_names, wiring.channel_gbps)),
                routes=wiring.routes)


def _local_cpu_workers(count: int) -> Topology:
  """K single-core TF worker processes on this machine, linked over loopback.

  Uses the calibrated file from `tf-gdp calibrate` when
  one exists (see `calibrated_path`); these defaults are what loopback gRPC
  between two workers gives on a typical machine and are only a starting
  point.
  """
  path = calibrated_path(count)
  if os.path.isfile(path):
    return load(path)
  devices = tuple(Device(f"/job:worker/replica:0/task:{i}/device:CPU:0", "CPU",
                         8 * GIB) for i in range(count))
  bandwidth = np.full((count, count), 1.0)
  latency = np.full((count, count), 300.0)
  return Topology(f"cpu-workers:{count}", devices, bandwidth, latency,
                  {"CPU": "local_cpu_core"})


# Logical CPU devices of this process (`local-cpus:K`) exchange tensors by a
# memcpy in shared host memory. Estimate, not measured: one core copies
# ~10 GB/s (half the ~26 GB/s read+write of `LOCAL_CPU_CORE` in
# grappler_bridge.hardware), and a cross-device send/recv pair through TF's
# rendezvous costs a few microseconds.
_LOCAL_MEMCPY_GBPS, _LOCAL_MEMCPY_LATENCY_US = 10.0, 5.0
_LOCAL_CPU_MEMORY = 16 * GIB


def _local_cpus(count: int) -> Topology:
  """K logical CPU devices of this process (`/job:localhost/.../CPU:i`).

  The devices `gdp.place()` runs a placed step on without GPUs; they share
  the process's thread pools, so they model placement, not real parallelism
  (use cpu-workers:K for that).
  """
  devices = tuple(
      Device(f"/job:localhost/replica:0/task:0/device:CPU:{i}", "CPU",
             _LOCAL_CPU_MEMORY) for i in range(count))
  bandwidth = np.full((count, count), _LOCAL_MEMCPY_GBPS)
  latency = np.full((count, count), _LOCAL_MEMCPY_LATENCY_US)
  return Topology(f"{LOCAL_CPUS}:{count}", devices, bandwidth, latency,
                  {"CPU": "local_cpu_core"})


def local_gpus(count: int, gpu_spec: str, gpu_memory_bytes: int) -> Topology:
  """This process's `count` GPUs (all of hardware `gpu_spec`) plus its CPU.

  Each GPU is assumed to sit on its own PCIe 3.0 x16 port (its sends share
  the port, and so do its receives): whether NVLink or a shared PCIe switch
  joins them is not visible from TF, and own ports are the minimal guess.
  """
  return _gpu_box(f"local-gpus:{count}", gpu_spec, count, gpu_memory_bytes,
                  interconnects.pcie(count))


# Presets: one, two, three or four PCIe 3.0 GPUs (one: a workstation's GPU
# beside its host CPU; four: two per PCIe switch, sharing its uplink), a
# DGX-1V and a DGX H100; figures, wiring and sources in `interconnects`.
# Two variants of the four-GPU box: `p100x4-12g` with the 12 GB P100 (the
# PCIe card's smaller model; memory-tight), and `mixed4`, two P100s beside
# two GPUs at half their speed (a box with an older pair).
_PRESETS = {
    "p100x1": lambda: _gpu_box("p100x1", "p100", 1, 16 * GIB,
                               interconnects.pcie(1)),
    "p100x2": lambda: _gpu_box("p100x2", "p100", 2, 16 * GIB,
                               interconnects.pcie(2)),
    "p100x3": lambda: _gpu_box("p100x3", "p100", 3, 16 * GIB,
                               interconnects.pcie(3)),
    "p100x4-12g": lambda: _gpu_box(
        "p100x4-12g", "p100", 4, 12 * GIB, interconnects.pcie(
            4, gpus_per_switch=interconnects.PCIE_BOX_GPUS_PER_SWITCH)),
    "mixed4": lambda: _gpu_box(
        "mixed4", "p100", 4, 16 * GIB, interconnects.pcie(
            4, gpus_per_switch=interconnects.PCIE_BOX_GPUS_PER_SWITCH),
        speeds=[1.0, 1.0, 0.5, 0.5]),
    "p100x4": lambda: _gpu_box(
        "p100x4", "p100", 4, 16 * GIB, interconnects.pcie(
            4, gpus_per_switch=interconnects.PCIE_BOX_GPUS_PER_SWITCH)),
    "v100x8": lambda: _gpu_box("v100x8", "v100", 8, 32 * GIB,
                               interconnects.dgx1_v100()),
    "h100x8": lambda: _gpu_box("h100x8", "h100", 8, 80 * GIB,
                               interconnects.nvswitch(8)),
}
CPU_WORKERS = "cpu-workers"
LOCAL_CPUS = "local-cpus"
# Presets with a device count: name -> builder of K devices.
_COUNTED = {CPU_WORKERS: _local_cpu_workers, LOCAL_CPUS: _local_cpus}


def preset_names() -> list:
  return sorted(_PRESETS) + [f"{CPU_WORKERS}:K", f"{LOCAL_CPUS}:K"]


def calibrated_path(count: int) -> str:
  """Where `runtime.calibrate` stores the measured cpu-workers:K topology."""
  root = os.environ.get("TF_GDP_HOME", os.path.expanduser("~/.cache/tf_gdp"))
  return os.path.join(root, f"cpu-workers-{count}.json")


def get(spec: str) -> Topology:
  """A preset name (`p100x4`, `cpu-workers:2`, `local-cpus:2`, ...) or a file."""
  if spec in _PRESETS:
    return _PRESETS[spec]()
  name, _, count = spec.partition(":")
  if name in _COUNTED:
    if not count.isdigit() or not 1 <= int(count) <= 64:
      raise errors.InputError(f"{spec!r}: use {name}:K with 1 <= K <= 64")
    return _COUNTED[name](int(count))
  if spec.endswith(".json") or os.path.exists(spec):
    return load(spec)
  raise errors.InputError(
      f"unknown devices {spec!r} (presets: {', '.join(preset_names())}; or a "
      "topology .json file)")


def load(path: str) -> Topology:
  """Reads a topology JSON file; InputError with one line if it is bad."""
  data = limits.read_input_file(path, what="topology file",
                                error=errors.InputError)
  try:
    document = json.loads(data.decode("utf-8"),
                          parse_constant=_reject_constant)
  except (ValueError, UnicodeDecodeError, RecursionError) as e:
    raise errors.InputError(f"{path}: not a topology JSON file: {e}") from e
  try:
    return from_document(document)
  except errors.InputError as e:
    raise errors.InputError(f"{path}: {e}") from e


def from_document(document) -> Topology:
  if not isinstance(document, dict) or document.get("format") != FORMAT:
    raise errors.InputError(f"format must be {FORMAT!r}")
  if document.get("version") != VERSION:
    raise errors.InputError(
        f"unsupported topology version {document.get('version')!r}")
  try:
    devices = tuple(
        Device(str(dev["name"]), str(dev["kind"]), _positive_int(dev["memory_bytes"]),
               float(dev.get("speed", 1.0)))
        for dev in document["devices"])
    links = document["links"]
    channels = routes = None
    if "channels" in links or "routes" in links:
      channels = [(str(c["name"]), float(c["bandwidth_gbps"]))
                  for c in links.get("channels", [])]
      routes = links.get("routes")
    bandwidth = (np.array(links["bandwidth_gbps"], np.float64)
                 if channels is None or "bandwidth_gbps" in links else None)
    latency = np.array(links["latency_us"], np.float64)
    table_bytes = table_us = None
    if "table_bytes" in links or "table_us" in links:
      table_bytes = np.array(links.get("table_bytes", []), np.float64)
      table_us = np.array(links.get("table_us", []), np.float64)
      if "table_bytes" not in links or "table_us" not in links:
        raise errors.InputError("links need both table_bytes and table_us, "
                                "or neither")
    hardware = {str(k): str(v) for k, v in document.get("hardware", {}).items()}
    name = str(document.get("name", "custom"))
    runtime = (runtime_costs.from_document(document["runtime"])
               if "runtime" in document else None)
  except (KeyError, TypeError, ValueError, AttributeError,
          OverflowError) as e:
    raise errors.InputError(f"malformed topology: {type(e).__name__}: {e}") from e
  # Ops are priced per kind: a device of another kind would never be used.
  unknown = sorted({d.kind for d in devices} - set(hardware_lib.KINDS))
  if unknown:
    raise errors.InputError(
        f"device kind {unknown[0]!r} is not one of "
        f"{', '.join(hardware_lib.KINDS)}")
  return custom(name, devices, bandwidth, latency, hardware, table_bytes,
                table_us, channels=channels, routes=routes, runtime=runtime)


def to_document(topology: Topology) -> dict:
  links = {"bandwidth_gbps": topology.bandwidth_gbps.tolist(),
           "latency_us": topology.latency_us.tolist()}
  if topology.table_bytes is not None:
    links["table_bytes"] = topology.table_bytes.tolist()
    links["table_us"] = topology.table_us.tolist()
  if topology.contended:
    names = topology.channel_names
    links["channels"] = [{"name": name, "bandwidth_gbps": float(gbps)}
                         for name, gbps in zip(names, topology.channel_gbps)]
    links["routes"] = [[[names[c] for c in route] for route in row]
                       for row in topology.routes]
  document = {
      "format": FORMAT, "version": VERSION, "name": topology.name,
      "hardware": dict(topology.hardware),
      "devices": [dataclasses.asdict(dev) for dev in topology.devices],
      "links": links,
  }
  if not topology.runtime.is_default:
    document["runtime"] = runtime_costs.to_document(topology.runtime)
  return document


def save(topology: Topology, path: str) -> None:
  fileio.write_atomically(path, json.dumps(to_document(topology), indent=1))


def custom(name: str, devices: Sequence[Device], bandwidth_gbps, latency_us,
           hardware: Optional[Mapping[str, str]] = None, table_bytes=None,
           table_us=None, *, channels=None, routes=None,
           runtime: Optional[runtime_costs.RuntimeCosts] = None) -> Topology:
  """Builds a topology in code (tests, calibration, presets).

  Args:
    name, devices, latency_us, hardware, table_bytes, table_us: as in the
      file format.
    bandwidth_gbps: [d, d]; None with channels: each route's slowest one.
    channels: optional [(name, GB/s)] shared channels.
    routes: with channels, routes[src][dst]: channel indices or names.
    runtime: the runtime's own costs (`runtime_costs`), None for none.
  """
  as_array = lambda x: None if x is None else np.asarray(x, np.float64)
  channel_names = channel_gbps = None
  if channels is not None or routes is not None:
    if channels is None or routes is None:
      raise errors.InputError("links need both channels and routes, or neither")
    channel_names = tuple(str(c[0]) for c in channels)
    channel_gbps = np.array([float(c[1]) for c in channels], np.float64)
    routes = interconnects.channel_indices(routes, channel_names)
    if bandwidth_gbps is None:
      bandwidth_gbps = interconnects.slowest_channels(channel_gbps, routes,
                                                      len(devices))
  elif bandwidth_gbps is None:
    raise errors.InputError("links need bandwidth_gbps, or channels and routes")
  return Topology(name, tuple(devices), np.asarray(bandwidth_gbps, np.float64),
                  np.asarray(latency_us, np.float64), dict(hardware or {}),
                  as_array(table_bytes), as_array(table_us), channel_names,
                  channel_gbps, routes,
                  runtime or runtime_costs.RuntimeCosts())


def _positive_int(value) -> int:
  if (isinstance(value, bool) or not isinstance(value, int) or value <= 0
      or value >= 1 << 62):
    raise ValueError(
        f"memory_bytes must be a positive integer below 2**62, got {value!r}")
  return value


def _reject_constant(name: str):
  raise ValueError(f"{name} is not allowed")


def link_source(topo: Topology) -> str:
  """Where the link figures of `topo` come from, for reports.

  "measured" (a calibrated link table), "guessed" (cpu-workers:K before
  `tf-gdp calibrate` ran), "estimated" (local-cpus:K: a memcpy estimate) or
  "datasheet" (the GPU presets' cited figures; also files without a table).
  """
  if topo.table_bytes is not None:
    return "measured"
  name = topo.name.partition(":")[0]
  if name == CPU_WORKERS:
    return "guessed"
  if name == LOCAL_CPUS:
    return "estimated"
  return "datasheet"
