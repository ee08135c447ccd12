"""Placements judged under an ensemble of perturbed cost models.

Where no hardware is attached (the GPU presets), every step time is a
prediction of the cost model, and the moves a search finds last are the
fine ones where that model is least sure. So a placement is also judged
under K perturbed copies of the (graph, topology) pair, and what a report
quotes is its step time relative to the single-device placement under the
same member: the median over members, and the worst case.

Member 0 is the nominal model itself; members 1..K-1 each draw, from
`numpy.random.default_rng([seed, k])` (so member k is the same whatever K):

* Per-op time x U(0.7, 1.3), independently per op and per device kind. The
  roofline prices each op at 100% of datasheet peak (or a profile measured
  it under other load); which ops it gets wrong, and in which direction,
  depends on the op's type and shapes, so errors are independent per op.
* Launch overhead x U(1, 4) per device kind. The cost model charges every
  kernel one launch, `HardwareSpec.launch_overhead_us` of the kind's
  hardware (5 us on the GPU presets: a CUDA kernel launch takes ~3-5 us,
  plus TF executor work; 1-1.5 us on CPUs); TF's executor, allocator and
  stream synchronisation make small ops cost several launches on real
  GPUs. A member adds (L - 1) launches to every op priced at or above one
  launch; ops priced below one (no kernel, or host-side metadata ops such
  as Reshape on the GPU presets) are left alone.
* Link bandwidth x U(0.5, 1.0), per directed device pair, or per shared
  channel where the topology has them (a pair then gets its route's
  slowest perturbed channel). The presets
  quote achieved pinned-memory copy rates (e.g. ~12 GB/s on PCIe 3.0 x16),
  an upper bound: pageable staging copies, shared ports and small tensors
  reach about half of it, and never more.
* Link latency x U(1, 3), per directed device pair. The presets quote the
  DMA set-up floor (~10 us over PCIe); TF's Send/Recv rendezvous and the
  stream synchronisation around a copy add up to a few times that.
A measured link table (`Topology.table_us`) is perturbed consistently: its
fixed part (the latency) scales like the latency and the rest like
1 / bandwidth, so it stays non-decreasing and at or above the new latency.

Topologies are copied with `dataclasses.replace`, so fields this module
does not perturb carry over unchanged. Memory is not perturbed: validity is
the nominal simulation's. Building an ensemble costs one simulator
preparation per member; judge many placements with one `Ensemble`.
"""

import dataclasses
from typing import Mapping, Optional, Sequence, Tuple

import numpy as np

from grappler_bridge import hardware

from tf_gdp import errors
from tf_gdp.cost import interconnects
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

DEFAULT_MEMBERS = 16
# Reports judge with this seed, whatever seeded the search, so that they
# compare; an objective trained on uses OBJECTIVE_SEED, so that the report
# judges on members the search never saw (member 0, the nominal model, is
# shared).
REPORT_SEED = 0
OBJECTIVE_SEED = 1
# Launch overhead of a kind whose hardware the topology does not name.
_FALLBACK_LAUNCH_US = {"GPU": 5.0, "CPU": 1.0}


@dataclasses.dataclass(frozen=True)
class Ranges:
  """The uniform ranges (low, high) members draw their factors from."""
  op_time: Tuple[float, float] = (0.7, 1.3)
  launch: Tuple[float, float] = (1.0, 4.0)
  bandwidth: Tuple[float, float] = (0.5, 1.0)
  latency: Tuple[float, float] = (1.0, 3.0)

  def __post_init__(self):
    for field in dataclasses.fields(self):
      low, high = getattr(self, field.name)
      if not 0 < low <= high or not np.isfinite(high):
        raise errors.InputError(
            f"ensemble range {field.name} ({low}, {high}) must have "
            "0 < low <= high")
    if self.launch[0] < 1:
      raise errors.InputError("the launch factor cannot be below 1: the "
                              "nominal costs already hold one launch")


RANGES = Ranges()


