"""What every placement baseline shares: the group view, memory, bookkeeping.

Placement baselines decide devices for *colocation groups*, not ops: TF puts
a group's ops on one device, so a group is the unit of every decision. This
module contracts the op graph by `graph.group_ids` into a `GroupView`:

* `duration[g, j]`: the group's total op time on device j (the simulator's
  own per-op durations: the kind's cost column divided by the speed).
* `allowed[g, j]`: every member may run on device j (allowed kinds and pins,
  exactly the simulator's `DeviceTables.allowed`, which parses pins with
  `device_names.parse_device` / `device_matches`). A group no device satisfies
  is an `InputError`: no placement can exist.
* `order` / `rank`: a topological order of groups. Contracting groups can
  create cycles (a variable group holds both the variable read at the start
  of a step and its update at the end), so groups are ordered by the
  smallest topological rank of their members. A group edge that points
  backwards in this order is still a data dependency and is still counted
  for communication, but it is ignored for ordering.
* `edges` = (src, dst, bytes) of the group graph: bytes between groups,
  counting each tensor (producer, output slot) once per destination group,
  as the simulator sends a tensor once per destination device. Control
  edges give 0-byte group edges (a dependency that costs latency).

Memory model. The simulator charges a device the persistent bytes of every
op placed there for the whole step, plus its live tensors (outputs until the
last consumer is done, received copies, temporaries while an op runs). The
baselines cannot simulate every tentative choice, so a group's need is
estimated as

    need[g] = persistent_bytes[g] + f * activation_bytes[g]

where activation bytes are the members' output bytes and f (the "activation
fraction") is calibrated by one simulation of the whole graph on one
device: f = (peak - total persistent) / total output bytes, clipped to
[0, 1]. On one device this reproduces the simulated peak exactly; split over
devices it assumes each device keeps the same share of its outputs alive.
f = 1 is Baechi's conservative model (every output alive for the whole
step). Each device's budget is `memory_headroom` (default 0.9) of its
capacity; the rest absorbs received copies the estimate does not see.
Baechi's "m-" (memory-constrained) rule follows: a group may only go to a
device whose remaining budget holds it. The final placement is always
simulated by `registry.run`, which reports a real overflow instead of
hiding it.

Bookkeeping. Methods return only a placement; simulator calls made through
`simulate` / `simulate_batch` here are counted (a method that simulates
otherwise reports its count with `count_evaluations`), `note` adds entries
to the result's info dict, and a list scheduler gives the order its own
schedule runs ops in with `note_priority`, for the `registry.run` that is
active.
"""

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

GIB = float(1 << 30)
DEFAULT_HEADROOM = 0.9


class InternalError(RuntimeError):
  """A baseline produced a placement that breaks a hard constraint (a bug)."""


# ---- per-run bookkeeping -----------------------------------------------------


@dataclasses.dataclass
class RunRecord:
  """What one method call used: simulator evaluations and extra info.

  `priority` is the method's planned per-op order (lower runs first), if
  it planned one.
  """
  evaluations: int = 0
  info: dict = dataclasses.field(default_factory=dict)
  priority: Optional[np.ndarray] = None


_RECORD = contextvars.ContextVar("tf_gdp_baselines_record", default=None)


@contextlib.contextmanager
def recording():
  """Collects the counts and notes of the method calls inside the block."""
  record = RunRecord()
  token = _RECORD.set(record)
  try:
    yield record
  finally:
    _RECORD.reset(token)


def note(key: str, value) -> None:
  """Adds `key: value` to the active run's info (no-op outside a run)."""
  record = _RECORD.get()
  if record is not None:
    record.info[key] = value


def note_priority(priority: np.ndarray) -> None:
  """Records the order the method's own schedule runs ops in (lower first).

  The judge simulates the placement with it as well as with the default
  order (`simulator.simulate(priority=...)`).
  """
  record = _RECORD.get()
  if record is not None:
    record.priority = np.asarray(priority)


def count_evaluations(number: int) -> None:
  """Counts `number` simulator evaluations made without `simulate*` here."""
  record = _RECORD.get()
  if record is not None:
    record.evaluations += int(number)


def simulate(graph: op_graph.OpGraph, placement,
             topology: topology_lib.Topology, **kwargs):
  """`simulator.simulate`, counted as one evaluation of the active run."""
  record = _RECORD.get()
  if record is not None:
    record.evaluations += 1
  return simulator.simulate(graph, placement, topology, **kwargs)


def placement_key(placement: np.ndarray) -> bytes:
  """A short digest of a placement, for caches and de-duplication."""
  return hashlib.blake2b(np.ascontiguousarray(placement, np.int32).tobytes(),
                         digest_size=16).digest()


