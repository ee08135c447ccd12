"""The arrays the compiled simulator pass reads, built from plan and tables.

`schedule_kernel.run` is called thousands of times per graph; what it reads
that depends only on the graph is derived here once per plan (cached as
`SimulatorPlan.kernel_arrays`), in the types and layouts the event loop
reads fastest.
"""

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import runtime_costs


# The plan's index arrays `run` reads, passed as uint32: half the memory
# traffic of int64 on a pass that is mostly random reads.
INDEX_FIELDS = ("rank", "order", "in_ptr", "out_ptr", "tensor_edge_ptr",
                "node_tensor_ptr")


def build(plan) -> dict:
  """`plan`'s arrays as `run` reads them (uint32 indices, per-CSR entries).

  An edge's other end, whether it is a control edge and its position among
  its destination's in-edges are stored in the order of each CSR that lists
  the edge (in_src, in_control, out_dst, out_control, tensor_dst,
  tensor_in_pos): the event loop reads them where it reads the edge, instead
  of through one more dependent load.
  """
  index = {name: getattr(plan, name).astype(np.uint32)
           for name in INDEX_FIELDS}
  index["in_src"] = plan.edge_src[plan.in_edges].astype(np.uint32)
  index["in_control"] = plan.edge_tensor[plan.in_edges] < 0
  index["out_dst"] = plan.edge_dst[plan.out_edges].astype(np.uint32)
  index["out_control"] = plan.edge_tensor[plan.out_edges] < 0
  index["tensor_dst"] = plan.edge_dst[plan.tensor_edges].astype(np.uint32)
  in_pos = np.empty(plan.num_edges, np.uint32)
  in_pos[plan.in_edges] = np.arange(plan.num_edges, dtype=np.uint32)
  index["tensor_in_pos"] = in_pos[plan.tensor_edges]
  # What an op allocates when it starts, and what its outputs free once
  # nothing holds them (a fetch's: nothing).
  index["start_bytes"] = plan.output_bytes + plan.temp_bytes
  index["free_bytes"] = np.where(plan.is_fetch, 0, plan.output_bytes).astype(
      np.int64)
  return index


def arguments(plan, tables, *, ordered: bool = False) -> tuple:
  """`schedule_kernel.run`'s arguments after placement, d, record, keys.

  Args:
    plan: the graph's `simulator.SimulatorPlan`.
    tables: the graph x topology `simulator.DeviceTables`.
    ordered: a priority order was given, which overrides the runtime's own
      executor order.
  """
  runtime = tables.runtime
  i = plan.kernel_arrays
  return (i["rank"], i["order"], i["in_ptr"], i["in_src"], i["in_control"],
          i["out_ptr"], i["out_dst"], i["out_control"],
          plan.tensor_bytes, plan.loops.tensor_repeats, plan.loops.back_src,
          plan.loops.back_dst, plan.loops.back_bytes, plan.loops.back_repeats,
          i["tensor_edge_ptr"],
          i["tensor_dst"], i["tensor_in_pos"], i["node_tensor_ptr"],
          i["start_bytes"], plan.temp_bytes, plan.memory_bytes,
          i["free_bytes"],
          tables.duration_us, tables.latency_us, tables.bytes_per_us,
          tables.table_bytes, tables.table_us, tables.num_channels,
          tables.route_ptr.astype(np.uint32),
          tables.route_channels.astype(np.uint32),
          runtime.control_transfers, runtime.transfer_cpu_us[0],
          runtime.transfer_cpu_us[1],
          runtime.executor_order == runtime_costs.LAST_READY_FIRST
          and not ordered, runtime.pipelined_latency_us,
          runtime.transfer_cpu_us_per_mb[0] / 1e6,
          runtime.transfer_cpu_us_per_mb[1] / 1e6)


def ready_keys(plan, priority=None) -> tuple:
  """(ready_key uint32[n], key_node uint32[n]) for `schedule_kernel.run`.

  A device's ready ops run in increasing `priority`, ties by topological
  rank; None is the topological order itself. InputError on a bad shape or
  a value that is not a finite number.
  """
  if priority is None:
    return plan.kernel_arrays["rank"], plan.kernel_arrays["order"]
  array = np.asarray(priority)
  n = plan.num_nodes
  if array.shape != (n,):
    raise errors.InputError(
        f"priority has shape {array.shape}; the graph has {n} nodes, so it "
        f"must be [{n}]")
  if array.size and (array.dtype == np.bool_ or
                     not np.issubdtype(array.dtype, np.number)):
    raise errors.InputError("priority must hold numbers")
  if not np.issubdtype(array.dtype, np.integer):
    array = array.astype(np.float64)
    if not np.all(np.isfinite(array)):
      raise errors.InputError("priority must be finite")
  key_node = np.lexsort((plan.rank, array)).astype(np.uint32)
  ready_key = np.empty(n, np.uint32)
  ready_key[key_node] = np.arange(n, dtype=np.uint32)
  return ready_key, key_node


def check_placement(placement, n: int, d: int, ndim: int = 1) -> np.ndarray:
  """int64 contiguous copy/view; InputError naming what is wrong."""
  array = np.asarray(placement)
  if array.ndim != ndim or array.shape[-1:] != (n,):
    want = f"[{n}]" if ndim == 1 else f"[batch, {n}]"
    raise errors.InputError(
        f"placement has shape {array.shape}; the graph has {n} nodes, so "
        f"it must be {want}")
  if array.size and not np.issubdtype(array.dtype, np.integer):
    raise errors.InputError("placement must hold integer device indices")
  array = np.ascontiguousarray(array, np.int64)
  if array.size and (array.min() < 0 or array.max() >= d):
    bad = int(array[(array < 0) | (array >= d)].flat[0])
    raise errors.InputError(
        f"placement names device {bad}; the topology has {d} devices")
  return array
