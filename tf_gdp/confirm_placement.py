"""The placement handed to the user is confirmed on the target when it is here.

`place` and `gdp.place` search with the simulator; before they return, a
placement for devices that can be timed (a `cpu-workers:K` cluster, this
process's GPUs) is measured against the best compared baselines and the
single-device placement (`runtime.confirmation`), and the best measured
median is returned: never one that measures slower than one device. The
report keeps both figures side by side (`details["confirmation"]`) and, if a
baseline won, which method was asked for. For devices that cannot be timed
the report says the times are predicted only.
"""

import dataclasses
from typing import Callable

from tf_gdp import placing
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph
from tf_gdp.runtime import confirmation

SINGLE_DEVICE = "single_device"
# Compared baselines measured beside the method: the best ones by prediction.
BASELINE_CANDIDATES = 2


def confirm(result: placing.PlaceResult, graph: op_graph.OpGraph,
            topology: topology_lib.Topology, extracted, *, seed: int = 0,
            rounds: int = confirmation.DEFAULT_ROUNDS,
            allow_side_effects: bool = False,
            log: Callable[[str], None] = lambda line: None
            ) -> placing.PlaceResult:
  """`result`, or the candidate that measured best, with the measurements.

  A graph with ops that reach outside the step (`grappler_bridge.
  side_effects`) is not run without `allow_side_effects`: predicted only.
  """
  target = confirmation.target_for(topology)
  if extracted is None:
    return _noted(result, {"measured": False,
                           "note": "an op-graph file has no TensorFlow graph "
                                   "to run: predicted only"})
  if target is None:
    note = (confirmation.PREDICTED_ONLY
            if topology.name.startswith(topology_lib.LOCAL_CPUS)
            else f"{topology.name} is not attached here: predicted only")
    return _noted(result, {"measured": False, "note": note})
  from grappler_bridge import side_effects  # pylint: disable=g-import-not-at-top
  outside = side_effects.find(extracted.graph_def)
  if outside and not allow_side_effects:
    return _noted(result, {
        "measured": False,
        "note": "not measured: it has ops that reach outside the step ("
                f"{', '.join(op for _, op in outside[:3])}); "
                "--allow_side_effects measures it: predicted only"})
  found = {result.method: result}
  ranked = sorted(
      (entry["step_time_us"], name) for name, entry in result.compared.items()
      if entry.get("valid") and name not in (result.method, SINGLE_DEVICE))
  for _, name in ranked[:BASELINE_CANDIDATES]:
    found[name] = placing.place(graph, topology, name, seed=seed, compare=())
  if SINGLE_DEVICE not in found:
    found[SINGLE_DEVICE] = placing.place(graph, topology, SINGLE_DEVICE,
                                         seed=seed, compare=())
  candidates = [confirmation.Candidate(name, r.placement, r.step_time_us)
                for name, r in found.items()]
  log(f"  confirming on {target}: {', '.join(found)} "
      f"({rounds} interleaved rounds)")
  measured = confirmation.confirm(extracted, candidates, target,
                                  topology=topology, rounds=rounds,
                                  allow_side_effects=allow_side_effects,
                                  log=log)
  chosen = found[measured.chosen]
  log("  measured medians: " + ", ".join(
      f"{row['name']} {row['measured_us'] / 1e3:.2f} ms (predicted "
      f"{row['predicted_us'] / 1e3:.2f})" if row["valid"] else
      f"{row['name']} failed" for row in measured.rows)
      + f"; kept {measured.chosen}")
  details = {"measured": True, "requested_method": result.method,
             **measured.report()}
  return _noted(dataclasses.replace(chosen, compared=result.compared), details)


def _noted(result: placing.PlaceResult, details: dict) -> placing.PlaceResult:
  return dataclasses.replace(
      result, details={**result.details, "confirmation": details})