def simulate_batch(graph: op_graph.OpGraph, placements,
                   topology: topology_lib.Topology, **kwargs):
  """`simulator.simulate_batch`, counted as one evaluation per row."""
  record = _RECORD.get()
  if record is not None:
    record.evaluations += int(np.shape(placements)[0])
  return simulator.simulate_batch(graph, placements, topology, **kwargs)


# ---- the group view ----------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class GroupView:
  """The op graph contracted by colocation group (see the module doc).

  Attributes:
    graph, topology: what is being placed, and where.
    tables: the simulator's per-op `DeviceTables` for graph x topology.
    num_groups: G.
    group_of: int32[n] group of each op (`graph.group_ids`).
    member_ptr, members: CSR; members of g are members[ptr[g]:ptr[g + 1]],
      in topological order.
    order: int[G] groups in topological order (by their first member).
    rank: int[G] position of each group in `order`.
    duration: float[G, d] total op time of each group on each device.
    allowed: bool[G, d] every member may run on the device.
    persistent_bytes: int64[G] members' `memory_bytes`.
    activation_bytes: int64[G] members' `output_bytes`.
    primary: int[p] the devices placement spreads work over: those of the
      kind that runs the whole graph fastest (the GPUs of a GPU box, every
      worker of a CPU cluster). Other devices take only groups that may not
      run on a primary device (CPU-only ops, pins).
  """
  graph: op_graph.OpGraph
  topology: topology_lib.Topology
  tables: simulator.DeviceTables
  num_groups: int
  group_of: np.ndarray
  member_ptr: np.ndarray
  members: np.ndarray
  order: np.ndarray
  rank: np.ndarray
  duration: np.ndarray
  allowed: np.ndarray
  persistent_bytes: np.ndarray
  activation_bytes: np.ndarray
  primary: np.ndarray

  @property
  def num_devices(self) -> int:
    return self.topology.num_devices

  def label(self, g: int) -> str:
    """How to name group g in a message."""
    first = int(self.members[self.member_ptr[g]])
    group = self.graph.colocation_groups[first]
    if group is not None:
      return f"colocation group {group!r}"
    return f"op {self.graph.node_names[first]!r}"

  def expand(self, group_device: np.ndarray) -> np.ndarray:
    """int32[n] op placement from a device per group."""
    return np.asarray(group_device, np.int32)[self.group_of]

  @functools.cached_property
  def edges(self) -> tuple:
    """(src, dst, bytes) of the group graph; see the module doc."""
    return _group_edges(self.graph, self.group_of, self.num_groups)

  @functools.cached_property
  def ops_allowed(self) -> np.ndarray:
    """bool[n, d]: the op's group may use the device."""
    return self.allowed[self.group_of]

  @functools.cached_property
  def fastest(self) -> np.ndarray:
    """int64[G]: the allowed device where each group runs fastest (lowest
    index on ties)."""
    times = np.where(self.allowed, self.duration, np.inf)
    return np.argmin(times, axis=1).astype(np.int64)

  def fastest_allowed(self, g: int) -> int:
    """The allowed device where group g runs fastest (`fastest`)."""
    return int(self.fastest[g])


def group_view(graph: op_graph.OpGraph,
               topology: topology_lib.Topology) -> GroupView:
  """Builds the `GroupView`; InputError if a group has no allowed device."""
  tables = simulator.device_tables(graph, topology)
  n, d = graph.num_nodes, topology.num_devices
  group_of = graph.group_ids
  num_groups = int(group_of.max(initial=-1)) + 1
  node_rank = np.empty(n, np.int64)
  node_rank[graph.topo_order] = np.arange(n)
  by_group = np.lexsort((node_rank, group_of))
  members = by_group.astype(np.int64)
  member_ptr = np.searchsorted(group_of[by_group],
                               np.arange(num_groups + 1)).astype(np.int64)
  first_rank = node_rank[members[member_ptr[:-1]]] if num_groups else (
      np.zeros(0, np.int64))
  order = np.argsort(first_rank, kind="stable")
  rank = np.empty(num_groups, np.int64)
  rank[order] = np.arange(num_groups)

  duration = np.empty((num_groups, d), np.float64)
  allowed = np.empty((num_groups, d), np.bool_)
  for j in range(d):
    duration[:, j] = np.bincount(group_of, weights=tables.duration_us[:, j],
                                 minlength=num_groups)
    banned = np.bincount(group_of,
                         weights=(~tables.allowed[:, j]).astype(np.float64),
                         minlength=num_groups)
    allowed[:, j] = banned == 0
  persistent = np.bincount(group_of, weights=graph.memory_bytes,
                           minlength=num_groups).astype(np.int64)
  activation = np.bincount(group_of, weights=graph.output_bytes,
                           minlength=num_groups).astype(np.int64)
  view = GroupView(
      graph=graph, topology=topology, tables=tables, num_groups=num_groups,
      group_of=group_of, member_ptr=member_ptr, members=members, order=order,
      rank=rank, duration=duration, allowed=allowed,
      persistent_bytes=persistent, activation_bytes=activation,
      primary=_primary_devices(tables, topology))
  stuck = np.flatnonzero(~allowed.any(axis=1))
  if stuck.size:
    raise errors.InputError(_no_device_message(view, int(stuck[0])))
  return view


