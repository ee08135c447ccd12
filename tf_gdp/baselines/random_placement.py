"""Random: every colocation group on a device drawn uniformly (seeded).

The floor of the benchmark tables (the GDP and HDP papers report it too).
Each group draws uniformly among the devices it may use (kinds, pins), so a
random placement is always valid in its constraints. Memory: if the
estimated usage (`common.memory_model`) overflows a device, the draw is
repeated (`retries` times, default 4); if every draw overflows, the last one
is repaired by moving groups off the over-full devices
(`common.repair_memory`). When memory is not binding the placement is
exactly uniform.
"""

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, retries: int = 4, activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """A uniform random placement over allowed devices that fits memory."""
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  rng = np.random.default_rng(seed)
  allowed = view.allowed
  counts = allowed.sum(axis=1)
  cumulative = np.cumsum(allowed, axis=1)
  group_device = None
  for attempt in range(max(1, retries + 1)):
    pick = np.floor(rng.random(view.num_groups) * counts).astype(np.int64)
    # The pick-th allowed device: the first column whose running count
    # of allowed devices exceeds pick.
    group_device = np.argmax(cumulative > pick[:, None], axis=1)
    usage = common.device_usage(view, model, group_device)
    if np.all(usage <= model.budget):
      common.note("draws", attempt + 1)
      return view.expand(group_device)
  common.note("draws", max(1, retries + 1))
  common.note("repaired", True)
  return view.expand(common.repair_memory(view, model, group_device))
