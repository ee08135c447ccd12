"""Side-branch offload: the step's spine on one device, its side branches on others.

Most of a training step's time lies on one chain: the forward pass, the
loss, and the backward pass through the activation gradients. The weight
gradients and the optimizer's updates hang off that chain: nothing on it
waits for them. On one device they still queue behind (or in front of) the
chain's ops; on another they run beside it, if their inputs (a layer's
activation, sent during the forward pass, and its output gradient) get
there in time. A recurrent layer's weight gradient, summed over every time
step, is the extreme case.

1. The spine: the ops on a longest path of compute on the first primary
   device (no transfers counted), along data edges.
2. Side ops: ops from which no data path leads to the spine. A colocation group
   moves whole, and a variable's group holds both its forward read and its
   update: a group is a side group when its side members do more work than
   the others (a variable's handle and reads do none).
3. Branches: connected pieces of the side groups, joined by edges that
   carry more than SMALL_TENSOR_BYTES (shared scalars such as the learning
   rate or the step counter would otherwise join every branch into one).
4. Each branch's transfer time is what crosses between it and the rest of
   the graph (its inputs, and a moved variable's reads), at the mean link's
   latency and bandwidth between primary devices.
   Branches are taken in decreasing order of compute per transfer time, if
   their compute is at least MIN_COMPUTE_PER_TRANSFER times their transfer
   time and while the branches' total transfer time stays within SEND_BUDGET of
   the compute left on it; each goes to the least loaded other primary
   device (longest processing time first, by that order).
5. Everything else stays on the spine device, except groups that may not
   run there (a CPU-only op, a pin), which go to their fastest allowed
   device; a branch goes only to a device all its groups may use.
6. Memory (`common.memory_model`'s estimate): while the spine device is over
   its budget, the remaining branches leave it, largest estimate first, each
   for the other device with the most room that holds it (a variable's
   optimizer state goes with its update).
7. A step whose spine alone overflows a device (the forward activations,
   kept for the backward pass, are most of a large step's memory) starts
   over from the fewest contiguous stages of the layer order that fit
   (`contiguous_dp.fewest_stages`): the spine is then a pipeline of whole
   layers, and each branch worth moving goes to the least loaded primary
   device, by the stages' compute and the branches already there, that has
   room for it. Then `common.repair_memory` spills any device still over
   its budget, latest groups first. InputError if that fails too.

The placement itself is never simulated (the memory estimate calibrates
once). The constants were chosen on the training corpus
(docs/BENCHMARKS.md).
"""

import numpy as np
from scipy.sparse import csgraph
from scipy import sparse

from tf_gdp.baselines import common
from tf_gdp.baselines import communication
from tf_gdp.baselines import contiguous_dp
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

# An edge at most this large does not join two side groups into one branch.
SMALL_TENSOR_BYTES = 4096
# A branch moves only if its compute is at least this multiple of the time
# its inputs take to reach another device.
MIN_COMPUTE_PER_TRANSFER = 0.1
# The branches' transfer time in all, as a fraction of the compute that
# stays on the spine device.
SEND_BUDGET = 1.0
# Relative slack for "on a longest path".
_ON_PATH = 1e-9


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """int32 device per op: the spine on one device, side branches offloaded.

  `activation_fraction` and `memory_headroom`: see `common.memory_model`.
  """
  del seed  # deterministic
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  spine_device = int(view.primary[0])
  group_device = np.where(view.allowed[:, spine_device], spine_device,
                          view.fastest)
  side = side_groups(view)
  branch = branches(view, side)
  num_branches = int(branch.max(initial=-1)) + 1
  if num_branches and view.primary.size > 1:
    _offload(view, side, branch, num_branches, group_device,
             view.primary[1:])
    _make_room(view, model, side, branch, num_branches, group_device)
    used = common.device_usage(view, model, group_device)
    if used[spine_device] > model.budget[spine_device]:
      staged = contiguous_dp.fewest_stages(view.graph, view.topology)
      group_device = staged[view.members[view.member_ptr[:-1]]].astype(
          np.int64)
      _offload(view, side, branch, num_branches, group_device, view.primary,
               model)
      common.note("staged", True)
  group_device = common.repair_memory(view, model, group_device)
  common.note("side_ops", int(side[view.group_of].sum()))
  common.note("offloaded_ops", int((group_device[view.group_of] !=
                                    spine_device).sum()))
  return view.expand(group_device)


