"""Shared link channels and routes, and how the preset GPU servers are wired.

A transfer between two devices occupies a route, the set of shared channels
(a GPU's PCIe port in one direction, a PCIe switch's uplink, an NVLink, a
GPU's NVSwitch port) it uses all at once for its whole duration; a channel
carries one transfer at a time (see `topology` and `simulator`). This module
holds the checks and array forms of channel data, and the figures, sources
and wiring of each preset machine as plain data; `topology` turns them into
`Topology` objects.

Device order in every wiring: GPUs 0..count-1, then the host CPU (index
`count`). Host memory and the CPU's root complex are not channels: a server
CPU feeds several x16 links at once.
"""

import dataclasses

import numpy as np

from tf_gdp import errors

# --- link figures, with sources -------------------------------------------
# PCIe 3.0 x16: 15.75 GB/s per direction theoretical (8 GT/s x 16 lanes,
# 128b/130b); ~12 GB/s achieved by cudaMemcpy with pinned memory (NVIDIA's
# bandwidthTest on P100/V100 hosts). Latency of a small copy (launch + DMA
# setup) ~10 us.
PCIE3_GBPS, PCIE3_LATENCY_US = 12.0, 10.0
# PCIe 5.0 x16 (H100 hosts): 63 GB/s per direction theoretical, ~50 GB/s
# achieved.
PCIE5_GBPS, PCIE5_LATENCY_US = 50.0, 8.0
# NVLink 2.0 (V100): 25 GB/s per link per direction (NVIDIA, "NVIDIA Tesla
# V100 GPU Architecture", WP-08608-001_v1.1, 2017: six links, 300 GB/s
# total bidirectional). Links between one pair of GPUs are ganged: one copy
# uses them all.
NVLINK2_LINK_GBPS, NVLINK_LATENCY_US = 25.0, 5.0
# DGX-1 with V100, hybrid cube mesh (NVIDIA, "NVIDIA DGX-1 With Tesla V100
# System Architecture", WP-08437-002_v01, 2017): GPU i's direct NVLink
# neighbours and link counts (six links per GPU). Pairs without a direct
# link go over PCIe through the host.
DGX1_NVLINK = {
    0: {1: 1, 2: 1, 3: 2, 4: 2}, 1: {0: 1, 2: 2, 3: 1, 5: 2},
    2: {0: 1, 1: 2, 3: 1, 6: 2}, 3: {0: 2, 1: 1, 2: 1, 7: 2},
    4: {0: 2, 5: 1, 6: 1, 7: 2}, 5: {1: 2, 4: 1, 6: 2, 7: 1},
    6: {2: 2, 4: 1, 5: 2, 7: 1}, 7: {3: 2, 4: 2, 5: 1, 6: 1},
}
# The same white paper: four PCIe switches, each joining two GPUs (0-1, 2-3,
# 4-5, 6-7) and a NIC to a CPU by one x16 uplink. The inter-socket link
# between the two CPUs is not modelled.
DGX1_GPUS_PER_SWITCH = 2
# H100 SXM on DGX H100 (NVIDIA H100 Tensor Core GPU datasheet; DGX H100 user
# guide): fourth-generation NVLink, 900 GB/s bidirectional per GPU, i.e. 450
# GB/s per direction, through four NVSwitch chips to every other GPU at
# full speed; ~3 us latency for a small transfer. A GPU's sends share its
# NVSwitch port, and so do its receives.
NVSWITCH_GBPS, NVSWITCH_LATENCY_US = 450.0, 3.0
# Common 4-GPU PCIe servers put two GPUs behind each of two PCIe 3.0
# switches (e.g. Broadcom/PLX PEX 8747: 48 lanes, an x16 uplink to the CPU
# and two x16 GPU ports). Two GPUs on one switch talk peer-to-peer through
# it; everything else crosses the switches' uplinks. An assumption: real
# 4-GPU boxes also come with every GPU on its own CPU root port.
PCIE_BOX_GPUS_PER_SWITCH = 2


