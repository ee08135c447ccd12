"""The fastest valid placement among several methods', each repaired to fit.

`auto` (the product's default method) and pre-training's imitation targets
ask the same question of many candidates: run each method (`registry.run`;
one that cannot place the graph, e.g. no expert rules for it, is skipped
and named), add any placements found elsewhere (the learned policy's),
repair every placement to fit memory (`repair.repair_batch`, one batch),
judge them all by the simulator on the same topology and costs, and keep
the fastest valid one (the first in order on a tie).
"""

import dataclasses
from typing import Optional, Sequence, Tuple

import numpy as np

from grappler_bridge import errors as grappler_errors

from tf_gdp import errors
from tf_gdp.baselines import registry
from tf_gdp.baselines import repair
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


@dataclasses.dataclass(frozen=True)
class BestOf:
  """The winner and every candidate's figures.

  Attributes:
    method: the winning candidate's name.
    placement: int32[num_nodes], valid (repaired if it had to be).
    step_time_us: its simulated step time.
    evaluations: simulations in all: every candidate's own and the repairs'.
    repaired: whether the repair changed the winner's placement.
    priority: the winner's own planned order (a list scheduler) when the
      repair left its placement unchanged, else None.
    candidates: name -> {step_time_us (None: invalid), valid, evaluations,
      repaired}, in the order tried.
    skipped: name -> why that method could not place the graph.
    valid_placements: name -> int32[num_nodes] of every valid candidate
      (repaired if it had to be).
  """
  method: str
  placement: np.ndarray
  step_time_us: float
  evaluations: int
  repaired: bool
  priority: Optional[np.ndarray]
  candidates: dict
  skipped: dict
  valid_placements: dict = dataclasses.field(default_factory=dict)


def best_of(graph: op_graph.OpGraph, topology: topology_lib.Topology,
            methods: Sequence[Tuple[str, dict]], *, seed: int = 0,
            given: Optional[dict] = None,
            label: str = "the candidates") -> BestOf:
  """The fastest valid candidate (module doc).

  Args:
    graph, topology: what to place, and on what.
    methods: (method name, its options) pairs, run in this order.
    seed: every method's seed.
    given: name -> (placement, evaluations, priority or None) of
      candidates found elsewhere; they come first.
    label: what the candidates are, for the error message.

  Raises:
    NoValidPlacementError: no candidate is valid, even repaired.
  """
  found = dict(given or {})  # name -> (placement, evaluations, priority)
  skipped = {}
  for name, options in methods:
    try:
      result = registry.run(name, graph, topology, seed=seed, **options)
    except errors.InputError as e:
      skipped[name] = grappler_errors.first_line(e)
      continue
    found[name] = (result.placement, result.evaluations, result.priority)
  names = list(found)
  if not names:
    raise errors.NoValidPlacementError(
        f"no valid placement found for {graph.name!r} on {topology.name!r}: "
        f"none of {label} could place it ("
        + "; ".join(f"{n}: {why}" for n, why in skipped.items()) + ")")
  fixed = repair.repair_batch(graph, topology,
                              np.stack([found[n][0] for n in names]))
  candidates = {
      name: {"step_time_us": made.step_time_us if made.valid else None,
             "valid": made.valid, "evaluations": found[name][1],
             "repaired": made.changed}
      for name, made in zip(names, fixed)}
  valid = [i for i, made in enumerate(fixed) if made.valid]
  if not valid:
    raise errors.NoValidPlacementError(
        f"no valid placement found for {graph.name!r} on {topology.name!r}: "
        f"{label} are all invalid after repair (first: {names[0]}: "
        f"{fixed[0].reason})")
  pick = min(valid, key=lambda i: (fixed[i].step_time_us, i))
  winner = names[pick]
  evaluations = sum(f[1] for f in found.values()) + sum(
      made.evaluations for made in fixed)
  return BestOf(
      method=winner, placement=fixed[pick].placement,
      step_time_us=float(fixed[pick].step_time_us),
      evaluations=int(evaluations), repaired=bool(fixed[pick].changed),
      priority=None if fixed[pick].changed else found[winner][2],
      candidates=candidates, skipped=skipped,
      valid_placements={names[i]: fixed[i].placement for i in valid})
