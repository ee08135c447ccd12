"""An execution order for any placement: the longest remaining path first.

The simulator runs each device's ready ops in the graph's topological order
(or, on a calibrated `cpu-workers:K`, the op made ready last first), as
TensorFlow's executor does. List schedulers (m-ETF, m-SCT, HEFT) plan their
own order as well and are judged with it too (`:planned`). This gives any
placement, however it was found, such an order: among ready ops, a device
runs first the one with the longest path to the end of the step, counting
each op's time on its own device and each cross-device edge's transfer time
(link latency, plus the tensor's bytes over the link's bandwidth): the
upward rank of HEFT's first phase, for a fixed placement.

TensorFlow's executor follows neither this order nor a list scheduler's
plan; a runtime would have to enforce it (control dependencies between each
device's consecutive ops). The order shows how much of a comparison is the
order rather than the placement.
"""

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.baselines import communication
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


def priority(graph: op_graph.OpGraph, topology: topology_lib.Topology,
             placement: np.ndarray) -> np.ndarray:
  """float64[num_nodes] for `simulator.simulate(priority=...)`, lower first:
  minus each op's longest path to an exit under `placement`."""
  placement = np.asarray(placement, np.int64)
  view = common.group_view(graph, topology)
  plan = simulator.prepare(graph)
  tables = view.tables
  is_data, _, nbytes = communication.edge_costs(view)
  op_time = tables.duration_us[np.arange(graph.num_nodes), placement]
  src, dst = placement[plan.edge_src], placement[plan.edge_dst]
  crossing = src != dst
  transfer = np.zeros(plan.edge_src.shape[0])
  transfer[crossing] = tables.latency_us[src[crossing], dst[crossing]] + (
      nbytes[crossing] / tables.bytes_per_us[src[crossing], dst[crossing]])
  return -communication.levels(view, op_time, transfer)


def simulate(graph: op_graph.OpGraph, topology: topology_lib.Topology,
             placement: np.ndarray, **options):
  """`simulator.simulate` of `placement` run in its critical-path order."""
  return simulator.simulate(graph, placement, topology,
                            priority=priority(graph, topology, placement),
                            **options)