@dataclasses.dataclass(frozen=True)
class Wiring:
  """Channels and routes of a GPU server (GPUs, then the host CPU).

  Attributes:
    channel_names: tuple[c] of channel names.
    channel_gbps: tuple[c] of bandwidths, GB/s per direction.
    routes: routes[src][dst], the channel indices a transfer src -> dst
      occupies (empty on the diagonal).
    latency_us: float[d, d] fixed cost per transfer.
  """
  channel_names: tuple
  channel_gbps: tuple
  routes: tuple
  latency_us: np.ndarray


class _Builder:
  """Collects channels by name and the route and latency of every pair."""

  def __init__(self, num_devices: int):
    self.names, self.gbps = [], []
    self.routes = [[() for _ in range(num_devices)]
                   for _ in range(num_devices)]
    self.latency = np.zeros((num_devices, num_devices))

  def channel(self, name: str, gbps: float) -> int:
    if name not in self.names:
      self.names.append(name)
      self.gbps.append(float(gbps))
    return self.names.index(name)

  def route(self, src: int, dst: int, channels, latency_us: float) -> None:
    self.routes[src][dst] = tuple(channels)
    self.latency[src, dst] = latency_us

  def wiring(self) -> Wiring:
    return Wiring(tuple(self.names), tuple(self.gbps),
                  tuple(tuple(row) for row in self.routes), self.latency)


def _pcie_ports(b: _Builder, gpu: int, gbps: float) -> tuple:
  """(out, in) channels of a GPU's own PCIe x16 port."""
  return (b.channel(f"GPU:{gpu} PCIe out", gbps),
          b.channel(f"GPU:{gpu} PCIe in", gbps))


