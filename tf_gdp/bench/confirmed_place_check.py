"""Is what `tf-gdp place --method=gdp` returns on `cpu-workers:2` fast, measured?

For each graph (`keras_app_graphs`: Keras applications' training steps, not
in the zoo), each repeat runs the whole comparison again:

1. GDP as `tf-gdp place --devices=cpu-workers:2 --method=gdp
   --budget_seconds=B` runs it: the graph priced by its profile on the
   cluster (`profiled_costs`, cached after the first repeat), zero-shot plus
   B seconds of fine-tuning, then measured confirmation against the best
   compared baselines and one device (`confirm_placement`), which may hand
   back one of those instead;
2. every one-shot baseline's placement, searched on the same profiled graph;
3. all of them measured on one cluster, --rounds interleaved sweeps of
   --repeats steps each; a placement's time is the median of its sweeps'
   medians. Methods that return the very same placement share one
   measurement (`distinct_placements`), so GDP's result that is one
   device's placement measures exactly as one device.

Reported per graph: the median over repeats of GDP's measured time over
one device's and over the best measured baseline's, and what confirmation
kept each time. The targets: GDP no slower than one device on every graph,
and at or below the best baseline on at least two of three.

Example:
  python -m tf_gdp.bench.confirmed_place_check --json_out=confirmed.json
"""

import json
import os
import platform
import sys
import time

from absl import app
from absl import flags
import numpy as np

from tf_gdp import fileio
from tf_gdp.bench import agreement_methods
from tf_gdp.bench import keras_app_graphs

_DEVICES = "cpu-workers:2"


def _place_like_the_cli(extracted, graph, topology, budget_seconds, seed, log):
  """GDP's result exactly as `tf-gdp place` makes it (profile, search,
  confirmation); returns (placed graph, PlaceResult)."""
  from tf_gdp import confirm_placement  # pylint: disable=g-import-not-at-top
  from tf_gdp import placing  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import profiled_costs  # pylint: disable=g-import-not-at-top
  graph, _ = profiled_costs.profiled_graph(graph, extracted, topology, log=log)
  result = placing.place(graph, topology, placing.GDP,
                         budget_seconds=budget_seconds, seed=seed,
                         extracted=extracted, log=log)
  result = confirm_placement.confirm(result, graph, topology, extracted,
                                     seed=seed, log=log)
  return graph, result


def distinct_placements(candidates) -> dict:
  """Label -> the first label with the very same placement (itself if none).

  Methods often agree (GDP's confirmed result is one device's placement,
  METIS keeps a small graph whole): one placement is measured once per
  sweep and its time shared, so two names for it never differ by noise.
  """
  from tf_gdp.runtime import confirmation  # pylint: disable=g-import-not-at-top
  return confirmation.same_placements(candidates)


def run_graph(name: str, *, repeats: int, budget_seconds: float,
              rounds: int, steps: int, warmup: int, methods,
              log=print) -> dict:
  """Every repeat of the comparison on one graph."""
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  from tf_gdp import graph_specs  # pylint: disable=g-import-not-at-top
  from tf_gdp.cost import topology as topology_lib  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  topology = topology_lib.get(_DEVICES)
  extracted = extract.from_function(keras_app_graphs.BUILDERS[name]())
  graph = graph_specs.op_graph_from_extracted(extracted, name=name,
                                              devices=topology)
  runs = []
  for repeat in range(repeats):
    started = time.perf_counter()
    priced, result = _place_like_the_cli(extracted, graph, topology,
                                         budget_seconds, repeat, log)
    place_seconds = time.perf_counter() - started
    candidates = {"gdp": np.asarray(result.placement, np.int64)}
    for label, placement in agreement_methods.method_placements(
        priced, topology, methods=methods, gdp_budget_seconds=-1.0,
        seed=repeat, log=log).items():
      candidates[label.partition(":")[2]] = placement
    same_as = distinct_placements(candidates)
    distinct = [label for label in candidates if same_as[label] == label]
    medians = {label: [] for label in distinct}
    with workers.CpuWorkerCluster(2) as cluster:
      for sweep in range(rounds):
        labels = distinct[sweep % len(distinct):] + distinct[
            :sweep % len(distinct)]
        for label in labels:
          measured = measure.measure(extracted, candidates[label], cluster,
                                     topology=topology, warmup=warmup,
                                     repeats=steps)
          if measured.valid:
            medians[label].append(measured.step_time_us)
    times = {label: (float(np.median(medians[same_as[label]]))
                     if medians[same_as[label]] else None)
             for label in candidates}
    baselines = {k: v for k, v in times.items()
                 if k != "gdp" and v is not None}
    best = min(baselines, key=baselines.get)
    confirmation = result.details.get("confirmation", {})
    run = {"repeat": repeat, "place_seconds": place_seconds,
           "kept": confirmation.get("chosen"),
           "same_placement_as": {k: v for k, v in same_as.items() if k != v},
           "confirmation": confirmation,
           "measured_us": times, "best_baseline": best,
           "vs_single_device": times["gdp"] / times["single_device"],
           "vs_best_baseline": times["gdp"] / baselines[best]}
    log(f"  {name} repeat {repeat}: gdp kept {run['kept']}, "
        f"{times['gdp'] / 1e3:.1f} ms; one device "
        f"{times['single_device'] / 1e3:.1f} ms; best baseline {best} "
        f"{baselines[best] / 1e3:.1f} ms")
    runs.append(run)
  return {"graph": name, "about": keras_app_graphs.describe(name),
          "nodes": graph.num_nodes, "runs": runs,
          "median_vs_single_device": float(np.median(
              [r["vs_single_device"] for r in runs])),
          "median_vs_best_baseline": float(np.median(
              [r["vs_best_baseline"] for r in runs]))}