def side_groups(view: common.GroupView) -> np.ndarray:
  """bool[G]: groups whose members off every path to the spine do more work
  than the others."""
  plan = simulator.prepare(view.graph)
  op_time = view.tables.duration_us[:, int(view.primary[0])]
  # Paths follow tensors only: a step's last op waits on every update
  # through control edges, and would otherwise put them all upstream of it.
  data_only = np.where(plan.edge_tensor >= 0, 0.0, -np.inf)
  below = communication.levels(view, op_time, data_only)
  above = communication.levels_from_entry(view, op_time, data_only)
  through = above + below - op_time
  spine = through >= through.max(initial=0.0) * (1 - _ON_PATH)
  reaches = communication.levels(view, spine.astype(np.float64),
                                 data_only) > 0
  off_spine = np.bincount(view.group_of, weights=np.where(reaches, 0, op_time),
                          minlength=view.num_groups)
  on_spine = np.bincount(view.group_of, weights=np.where(reaches, op_time, 0),
                         minlength=view.num_groups)
  return off_spine > on_spine


def branches(view: common.GroupView, side: np.ndarray) -> np.ndarray:
  """int[G]: the branch of each side group (connected through edges of more
  than SMALL_TENSOR_BYTES), -1 for other groups."""
  src, dst, nbytes = view.edges
  joined = side[src] & side[dst] & (nbytes > SMALL_TENSOR_BYTES) & (src != dst)
  members = np.flatnonzero(side)
  index = np.full(view.num_groups, -1, np.int64)
  index[members] = np.arange(members.size)
  adjacency = sparse.coo_matrix(
      (np.ones(int(joined.sum())), (index[src[joined]], index[dst[joined]])),
      shape=(members.size, members.size))
  _, labels = csgraph.connected_components(adjacency, directed=False)
  branch = np.full(view.num_groups, -1, np.int64)
  branch[members] = labels
  return branch


def _offload(view: common.GroupView, side: np.ndarray, branch: np.ndarray,
             num_branches: int, group_device: np.ndarray,
             targets: np.ndarray, model=None) -> None:
  """Moves the branches worth it to the least loaded of `targets` (in place).

  A device's load is the compute of the groups on it that are not side
  groups, plus the branches sent to it. With a memory `model`, a branch
  goes only where the estimate has room for it.
  """
  spine_device = int(view.primary[0])
  work = view.duration[:, spine_device]
  compute = np.bincount(branch[side], weights=work[side],
                        minlength=num_branches)
  src, dst, nbytes = view.edges
  crossing = side[src] != side[dst]
  end = np.where(side[dst], dst, src)[crossing]
  latency, per_byte = communication.mean_link(view, view.primary)
  crossed = np.bincount(branch[end], weights=nbytes[crossing],
                        minlength=num_branches)
  count = np.bincount(branch[end], minlength=num_branches)
  transfer = crossed * per_byte + count * latency
  usable = np.ones((num_branches, targets.size), bool)
  for k, device in enumerate(targets):
    banned = np.bincount(branch[side], weights=~view.allowed[side, device],
                         minlength=num_branches)
    usable[:, k] = banned == 0
  budget = SEND_BUDGET * work[~side].sum()
  load = np.bincount(group_device[~side], weights=work[~side],
                     minlength=view.num_devices)[targets]
  used = (common.device_usage(view, model, group_device)
          if model is not None else None)
  sent = 0.0
  worth = compute / np.maximum(transfer, 1e-9)
  for k in np.argsort(-worth, kind="stable"):
    if (compute[k] <= 0 or worth[k] < MIN_COMPUTE_PER_TRANSFER or
        sent + transfer[k] > budget or not usable[k].any()):
      continue
    members = np.flatnonzero(side & (branch == k))
    fits = usable[k].copy()
    if used is not None:
      need = model.need[members].sum()
      fits &= used[targets] + need <= model.budget[targets]
    if not fits.any():
      continue
    target = int(np.argmin(np.where(fits, load, np.inf)))
    if (group_device[members] == targets[target]).all():
      continue
    if used is not None:
      np.subtract.at(used, group_device[members], model.need[members])
      used[targets[target]] += need
    group_device[members] = targets[target]
    load[target] += compute[k]
    sent += transfer[k]


def _make_room(view: common.GroupView, model: common.MemoryModel,
               side: np.ndarray, branch: np.ndarray, num_branches: int,
               group_device: np.ndarray) -> None:
  """Moves branches off the spine device while it is over budget (in place)."""
  spine_device = int(view.primary[0])
  used = common.device_usage(view, model, group_device)
  if used[spine_device] <= model.budget[spine_device]:
    return
  staying = side & (group_device == spine_device)
  need = np.bincount(branch[staying], weights=model.need[staying],
                     minlength=num_branches)
  others = view.primary[1:]
  for k in np.argsort(-need, kind="stable"):
    if used[spine_device] <= model.budget[spine_device] or need[k] <= 0:
      break
    members = np.flatnonzero(staying & (branch == k))
    usable = view.allowed[members][:, others].all(axis=0)
    room = np.where(usable, model.budget[others] - used[others], -np.inf)
    target = int(np.argmax(room))
    if room[target] < need[k]:
      continue
    group_device[members] = others[target]
    used[spine_device] -= need[k]
    used[others[target]] += need[k]
