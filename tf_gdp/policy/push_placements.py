"""Whole placements that exploration may lean a sample towards.

Sampling each group's device independently rarely assembles a placement in
which thousands of ops move together, and some of the best placements are
of that kind: a balanced cut of parallel branches, or the placement a list
scheduler builds op by op from start times. Each name in PUSHES is one such
placement of the graph, computed once per (graph, topology) without
simulating it; `features` turns it into a pull towards each op's device
(observation `placement_features`) and `rl.exploration` gives one sample in
16 a gain along it. The samples are then judged like every other, so a push
costs the search its sample and nothing else.
"""

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import m_etf
from tf_gdp.baselines import metis
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

# METIS's p-way cut over the p primary devices (`metis.partition_devices`).
METIS_CUT = "metis_cut"
# The m-ETF schedule's devices (`baselines.m_etf`): earliest start first,
# within each device's memory.
M_ETF = "m_etf"
PUSHES = (METIS_CUT, M_ETF)


def devices(name: str, graph: op_graph.OpGraph,
            topology: topology_lib.Topology) -> np.ndarray:
  """int64[n]: the device push `name` sends each op to; -1 for none.

  A placement that does not exist here (m-ETF finds no room for a group)
  pushes no op.
  """
  if name == METIS_CUT:
    return metis.partition_devices(graph, topology)
  if name == M_ETF:
    try:
      return np.asarray(m_etf.place(graph, topology), np.int64)
    except errors.InputError:
      return np.full(graph.num_nodes, -1, np.int64)
  raise ValueError(f"unknown placement push {name!r}")