@dataclasses.dataclass(frozen=True, eq=False)
class Member:
  """One perturbed cost model and the factors that made it.

  Attributes:
    index: position in the ensemble (0: the nominal model).
    graph, topology: the perturbed pair (the nominal objects for member 0).
    op_factor: kind -> float[num_nodes] per-op time factor.
    launch_factor: kind -> launch overhead factor L (L - 1 launches added).
    launch_us: kind -> the launch overhead one launch stands for.
    bandwidth_factor, latency_factor: float[d, d] per directed pair.
  """
  index: int
  graph: op_graph.OpGraph
  topology: topology_lib.Topology
  op_factor: Mapping[str, np.ndarray]
  launch_factor: Mapping[str, float]
  launch_us: Mapping[str, float]
  bandwidth_factor: np.ndarray
  latency_factor: np.ndarray


@dataclasses.dataclass(frozen=True)
class Robustness:
  """One placement judged by every member, beside the single device.

  Attributes:
    step_time_us: float[K] the placement's step time under each member.
    single_device_us: float[K] the single-device placement's, same members.
  """
  step_time_us: np.ndarray
  single_device_us: np.ndarray

  @property
  def members(self) -> int:
    return int(self.step_time_us.shape[0])

  @property
  def ratios(self) -> np.ndarray:
    """float[K] step time over the single device's, per member."""
    return self.step_time_us / np.maximum(self.single_device_us, 1e-9)

  @property
  def median_ratio(self) -> float:
    return float(np.median(self.ratios))

  @property
  def worst_ratio(self) -> float:
    return float(np.max(self.ratios))

  def summary(self) -> dict:
    """JSON-able: members, median and worst ratio and step time."""
    return {"members": self.members,
            "median_ratio": self.median_ratio,
            "worst_ratio": self.worst_ratio,
            "median_step_time_us": float(np.median(self.step_time_us)),
            "worst_step_time_us": float(np.max(self.step_time_us))}


class Ensemble:
  """K cost models of one (graph, topology): 0 is the nominal, then perturbed."""

  def __init__(self, graph: op_graph.OpGraph,
               topology: topology_lib.Topology, *,
               members: int = DEFAULT_MEMBERS, seed: int = REPORT_SEED,
               ranges: Ranges = RANGES):
    if members < 1:
      raise errors.InputError(f"an ensemble needs >= 1 member, got {members}")
    if seed < 0:
      raise errors.InputError(f"the ensemble seed must be >= 0, got {seed}")
    self.seed = int(seed)
    self.ranges = ranges
    launch_us = _launch_us(graph, topology)
    self.members = [_nominal(graph, topology, launch_us)] + [
        _perturbed(graph, topology, launch_us, k, self.seed, ranges)
        for k in range(1, members)]

  def __len__(self) -> int:
    return len(self.members)

  def step_times(self, placements, *,
                 nominal_us: Optional[Sequence[float]] = None) -> np.ndarray:
    """float[K, B] step time of each placement (int[B, n]) per member.

    `nominal_us` (float[B]), when the caller already simulated member 0,
    spares simulating it again.
    """
    placements = np.asarray(placements)
    out = np.empty((len(self.members), placements.shape[0]), np.float64)
    for member in self.members:
      if member.index == 0 and nominal_us is not None:
        out[0] = np.asarray(nominal_us, np.float64)
        continue
      out[member.index] = simulator.simulate_batch(
          member.graph, placements, member.topology,
          check_memory=False).step_time_us
    return out

  def judge(self, placement, single_device) -> Robustness:
    """`placement` (int[n]) against `single_device` (int[n]) per member."""
    steps = self.step_times(np.stack([np.asarray(placement),
                                      np.asarray(single_device)]))
    return Robustness(step_time_us=steps[:, 0], single_device_us=steps[:, 1])