def pcie(count: int, *, gpus_per_switch: int = 0,
         gbps: float = PCIE3_GBPS,
         latency_us: float = PCIE3_LATENCY_US) -> Wiring:
  """GPUs on PCIe: each on its own port, optionally behind shared switches.

  Args:
    count: GPUs.
    gpus_per_switch: 0: every GPU on its own CPU root port (the host sees
      each GPU's port only); k > 0: GPUs k*s..k*s+k-1 share switch s and
      its x16 uplink (one channel per direction).
    gbps, latency_us: one x16 link per direction, and a copy's fixed cost.
  """
  b = _Builder(count + 1)
  host = count
  ports = [_pcie_ports(b, g, gbps) for g in range(count)]

  def uplink(gpu, direction):
    if not gpus_per_switch:
      return ()
    return (b.channel(f"PCIe switch {gpu // gpus_per_switch} {direction}",
                      gbps),)

  for i in range(count):
    b.route(i, host, (ports[i][0],) + uplink(i, "up"), latency_us)
    b.route(host, i, uplink(i, "down") + (ports[i][1],), latency_us)
    for j in range(count):
      if i == j:
        continue
      same_switch = gpus_per_switch and (
          i // gpus_per_switch == j // gpus_per_switch)
      middle = () if same_switch else uplink(i, "up") + uplink(j, "down")
      b.route(i, j, (ports[i][0],) + middle + (ports[j][1],), latency_us)
  return b.wiring()


def dgx1_v100() -> Wiring:
  """DGX-1V: NVLink pairs of the hybrid cube mesh, PCIe for the rest.

  An NVLink pair's transfers occupy that pair's links in that direction
  only; the other pairs, and the host, go over the GPUs' PCIe ports and the
  switches' uplinks as in `pcie(8, gpus_per_switch=2)`.
  """
  count = len(DGX1_NVLINK)
  base = pcie(count, gpus_per_switch=DGX1_GPUS_PER_SWITCH)
  b = _Builder(count + 1)
  b.names, b.gbps = list(base.channel_names), list(base.channel_gbps)
  b.routes = [list(row) for row in base.routes]
  b.latency = base.latency_us.copy()
  for i, neighbours in DGX1_NVLINK.items():
    for j, links in neighbours.items():
      plural = "s" if links > 1 else ""
      nvlink = b.channel(f"NVLink GPU:{i}->GPU:{j} ({links} link{plural})",
                         links * NVLINK2_LINK_GBPS)
      b.route(i, j, (nvlink,), NVLINK_LATENCY_US)
  return b.wiring()


def nvswitch(count: int) -> Wiring:
  """H100-style NVSwitch: all-to-all through each GPU's switch port.

  GPU -> GPU occupies the sender's NVSwitch port out and the receiver's
  port in; GPU <-> host goes over the GPU's own PCIe 5.0 x16 port (the host
  side PCIe switches of a DGX H100 are not modelled).
  """
  b = _Builder(count + 1)
  host = count
  for i in range(count):
    out_i, _ = _pcie_ports(b, i, PCIE5_GBPS)
    b.route(i, host, (out_i,), PCIE5_LATENCY_US)
    b.route(host, i, (b.channel(f"GPU:{i} PCIe in", PCIE5_GBPS),),
            PCIE5_LATENCY_US)
  for i in range(count):
    for j in range(count):
      if i != j:
        b.route(i, j, (b.channel(f"GPU:{i} NVSwitch out", NVSWITCH_GBPS),
                       b.channel(f"GPU:{j} NVSwitch in", NVSWITCH_GBPS)),
                NVSWITCH_LATENCY_US)
  return b.wiring()


# --- channel data: checks and array forms ------------------------------------


def channel_indices(routes, names: tuple) -> tuple:
  """routes[src][dst] as tuples of channel indices (given indices or names)."""
  index = {name: i for i, name in enumerate(names)}

  def one(channel):
    if isinstance(channel, str):
      if channel not in index:
        raise errors.InputError(f"a route names an unknown channel {channel!r}")
      return index[channel]
    if isinstance(channel, bool) or not isinstance(channel, (int, np.integer)):
      raise errors.InputError(f"a route holds {channel!r}, not a channel")
    return int(channel)
  try:
    return tuple(tuple(tuple(one(c) for c in route) for route in row)
                 for row in routes)
  except TypeError as e:
    raise errors.InputError(
        f"routes must be a table of channel lists: {e}") from e


def slowest_channels(gbps: np.ndarray, routes: tuple, d: int) -> np.ndarray:
  """[d, d] GB/s of each route's slowest channel (0 on the diagonal).

  Malformed routes are skipped here; `check_channels` names them.
  """
  bandwidth = np.zeros((d, d))
  for i, row in enumerate(routes[:d]):
    for j, route in enumerate(row[:d]):
      valid = [c for c in route if 0 <= c < gbps.shape[0]]
      if i != j and valid:
        bandwidth[i, j] = np.min(gbps[valid])
  return bandwidth


def check_channels(names: tuple, gbps: np.ndarray, routes: tuple,
                   bandwidth_gbps: np.ndarray) -> None:
  """InputError unless channels and routes are well formed and agree.

  Every off-diagonal route names one or more distinct channels, and the
  pair's bandwidth is its route's slowest channel.
  """
  d = bandwidth_gbps.shape[0]
  if (not names or len(set(names)) != len(names) or gbps.shape != (len(names),)
      or not all(isinstance(x, str) and x for x in names)):
    raise errors.InputError(
        "channels need unique, non-empty names and one bandwidth each")
  if not np.all(np.isfinite(gbps)) or np.any(gbps <= 0):
    raise errors.InputError("every channel needs a finite bandwidth > 0")
  if len(routes) != d or any(len(row) != d for row in routes):
    raise errors.InputError(f"routes must be a {d}x{d} table of channel lists")
  for i in range(d):
    for j in range(d):
      route = routes[i][j]
      if i == j:
        continue
      if (not route or len(set(route)) != len(route) or
          any(c < 0 or c >= len(names) for c in route)):
        raise errors.InputError(
            f"routes[{i}][{j}] must name one or more distinct channels")
      slowest = float(np.min(gbps[list(route)]))
      if not np.isclose(bandwidth_gbps[i, j], slowest, rtol=1e-9, atol=0.0):
        raise errors.InputError(
            f"bandwidth_gbps[{i}][{j}] is {bandwidth_gbps[i, j]} but its "
            f"route's slowest channel has {slowest}")


def route_csr(routes: tuple) -> tuple:
  """(ptr int64[d*d + 1], channels int64[]): pair (i, j)'s route is
  channels[ptr[i*d + j]:ptr[i*d + j + 1]]."""
  flat = [route for row in routes for route in row]
  ptr = np.zeros(len(flat) + 1, np.int64)
  ptr[1:] = np.cumsum([len(route) for route in flat])
  channels = np.array([c for route in flat for c in route], np.int64)
  return ptr, channels
