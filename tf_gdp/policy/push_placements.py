"""Whole placements that exploration may lean a sample towards.

Sampling each group's device independently rarely assembles a placement in
which thousands of ops move together, and some of the best placements are
of that kind: a balanced cut of parallel branches, the placement a list
scheduler builds op by op from start times (m-ETF's, m-SCT's and HEFT's),
the step's spine on one device with its weight gradients and updates beside
it, the fewest contiguous stages of whole layers that fit memory, or one
device that the memory estimate doubts. Each name in PUSHES
is one such placement of the graph, computed once per (graph, topology)
without simulating it; `features` turns it into a pull towards each op's
device (observation `placement_features`) and `rl.exploration` gives one
sample in 16 a gain along it. The samples are then judged like every other, so a push
costs the search its sample and nothing else.
"""

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.baselines import contiguous_dp
from tf_gdp.baselines import heft
from tf_gdp.baselines import m_etf
from tf_gdp.baselines import m_sct
from tf_gdp.baselines import metis
from tf_gdp.baselines import side_offload
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

# METIS's p-way cut over the p primary devices (`metis.partition_devices`).
METIS_CUT = "metis_cut"
# The m-ETF schedule's devices (`baselines.m_etf`): earliest start first,
# within each device's memory.
M_ETF = "m_etf"
# The step's spine on one device, side branches (weight gradients, updates)
# on the others (`baselines.side_offload`).
SIDE_OFFLOAD = "side_offload"
# The contiguous split of the layer order over the fewest devices whose
# memory it fits (`contiguous_dp.fewest_stages`): one GPU when the step fits
# one.
CONTIGUOUS_SPLIT = "contiguous_split"
# HEFT's schedule (`baselines.heft`): earliest finish first in upward-rank
# order. On a step too big for one device its repaired placement can beat
# every other baseline's.
HEFT = "heft"
# m-SCT's schedule (`baselines.m_sct`): m-ETF that keeps each op with its
# LP-chosen favourite child. Where there is one primary device it is m-ETF's
# schedule, and pushes nothing.
M_SCT = "m_sct"
# m-SCT's LP costs about 35 us per op (2.1 s on GNMT-8's 59,679): above this
# many ops its push is left out, so that zero-shot on such a graph stays
# within seconds.
M_SCT_MAX_OPS = 40_000
# The whole step on one GPU where the memory estimate says it does not fit
# (`contiguous_dp.one_stage_beyond_estimate`); the judge may find it fits.
ONE_DEVICE = "one_device"
PUSHES = (METIS_CUT, M_ETF, SIDE_OFFLOAD, CONTIGUOUS_SPLIT, HEFT, M_SCT,
          ONE_DEVICE)


def devices(name: str, graph: op_graph.OpGraph,
            topology: topology_lib.Topology) -> np.ndarray:
  """int64[n]: the device push `name` sends each op to; -1 for none.

  A placement that does not exist here (m-ETF or the offload finds no room
  for a group) pushes no op.
  """
  if name == METIS_CUT:
    return metis.partition_devices(graph, topology)
  if name not in _PLACERS:
    raise ValueError(f"unknown placement push {name!r}")
  try:
    return np.asarray(_PLACERS[name](graph, topology), np.int64)
  except errors.InputError:
    return np.full(graph.num_nodes, -1, np.int64)


def _m_sct(graph: op_graph.OpGraph,
           topology: topology_lib.Topology) -> np.ndarray:
  """m-SCT's devices; none where they would be m-ETF's or cost too long."""
  if (graph.num_nodes > M_SCT_MAX_OPS or
      common.group_view(graph, topology).primary.size < 2):
    return np.full(graph.num_nodes, -1, np.int64)
  return m_sct.place(graph, topology)


_PLACERS = {M_ETF: m_etf.place, SIDE_OFFLOAD: side_offload.place,
            CONTIGUOUS_SPLIT: contiguous_dp.fewest_stages, HEFT: heft.place,
            M_SCT: _m_sct,
            ONE_DEVICE: contiguous_dp.one_stage_beyond_estimate}
