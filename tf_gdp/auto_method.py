"""`auto`, the product's default: the best valid placement of everything here.

Candidates, each repaired to fit memory (`baselines.repair`) and judged by
the simulator on the same topology and costs:

* `gdp`: the learned policy, zero-shot, and fine-tuned when a budget is
  given (`gdp_method`, with that budget);
* the one-shot baselines of `CANDIDATES` (one device, the expert's rules,
  the list schedulers, METIS, the stage rules, the contiguous-split DP);
  one that cannot place the graph (no rules for it, say) is left out;
* `local_search` from the best cheap baseline (`baselines.local_search`,
  the same seed), with the budget when one is given, else with
  `SEARCH_EVALUATIONS` evaluations.

Each search gets the whole budget: `auto` is exactly as good as the
best of `gdp` and `local_search` run with that budget alone, and of
every cheap baseline, and it costs their sum (the report gives the
evaluations and seconds). The fastest valid candidate wins; the report
names it (`details["winner"]`) and lists every candidate's figures.
"""

import dataclasses
import time
from typing import Optional

import numpy as np

from grappler_bridge import errors as grappler_errors

from tf_gdp import errors
from tf_gdp import gdp_method
from tf_gdp.baselines import repair

AUTO = "auto"
GDP = "gdp"
CANDIDATES = ("single_device", "human_expert", "m_topo", "m_etf", "m_sct",
              "heft", "metis", "stage_pipeline", "contiguous_dp")
LOCAL_SEARCH = "local_search"
SEARCH_EVALUATIONS = 2000  # local_search's evaluations without a budget


@dataclasses.dataclass
class AutoResult:
  """The winner's placement and what finding it cost in all.

  `priority` is the winner's own planned order (a list scheduler), or None.
  """
  placement: np.ndarray
  seconds: float
  evaluations: int
  details: dict
  priority: Optional[np.ndarray] = None


def place(graph, topology, *, budget_seconds: float = 0.0,
          budget_evaluations: Optional[int] = None,
          policy: Optional[str] = None, samples: int = 16, seed: int = 0,
          extracted=None, log=None) -> AutoResult:
  """Every candidate of the module doc; the fastest valid one wins."""
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  started = time.perf_counter()
  found = {}  # name -> (placement, evaluations, priority)
  skipped = {}
  gdp = gdp_method.place(
      graph, topology, budget_seconds=budget_seconds,
      budget_evaluations=budget_evaluations, policy=policy, samples=samples,
      seed=seed, extracted=extracted, log=log)
  found[GDP] = (gdp[0], gdp[2], None)
  options = {"evaluations": budget_evaluations or (
      None if budget_seconds > 0 else SEARCH_EVALUATIONS),
             "seconds": budget_seconds or None}
  if options["evaluations"] is None:
    options["evaluations"] = 10**9  # the seconds end it
  for name, kwargs in [(n, {}) for n in CANDIDATES] + [(LOCAL_SEARCH,
                                                        options)]:
    try:
      result = baselines.run(name, graph, topology, seed=seed, **kwargs)
    except errors.InputError as e:  # e.g. no expert rules for this graph
      skipped[name] = grappler_errors.first_line(e)
      continue
    found[name] = (result.placement, result.evaluations, result.priority)
  names = list(found)
  fixed = repair.repair_batch(graph, topology,
                              np.stack([found[n][0] for n in names]))
  candidates = {}
  for name, made in zip(names, fixed):
    candidates[name] = {
        "step_time_us": made.step_time_us if made.valid else None,
        "valid": made.valid, "evaluations": found[name][1],
        "repaired": made.changed}
  valid = [i for i, made in enumerate(fixed) if made.valid]
  if not valid:
    raise errors.NoValidPlacementError(
        f"no valid placement found for {graph.name!r} on {topology.name!r}: "
        f"auto's candidates are all invalid after repair (first: "
        f"{names[0]}: {fixed[0].reason})")
  pick = min(valid, key=lambda i: (fixed[i].step_time_us, i))
  winner = names[pick]
  evaluations = sum(f[1] for f in found.values()) + sum(
      made.evaluations for made in fixed)
  details = {"winner": winner, "candidates": candidates, "skipped": skipped,
             "gdp": gdp[3]}
  if fixed[pick].changed:
    details["winner_repaired"] = True
  priority = found[winner][2] if not fixed[pick].changed else None
  return AutoResult(placement=fixed[pick].placement,
                    seconds=time.perf_counter() - started,
                    evaluations=int(evaluations), details=details,
                    priority=priority)
