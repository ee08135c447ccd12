"""Round robin: groups dealt over the primary devices in topological order.

A classic naive baseline (used in the HDP and Placeto comparisons): group k
of the topological order goes to primary device k mod p (the GPUs of a GPU
box). Groups that may not use a primary device (CPU-only ops, pins) go to
their fastest allowed device without taking a turn. Memory-constrained: a
device whose budget cannot hold the group is skipped for the next one in
the cycle that can.
"""

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """Deal groups over the primary devices; deterministic."""
  del seed
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  book = common.MemoryBook(view, model)
  primary = view.primary
  group_device = np.empty(view.num_groups, np.int64)
  turn = 0
  for g in view.order:
    choices = book.choices(g)
    if choices.size == 0:
      raise book.no_room(g)
    dealt = [int(primary[(turn + k) % primary.size])
             for k in range(primary.size)]
    target = next((j for j in dealt if j in choices), None)
    if target is None:
      times = view.duration[g, choices]
      target = int(choices[np.argmin(times)])
    elif view.allowed[g, primary].all():
      turn = (dealt.index(target) + turn + 1) % primary.size
    group_device[g] = target
    book.take(g, target)
  return view.expand(group_device)