def _primary_devices(tables: simulator.DeviceTables,
                     topology: topology_lib.Topology) -> np.ndarray:
  """Devices of the kind on whose fastest device the whole graph is quickest."""
  total = tables.duration_us.sum(axis=0)
  kinds = topology.kinds
  best_kind = kinds[int(np.argmin(total))]
  return np.array([j for j, k in enumerate(kinds) if k == best_kind], np.int64)


def _no_device_message(view: GroupView, g: int) -> str:
  members = view.members[view.member_ptr[g]:view.member_ptr[g + 1]]
  graph = view.graph
  kinds = sorted({k for i in members for k in (graph.device_kinds[i] or ())})
  pins = sorted({graph.pinned_devices[i] for i in members
                 if graph.pinned_devices[i] is not None})
  return (f"{view.label(g)} has no device in topology "
          f"{view.topology.name!r} that satisfies all its ops (allowed kinds "
          f"{kinds or 'any'}, pins {pins or 'none'}; devices "
          f"{view.topology.device_names})")


def _group_edges(graph: op_graph.OpGraph, group_of: np.ndarray,
                 num_groups: int) -> tuple:
  """Group edges; a tensor counts once per destination group."""
  plan = simulator.prepare(graph)
  src_group = group_of[plan.edge_src].astype(np.int64)
  dst_group = group_of[plan.edge_dst].astype(np.int64)
  across = src_group != dst_group
  data = across & (plan.edge_tensor >= 0)
  tensor = plan.edge_tensor[data]
  key = np.unique(tensor * num_groups + dst_group[data])
  tensor, dst = key // num_groups, key % num_groups
  src = group_of[plan.tensor_src[tensor]].astype(np.int64)
  nbytes = plan.tensor_bytes[tensor].astype(np.float64)
  control = across & (plan.edge_tensor < 0)
  src = np.concatenate([src, src_group[control]])
  dst = np.concatenate([dst, dst_group[control]])
  nbytes = np.concatenate([nbytes, np.zeros(int(control.sum()))])
  pair, inverse = np.unique(src * num_groups + dst, return_inverse=True)
  total = np.bincount(inverse, weights=nbytes, minlength=pair.shape[0])
  return (pair // num_groups, pair % num_groups,
          np.rint(total).astype(np.int64))


# ---- memory ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MemoryModel:
  """Estimated bytes per group and usable bytes per device.

  Attributes:
    need: float64[G] estimated bytes of each group (see the module doc).
    budget: float64[d] usable bytes per device (capacity x headroom).
    activation_fraction: f of the estimate.
    headroom: fraction of each device's capacity the budget uses.
  """
  need: np.ndarray
  budget: np.ndarray
  activation_fraction: float
  headroom: float


def calibrate_activation_fraction(view: GroupView) -> float:
  """f = (single-device peak - persistent) / output bytes; one simulation."""
  graph = view.graph
  outputs = float(graph.output_bytes.sum())
  if outputs <= 0:
    return 0.0
  device = int(view.primary[0])
  result = simulate(graph, np.full(graph.num_nodes, device, np.int32),
                    view.topology, check_memory=False)
  live = float(result.peak_memory_bytes[device]) - float(
      graph.memory_bytes.sum())
  return float(np.clip(live / outputs, 0.0, 1.0))


def memory_model(view: GroupView, *,
                 activation_fraction: Optional[float] = None,
                 memory_headroom: float = DEFAULT_HEADROOM) -> MemoryModel:
  """The estimate of the module doc; InputError when nothing could fit.

  Args:
    view: the group view.
    activation_fraction: f in [0, 1]; None calibrates it by one simulation.
    memory_headroom: fraction of each device's capacity to fill, in (0, 1].
  """
  if not 0.0 < memory_headroom <= 1.0:
    raise errors.InputError(
        f"memory_headroom must be in (0, 1], got {memory_headroom}")
  if activation_fraction is None:
    fraction = calibrate_activation_fraction(view)
  else:
    fraction = float(activation_fraction)
    if not 0.0 <= fraction <= 1.0:
      raise errors.InputError(
          f"activation_fraction must be in [0, 1], got {activation_fraction}")
  need = (view.persistent_bytes.astype(np.float64) +
          fraction * view.activation_bytes.astype(np.float64))
  budget = view.topology.memory_bytes.astype(np.float64) * memory_headroom
  model = MemoryModel(need=need, budget=budget, activation_fraction=fraction,
                      headroom=memory_headroom)
  note("activation_fraction", round(fraction, 4))
  note("memory_headroom", memory_headroom)
  _check_totals(view, model)
  return model


