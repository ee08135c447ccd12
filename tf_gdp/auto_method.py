"""`auto`, the product's default: the best valid placement of everything here.

Candidates, each repaired to fit memory (`baselines.repair`) and judged by
the simulator on the same topology and costs (`baselines.best_of`):

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

from tf_gdp import gdp_method
from tf_gdp.baselines import best_of

AUTO = "auto"
GDP = "gdp"
CANDIDATES = ("single_device", "human_expert", "m_topo", "m_etf", "m_sct",
              "heft", "metis", "stage_pipeline", "contiguous_dp",
              "side_offload")
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
  started = time.perf_counter()
  gdp = gdp_method.place(
      graph, topology, budget_seconds=budget_seconds,
      budget_evaluations=budget_evaluations, policy=policy, samples=samples,
      seed=seed, extracted=extracted, log=log)
  options = {"evaluations": budget_evaluations or (
      None if budget_seconds > 0 else SEARCH_EVALUATIONS),
             "seconds": budget_seconds or None}
  if options["evaluations"] is None:
    options["evaluations"] = 10**9  # the seconds end it
  found = best_of.best_of(
      graph, topology, [(n, {}) for n in CANDIDATES] + [(LOCAL_SEARCH,
                                                         options)],
      seed=seed, given={GDP: (gdp[0], gdp[2], None)},
      label="auto's candidates")
  details = {"winner": found.method, "candidates": found.candidates,
             "skipped": found.skipped, "gdp": gdp[3]}
  if found.repaired:
    details["winner_repaired"] = True
  return AutoResult(placement=found.placement,
                    seconds=time.perf_counter() - started,
                    evaluations=found.evaluations, details=details,
                    priority=found.priority)
