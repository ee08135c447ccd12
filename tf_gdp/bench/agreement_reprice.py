"""Prices the placements of an `agreement_check` run again, on the calibration
in use now: the same measurements, judged by another calibration.

Each placement's measured step times stay as the run saved them; it is
simulated anew on the `cpu-workers:2` topology that `tf-gdp calibrate` saved
last (or `--topology`) with the run's own costs: the roofline of the graph
rebuilt from its model code, and the per-op times the run profiled. A
profile is stored multiplied by the speed of the worker it ran on
(`profiled_costs`), so it is rescaled from the run's worker-0 speed to the
new one. What a calibration changes is then told apart from what a fresh
cluster and fresh measurements change (both move the error of a split by
tens of percent, docs/BENCHMARKS.md).

Example:
  python -m tf_gdp.bench.agreement_reprice --json=agreement.json \
      --json_out=repriced.json
"""

import json
import sys

from absl import app
from absl import flags
import numpy as np

from grappler_bridge import errors as grappler_errors

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.bench import agreement_check
from tf_gdp.bench import bench_graphs
from tf_gdp.cost import topology as topology_lib


def reprice(result: dict, topo: topology_lib.Topology, log=print) -> dict:
  """`result` (an `agreement_check` document) with every prediction redone.

  Rows keep their measurements; `<variant>_us` and the summaries are
  recomputed on `topo`. The old predictions stay as `<variant>_before_us`.
  """
  from tf_gdp.cost import simulator  # pylint: disable=g-import-not-at-top
  before_speed = float(result["topology"]["speed"][0])
  graphs = []
  for old in result["graphs"]:
    name = old["graph"]
    if name not in bench_graphs.BUILDERS:
      raise errors.InputError(f"{name}: not a graph agreement_check builds")
    log(f"  rebuilding {name}")
    roofline = bench_graphs.BuiltGraph(name).load(topo).graph
    if roofline.num_nodes != old["nodes"]:
      raise errors.InputError(
          f"{name}: the model code now builds {roofline.num_nodes} ops, the "
          f"run had {old['nodes']}")
    variants = {"roofline": roofline}
    if old.get("profiled_costs_us") is not None:
      costs = (np.asarray(old["profiled_costs_us"], np.float64)
               / before_speed * float(topo.speeds[0]))
      variants["profiled"] = roofline.with_costs({"CPU": costs})
    rows = []
    for old_row in old["rows"]:
      row = dict(old_row)
      placement = np.asarray(row["devices"], np.int64)
      for variant, graph in variants.items():
        row[f"{variant}_before_us"] = old_row.get(f"{variant}_us")
        row[f"{variant}_us"] = simulator.simulate(graph, placement,
                                                  topo).step_time_us
      rows.append(row)
    summary, summary_other = agreement_check.graph_summaries(
        rows, variants, result["aggregate"])
    other = agreement_check.other_aggregate(result["aggregate"])
    graphs.append({**old, "rows": rows, "summary": summary,
                   f"summary_{other}_of_rounds": summary_other})
  overall, overall_other = agreement_check.pooled_summaries(
      graphs, result["aggregate"])
  other = agreement_check.other_aggregate(result["aggregate"])
  return {**result, "graphs": graphs, "overall": overall,
          f"overall_{other}_of_rounds": overall_other,
          "repriced_on": {"topology": topo.name,
                          "runtime": topology_lib.to_document(topo).get(
                              "runtime"),
                          "speed": topo.speeds.tolist(),
                          "latency_us": topo.latency_us.tolist(),
                          "bandwidth_gbps": topo.bandwidth_gbps.tolist()}}


def main(argv):
  del argv
  try:
    with open(_JSON.value, encoding="utf-8") as f:
      try:
        result = json.load(f)
      except ValueError as e:
        raise errors.InputError(f"{_JSON.value}: not JSON ({e})") from e
    if (not isinstance(result, dict)
        or result.get("benchmark") != "agreement_check"):
      raise errors.InputError(f"{_JSON.value}: not an agreement_check result")
    topo = topology_lib.get(_TOPOLOGY.value)
    repriced = reprice(result, topo)
  except (OSError, ValueError, KeyError, errors.InputError) as e:
    sys.exit(f"error: {grappler_errors.first_line(e)}")
  print(agreement_check.format_table(repriced))
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(repriced, indent=1))


if __name__ == "__main__":
  _JSON = flags.DEFINE_string("json", None, "An agreement_check JSON result.",
                              required=True)
  _TOPOLOGY = flags.DEFINE_string(
      "topology", "cpu-workers:2", "The topology to price on (a name or a "
      "topology file; cpu-workers:2 is the saved calibration).")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Where to write the JSON.")
  app.run(main)
