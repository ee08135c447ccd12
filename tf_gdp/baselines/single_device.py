"""Single device: the whole graph on the fastest one device that holds it.

The reference every speedup is quoted against (the GDP and HDP papers'
"single GPU" row). Each device is tried in turn; ops that may not run there
(CPU-only kernels, pins) go to the allowed device where their group runs
fastest, as TF's own placer would put them. Each candidate is simulated and
the fastest one whose simulated peak memory fits is returned; since the
simulator is exact here, no memory estimate is needed.
"""

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0) -> np.ndarray:
  """Fastest valid single-device placement; InputError if none fits."""
  del seed  # deterministic
  view = common.group_view(graph, topology)
  fallback = view.fastest
  best, best_time, smallest_overflow = None, np.inf, None
  tried = []
  for j in range(view.num_devices):
    group_device = np.where(view.allowed[:, j], j, fallback)
    placement = view.expand(group_device)
    result = common.simulate(graph, placement, topology)
    tried.append((topology.devices[j].name, result.step_time_us,
                  bool(result.valid)))
    if result.valid and result.step_time_us < best_time:
      best, best_time = placement, result.step_time_us
    elif not result.valid:
      over = (float(result.peak_memory_bytes[j]) -
              topology.devices[j].memory_bytes)
      if smallest_overflow is None or over < smallest_overflow[0]:
        smallest_overflow = (over, j, float(result.peak_memory_bytes[j]))
  common.note("candidates", [
      {"device": name, "step_time_us": round(t, 3), "valid": ok}
      for name, t, ok in tried])
  if best is None:
    _, j, peak = smallest_overflow
    raise errors.InputError(
        f"no single device holds the graph: on "
        f"{topology.devices[j].name} it needs {peak / common.GIB:.3f} GiB at "
        f"its peak but has {topology.devices[j].memory_bytes / common.GIB:.3f}"
        " GiB")
  common.note("device", topology.devices[int(np.bincount(best).argmax())].name)
  return best