def _check_totals(view: GroupView, model: MemoryModel) -> None:
  """InputError if a group, or the graph, cannot fit even on empty devices."""
  room = np.where(view.allowed, model.budget[None, :], 0.0).max(axis=1)
  too_big = np.flatnonzero(model.need > room)
  if too_big.size:
    g = int(too_big[np.argmax(model.need[too_big] - room[too_big])])
    raise errors.InputError(
        f"infeasible: {view.label(g)} needs {_gib(model.need[g])} but the "
        f"largest device it may use has {_gib(room[g])} available "
        f"({_budget_note(model)})")
  total_need = float(model.need.sum())
  total_budget = float(model.budget.sum())
  if total_need > total_budget:
    raise errors.InputError(
        f"infeasible: the graph needs {_gib(total_need)} in total "
        f"(persistent {_gib(view.persistent_bytes.sum())}) but the devices "
        f"have {_gib(total_budget)} available ({_budget_note(model)})")


class MemoryBook:
  """Bytes reserved per device as groups are placed (Baechi's "m-" rule)."""

  def __init__(self, view: GroupView, model: MemoryModel):
    self.view = view
    self.model = model
    self.used = np.zeros(view.num_devices, np.float64)

  def fits(self, g: int, j: int) -> bool:
    return self.used[j] + self.model.need[g] <= self.model.budget[j]

  def free(self) -> np.ndarray:
    return self.model.budget - self.used

  def take(self, g: int, j: int) -> None:
    self.used[j] += self.model.need[g]

  def release(self, g: int, j: int) -> None:
    self.used[j] -= self.model.need[g]

  def choices(self, g: int) -> np.ndarray:
    """Devices group g may use that still have room for it."""
    ok = self.view.allowed[g] & (self.used + self.model.need[g] <=
                                 self.model.budget)
    return np.flatnonzero(ok)

  def no_room(self, g: int) -> errors.InputError:
    return no_room_error(self.view, self.model, g, self.used)


def no_room_error(view: GroupView, model: MemoryModel, g: int,
                  used: np.ndarray) -> errors.InputError:
  """InputError: group g fits on none of its devices (needed vs available)."""
  free = ", ".join(
      f"{view.topology.devices[j].name}: {_gib(model.budget[j] - used[j])} "
      f"free of {_gib(model.budget[j])}"
      for j in np.flatnonzero(view.allowed[g]))
  return errors.InputError(
      f"infeasible: {view.label(g)} needs {_gib(model.need[g])} of memory "
      f"but no device it may use has room left ({free}; "
      f"{_budget_note(model)})")


def _gib(nbytes) -> str:
  return f"{float(nbytes) / GIB:.3f} GiB"


def _budget_note(model: MemoryModel) -> str:
  return (f"budget = {model.headroom:g} x capacity, activation fraction "
          f"{model.activation_fraction:.3f}; see memory_headroom / "
          "activation_fraction")


def device_usage(view: GroupView, model: MemoryModel,
                 group_device: np.ndarray) -> np.ndarray:
  """float[d] estimated bytes per device of a group placement."""
  return np.bincount(group_device, weights=model.need,
                     minlength=view.num_devices)


def repair_memory(view: GroupView, model: MemoryModel,
                  group_device: np.ndarray) -> np.ndarray:
  """Moves groups off devices over budget until every device fits.

  Groups leave an over-full device latest-first in topological order (the
  tail of a device's work is what a sequential filler would have spilled),
  each to the allowed device with the most free budget that holds it.
  InputError when a group fits nowhere.
  """
  group_device = np.array(group_device, np.int64)
  used = device_usage(view, model, group_device)
  for j in np.flatnonzero(used > model.budget):
    mine = np.flatnonzero(group_device == j)
    for g in mine[np.argsort(-view.rank[mine], kind="stable")]:
      if used[j] <= model.budget[j]:
        break
      if model.need[g] <= 0:
        continue
      room = np.where(view.allowed[g], model.budget - used, -np.inf)
      room[j] = -np.inf
      target = int(np.argmax(room))
      if room[target] < model.need[g]:
        continue
      group_device[g] = target
      used[j] -= model.need[g]
      used[target] += model.need[g]
    if used[j] > model.budget[j]:
      worst = int(mine[np.argmax(model.need[mine])])
      raise no_room_error(view, model, worst, used)
  return group_device
