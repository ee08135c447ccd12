"""m-ETF: Baechi's memory-constrained Earliest Task First placement.

Jeon et al., "Baechi: Fast Device Placement of Machine Learning Graphs"
(SoCC 2020), after Hwang et al. (SIAM J. Comput. 1989): list
scheduling that, at every step, starts the (ready op, device) pair that can
start earliest given device availability and the communication time of its
inputs, among devices with memory left for the op's colocation group. The
placement is the device each op was scheduled on. The engine and its
conventions (ties, devices considered, colocation binding) are documented
in `list_scheduler`.
"""

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.baselines import list_scheduler
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, link_contention: bool = True,
          activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """The device of every op in the m-ETF schedule; deterministic."""
  del seed
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  placement, makespan, order = list_scheduler.schedule(
      view, model, link_contention=link_contention)
  common.note("scheduled_makespan_us", round(makespan, 3))
  common.note_priority(order)  # each device runs its ops in list order
  return placement
