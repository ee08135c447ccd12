"""The last gate before a placement becomes a result: valid, or an error.

`valid_placement` repairs a method's placement (`repair`). A repaired
placement competes with the repaired placements of the `FALLBACKS` (a
repair may have to move much of the graph, and a memory-aware baseline can
then be faster), and if the repair cannot make it fit they alone do; the
fastest valid one is used, and the summary names a fallback that won. When
no fallback gives a valid placement (their memory estimates can refuse what
an exact placement fits), the repair of everything on the first device is
tried last (`FIRST_DEVICE`). When none fits either,
`errors.NoValidPlacementError` says so in one line with the numbers. No
caller ever gets an invalid placement back as a result.
"""

import dataclasses
from typing import Optional

import numpy as np

from grappler_bridge import errors as grappler_errors

from tf_gdp import errors
from tf_gdp.baselines import registry
from tf_gdp.baselines import repair
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

# Tried, each repaired, when the method's own placement cannot be repaired:
# one device first, then the memory-aware list schedulers and partitioners.
FALLBACKS = ("single_device", "m_etf", "m_sct", "metis", "contiguous_dp")
# The name of the last resort in a summary's "fallback".
FIRST_DEVICE = "repaired_first_device"


@dataclasses.dataclass(frozen=True)
class ValidPlacement:
  """A valid placement and what it took to get it.

  Attributes:
    placement: int32[num_nodes], valid.
    step_time_us: its simulated step time.
    evaluations: simulations the repair (and any fallback) made; 0 for a
      placement that was valid already (checking it is judging it).
    repair: the report's account when the placement was changed (the
      repair's summary, plus "fallback": the baseline used), else None.
  """
  placement: np.ndarray
  step_time_us: float
  evaluations: int
  repair: Optional[dict]


def valid_placement(graph: op_graph.OpGraph, topology: topology_lib.Topology,
                    placement, *, method: str, seed: int = 0,
                    method_error: Optional[str] = None) -> ValidPlacement:
  """`placement` repaired, or a repaired fallback; NoValidPlacementError.

  `placement` None means the method found none (`method_error` says why,
  e.g. its memory estimate fits nowhere): the fallbacks are tried at once.
  """
  if placement is None:
    return _fallback(graph, topology, method, seed, method_error, 0, None)
  fixed = repair.repair(graph, topology, placement)
  if fixed.valid and not fixed.changed:  # the check is the judge's own
    return ValidPlacement(fixed.placement, fixed.step_time_us, 0, None)
  if fixed.valid:  # repaired: a fallback may be faster than the repair
    repaired = ValidPlacement(fixed.placement, fixed.step_time_us,
                              fixed.evaluations, fixed.summary())
    try:
      other = _fallback(graph, topology, method, seed, "", fixed.evaluations,
                        fixed.original_reason)
    except errors.NoValidPlacementError:
      return repaired
    return other if other.step_time_us < fixed.step_time_us else (
        dataclasses.replace(repaired, evaluations=other.evaluations))
  return _fallback(graph, topology, method, seed,
                   f"its placement is invalid ({fixed.original_reason}); the "
                   f"repair left it invalid ({fixed.reason})",
                   fixed.evaluations, fixed.original_reason)


def _fallback(graph, topology, method, seed, why, evaluations,
              original_reason) -> ValidPlacement:
  """The best repaired placement of the FALLBACKS; NoValidPlacementError."""
  best, best_name, problems = None, None, []
  for name in FALLBACKS:
    if name == method:
      continue
    try:
      found = registry.run(name, graph, topology, seed=seed)
    except errors.InputError as e:
      problems.append(f"{name}: {grappler_errors.first_line(e)}")
      continue
    other = repair.repair(graph, topology, found.placement)
    evaluations += found.evaluations + other.evaluations
    if other.valid and (best is None or other.step_time_us < best.step_time_us):
      best, best_name = other, name
  if best is None:
    other = repair.repair(graph, topology, np.zeros(graph.num_nodes, np.int32))
    evaluations += other.evaluations
    if other.valid:
      best, best_name = other, FIRST_DEVICE
  if best is None:
    raise errors.NoValidPlacementError(
        f"no valid placement found for {graph.name!r} on {topology.name!r}: "
        f"{method}: {why}; nor in the repaired placements of "
        f"{', '.join(n for n in FALLBACKS if n != method)}" +
        (f" ({'; '.join(problems)})" if problems else ""))
  return ValidPlacement(best.placement, best.step_time_us, evaluations,
                        dict(best.summary(), fallback=best_name,
                             original_reason=original_reason or why))