def judge_robust(graph: op_graph.OpGraph, topology: topology_lib.Topology,
                 placement, *, single_device, members: int = DEFAULT_MEMBERS,
                 seed: int = REPORT_SEED,
                 ranges: Ranges = RANGES) -> Robustness:
  """One placement under a fresh ensemble, against the single device.

  Args:
    graph, topology: the nominal cost model.
    placement: int[num_nodes] device index per op.
    single_device: int[num_nodes] the single-device placement
      (`tf_gdp.baselines` single_device), judged under the same members.
    members: K, member 0 included.
    seed: seeds the members' draws.
    ranges: the perturbation ranges.
  """
  return Ensemble(graph, topology, members=members, seed=seed,
                  ranges=ranges).judge(placement, single_device)


# ---- members -----------------------------------------------------------------


def _launch_us(graph, topology) -> dict:
  """kind -> one launch overhead, from the topology's hardware of the kind."""
  out = {}
  for kind in graph.kinds:
    try:
      spec = hardware.get_spec(topology.hardware[kind])
      out[kind] = float(spec.launch_overhead_us)
    except (KeyError, errors.InputError):  # no or an unknown spec named
      out[kind] = _FALLBACK_LAUNCH_US.get(kind, 1.0)
  return out


def _nominal(graph, topology, launch_us) -> Member:
  d = topology.num_devices
  return Member(
      index=0, graph=graph, topology=topology,
      op_factor={kind: np.ones(graph.num_nodes) for kind in graph.kinds},
      launch_factor={kind: 1.0 for kind in graph.kinds}, launch_us=launch_us,
      bandwidth_factor=np.ones((d, d)), latency_factor=np.ones((d, d)))


def _perturbed(graph, topology, launch_us, index, seed, ranges) -> Member:
  rng = np.random.default_rng([seed, index])
  n, d = graph.num_nodes, topology.num_devices
  op_factor, launch_factor, costs = {}, {}, {}
  for kind in graph.kinds:
    op_factor[kind] = rng.uniform(*ranges.op_time, size=n)
    launch_factor[kind] = float(rng.uniform(*ranges.launch))
    nominal = graph.costs[kind]
    launches = nominal >= launch_us[kind]  # priced as a kernel launch
    costs[kind] = (nominal * op_factor[kind] +
                   launches * (launch_factor[kind] - 1.0) * launch_us[kind])
  bandwidth_factor = rng.uniform(*ranges.bandwidth, size=(d, d))
  latency_factor = rng.uniform(*ranges.latency, size=(d, d))
  channel_factor = None
  if topology.channel_gbps is not None:
    # Shared channels carry the bandwidth: each gets its own factor, and a
    # pair's bandwidth is its route's slowest perturbed channel.
    channel_factor = rng.uniform(*ranges.bandwidth,
                                 size=topology.channel_gbps.shape)
    scaled = interconnects.slowest_channels(
        topology.channel_gbps * channel_factor, topology.routes, d)
    off = ~np.eye(d, dtype=bool)
    bandwidth_factor = np.ones((d, d))
    bandwidth_factor[off] = scaled[off] / topology.bandwidth_gbps[off]
  return Member(
      index=index, graph=graph.with_costs(costs),
      topology=_perturbed_topology(topology, bandwidth_factor, latency_factor,
                                   channel_factor),
      op_factor=op_factor, launch_factor=launch_factor, launch_us=launch_us,
      bandwidth_factor=bandwidth_factor, latency_factor=latency_factor)


def _perturbed_topology(topology, bandwidth_factor, latency_factor,
                        channel_factor=None):
  """The topology with scaled links; a measured table scaled consistently."""
  latency = topology.latency_us * latency_factor
  changes = {"bandwidth_gbps": topology.bandwidth_gbps * bandwidth_factor,
             "latency_us": latency}
  if channel_factor is not None:
    changes["channel_gbps"] = topology.channel_gbps * channel_factor
  if topology.table_us is not None:
    fixed = topology.latency_us[:, :, None]
    changes["table_us"] = (latency[:, :, None] + (topology.table_us - fixed)
                           / bandwidth_factor[:, :, None])
  return dataclasses.replace(topology, **changes)
