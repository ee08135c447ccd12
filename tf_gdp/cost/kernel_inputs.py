"""The arrays the compiled simulator pass reads, built from plan and tables.

`schedule_kernel.run` is called thousands of times per graph; what it reads
that depends only on the graph is derived here once per plan (cached as
`SimulatorPlan.kernel_arrays`), in the types and layouts the event loop
reads fastest.
"""

import numpy as np


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


def arguments(plan, tables) -> tuple:
  """`schedule_kernel.run`'s arguments after placement, d, record, keys.

  Args:
    plan: the graph's `simulator.SimulatorPlan`.
    tables: the graph x topology `simulator.DeviceTables`.
  """
  i = plan.kernel_arrays
  return (i["rank"], i["order"], i["in_ptr"], i["in_src"], i["in_control"],
          i["out_ptr"], i["out_dst"], i["out_control"],
          plan.tensor_bytes, i["tensor_edge_ptr"],
          i["tensor_dst"], i["tensor_in_pos"], i["node_tensor_ptr"],
          i["start_bytes"], plan.temp_bytes, plan.memory_bytes,
          i["free_bytes"],
          tables.duration_us, tables.latency_us, tables.bytes_per_us,
          tables.table_bytes, tables.table_us, tables.num_channels,
          tables.route_ptr.astype(np.uint32),
          tables.route_channels.astype(np.uint32))
