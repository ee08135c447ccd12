"""The placements the product itself would return, for the agreement check.

Probe placements (`agreement_placements`) cover the space; what a user gets
is what `tf-gdp place` makes: every classic baseline, and GDP zero-shot and
fine-tuned. Each is searched here as `place` searches it on `cpu-workers:K`:
on the graph priced by its profile, on the calibrated topology, before
measured confirmation (which only chooses among such placements).
"""

from typing import Callable, Dict, Sequence

import numpy as np

from tf_gdp import placing

# The baselines `agreement_check` adds by default: every classic method
# with one placement per run (hdp is a search with its own budget).
DEFAULT_METHODS = ("single_device", "round_robin", "random", "m_topo",
                   "m_etf", "m_sct", "heft", "metis")


def method_placements(graph, topology, *,
                      methods: Sequence[str] = DEFAULT_METHODS,
                      gdp_budget_seconds: float = 60.0, seed: int = 0,
                      extracted=None,
                      log: Callable[[str], None] = print
                      ) -> Dict[str, np.ndarray]:
  """"method:<name>" -> placement for each method, plus GDP's.

  GDP appears as "method:gdp_zero_shot" and, with a budget, as
  "method:gdp_finetuned" (the placement fine-tuning returns, zero-shot if
  fine-tuning found nothing better); a negative budget leaves GDP out. A
  method that cannot place the graph
  is left out, with a log line saying why.
  """
  result = {}
  for method in methods:
    try:
      placed = placing.place(graph, topology, method, seed=seed, compare=(),
                             extracted=extracted, robust_members=0)
    except Exception as e:  # pylint: disable=broad-except
      log(f"  {method}: no placement ({type(e).__name__}: {e})")
      continue
    result[f"method:{method}"] = np.asarray(placed.placement, np.int64)
  runs = [("gdp_zero_shot", 0.0)] if gdp_budget_seconds >= 0 else []
  if gdp_budget_seconds > 0:
    runs.append(("gdp_finetuned", gdp_budget_seconds))
  for label, budget in runs:
    placed = placing.place(graph, topology, placing.GDP,
                           budget_seconds=budget, seed=seed, compare=(),
                           extracted=extracted, robust_members=0)
    result[f"method:{label}"] = np.asarray(placed.placement, np.int64)
  return result