def format_table(result: dict) -> str:
  lines = [f"gdp on {_DEVICES} as `tf-gdp place` returns it "
           f"(budget {result['budget_seconds']:g} s, confirmation on), "
           f"measured; median of {result['repeats']} repeats",
           f"{'graph':<20} {'nodes':>6} {'gdp/one device':>15} "
           f"{'gdp/best baseline':>18}  kept"]
  for g in result["graphs"]:
    kept = ", ".join(str(r["kept"]) for r in g["runs"])
    lines.append(f"{g['graph']:<20} {g['nodes']:>6} "
                 f"{g['median_vs_single_device']:>15.3f} "
                 f"{g['median_vs_best_baseline']:>18.3f}  {kept}")
  return "\n".join(lines)


def main(argv):
  del argv
  unknown = sorted(set(_GRAPHS.value) - set(keras_app_graphs.BUILDERS))
  if unknown:
    sys.exit(f"error: unknown graph(s) {unknown}; known: "
             f"{sorted(keras_app_graphs.BUILDERS)}")
  start = time.time()
  load_before = os.getloadavg()
  graphs = [run_graph(name, repeats=_REPEATS.value,
                      budget_seconds=_BUDGET.value, rounds=_ROUNDS.value,
                      steps=_STEPS.value, warmup=_WARMUP.value,
                      methods=_METHODS.value)
            for name in _GRAPHS.value]
  result = {"benchmark": "confirmed_place_check",
            "command": " ".join(["python -m tf_gdp.bench.confirmed_place_check"]
                                + sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "budget_seconds": _BUDGET.value, "repeats": _REPEATS.value,
            "rounds": _ROUNDS.value, "steps": _STEPS.value,
            "machine": {"python": platform.python_version(),
                        "cpus": os.cpu_count(), "load_before": load_before,
                        "load_after": os.getloadavg()},
            "seconds": time.time() - start, "graphs": graphs}
  print(format_table(result))
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(result, indent=1))


if __name__ == "__main__":
  _GRAPHS = flags.DEFINE_list("graphs", list(keras_app_graphs.BUILDERS),
                              "Keras application graphs to place.")
  _REPEATS = flags.DEFINE_integer("repeats", 3, "Repeats of the whole "
                                  "comparison per graph.", lower_bound=1)
  _BUDGET = flags.DEFINE_float("budget_seconds", 60.0,
                               "GDP's fine-tuning budget, as `tf-gdp place`'s.",
                               lower_bound=0.0)
  _ROUNDS = flags.DEFINE_integer("rounds", 3, "Interleaved measuring sweeps.",
                                 lower_bound=1)
  _STEPS = flags.DEFINE_integer("steps", 5, "Timed steps per placement and "
                                "sweep.", lower_bound=1)
  _WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed steps first.",
                                 lower_bound=0)
  _METHODS = flags.DEFINE_list(
      "methods", list(agreement_methods.DEFAULT_METHODS),
      "Baselines measured beside GDP's result.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Where to write the JSON.")
  app.run(main)
