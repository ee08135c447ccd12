"""What a TensorFlow runtime adds to a step beyond its ops and its links.

Op costs and link times price the work; a real runtime also charges for
running the step at all, for its control dependencies across devices and,
where a device's core also runs the RPC stack, for each transfer's handling.
These matter most where placement searches look for gains: fine splits with
hundreds of small transfers. A topology carries them (`Topology.runtime`,
the optional "runtime" object of the file format):

  "runtime": {"step_overhead_us": [590.0, 1150.0],
              "control_transfers": true,
              "transfer_cpu_us": [40.0, 180.0],
              "transfer_cpu_us_per_mb": [600.0, 700.0],
              "executor_order": "last_ready_first",
              "pipelined_latency_us": 90.0}

* `step_overhead_us`: a step's fixed cost on one device and spanning
  several (client -> master -> workers RPCs), added to every step time.
* `control_transfers`: TF's partitioner turns a control edge between
  devices into a Send/Recv of a dummy tensor, deduplicated per (producer,
  destination device) like a data tensor; with this on, the simulator
  prices it as a 0-byte transfer over the link (latency, channels) instead
  of a bare latency.
* `transfer_cpu_us`: [sender, receiver]: per transfer, time the device's
  core spends on it as it leaves (sender) or arrives (receiver): gRPC work
  on a worker's one core. A device busy computing then runs its next op that
  much later; an idle one is busy handling it for that long, and an op made
  ready meanwhile waits. A lone arrival's handling is within the link's
  latency (that is how the latency was measured), but a burst of arrivals
  queues on the receiver's core, and a burst of sends on the sender's.
* `transfer_cpu_us_per_mb`: [sender, receiver]: the same loss per 10^6
  bytes of the tensor, on top of `transfer_cpu_us` (gRPC copies every byte
  on the worker's core; a split that moves tens of MB while both workers
  compute loses that much compute time). Absent in older files: zero.
* `executor_order`: which ready op a device runs next: "topological"
  (lowest topological rank: the model's default) or "last_ready_first"
  (TF's executor on one inter-op thread runs the op just made ready, depth
  first along a chain).
* `pipelined_latency_us`: the part of a link's latency that does not hold
  its channels: a gRPC worker has several RecvTensor calls in flight, so a
  burst of small transfers on one link goes out at the per-call handling
  time, not one latency after another. A transfer holds its route's
  channels for its link time less this, and arrives after the full time.

Presets of GPU machines keep the defaults (all zero, off, topological): no
measurements of those machines back other values. A calibrated
`cpu-workers:K` carries values measured on its cluster (`tf-gdp
calibrate`).
"""

import dataclasses
from typing import Mapping, Tuple

from tf_gdp import errors

TOPOLOGICAL = "topological"
LAST_READY_FIRST = "last_ready_first"
EXECUTOR_ORDERS = (TOPOLOGICAL, LAST_READY_FIRST)


@dataclasses.dataclass(frozen=True)
class RuntimeCosts:
  """The runtime's own costs of a step (see the module docstring)."""
  step_overhead_us: Tuple[float, float] = (0.0, 0.0)
  control_transfers: bool = False
  transfer_cpu_us: Tuple[float, float] = (0.0, 0.0)
  transfer_cpu_us_per_mb: Tuple[float, float] = (0.0, 0.0)
  executor_order: str = TOPOLOGICAL
  pipelined_latency_us: float = 0.0

  def __post_init__(self):
    for field, parts in (("step_overhead_us", "one device, several devices"),
                         ("transfer_cpu_us", "sender, receiver"),
                         ("transfer_cpu_us_per_mb", "sender, receiver")):
      value = getattr(self, field)
      try:
        pair = tuple(float(v) for v in value)
      except (TypeError, ValueError) as e:
        raise errors.InputError(f"malformed runtime {field}: {e}") from e
      if len(pair) != 2 or any(not 0.0 <= v < 1e9 for v in pair):
        raise errors.InputError(
            f"runtime {field} must be [{parts}], each >= 0 us, got "
            f"{value!r}")
      object.__setattr__(self, field, pair)
    try:
      pipelined = float(self.pipelined_latency_us)
    except (TypeError, ValueError) as e:
      raise errors.InputError(f"malformed runtime pipelined_latency_us: {e}"
                              ) from e
    if not 0.0 <= pipelined < 1e9:
      raise errors.InputError("runtime pipelined_latency_us must be >= 0 us, "
                              f"got {pipelined!r}")
    object.__setattr__(self, "pipelined_latency_us", pipelined)
    if not isinstance(self.control_transfers, bool):
      raise errors.InputError("runtime control_transfers must be true or false")
    if self.executor_order not in EXECUTOR_ORDERS:
      raise errors.InputError(
          f"runtime executor_order must be one of {', '.join(EXECUTOR_ORDERS)}"
          f", got {self.executor_order!r}")

  @property
  def is_default(self) -> bool:
    return self == RuntimeCosts()

  def step_overhead(self, devices_used: int) -> float:
    """The fixed cost of a step that runs ops on `devices_used` devices."""
    return self.step_overhead_us[0 if devices_used <= 1 else 1]


def from_document(document: Mapping) -> RuntimeCosts:
  """A `RuntimeCosts` from the file format's "runtime" object."""
  if not isinstance(document, Mapping):
    raise errors.InputError("runtime must be an object")
  unknown = sorted(set(document) - {f.name for f in dataclasses.fields(
      RuntimeCosts)})
  if unknown:
    raise errors.InputError(f"runtime has unknown fields {unknown}")
  try:
    return RuntimeCosts(**document)
  except TypeError as e:
    raise errors.InputError(f"malformed runtime: {e}") from e


def to_document(runtime: RuntimeCosts) -> dict:
  return {"step_overhead_us": list(runtime.step_overhead_us),
          "control_transfers": runtime.control_transfers,
          "transfer_cpu_us": list(runtime.transfer_cpu_us),
          "transfer_cpu_us_per_mb": list(runtime.transfer_cpu_us_per_mb),
          "executor_order": runtime.executor_order,
          "pipelined_latency_us": runtime.pipelined_latency_us}
