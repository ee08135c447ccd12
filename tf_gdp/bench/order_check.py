"""How much of a comparison is the execution order, not the placement.

Every comparison judges GDP's placements in the simulator's default order
(TensorFlow's executor's), while the best classic baseline may be a list
scheduler judged in its own planned order (`:planned`), which the executor
does not follow either. This check prices, on each graph and topology, every
one-shot classic method's placement and the shipped policy's zero-shot
placement (the greedy one and `--samples` samples, the best) in up to three
orders: the default; the method's own plan (m-ETF, m-SCT, HEFT); and the
placement's critical-path order (`baselines.critical_path_order`). A
placement counts in an order only where it fits memory in that order.

GDP zero-shot over the best baseline, under four judges:

* `asymmetric`: baselines in the default or their own plan, GDP in the
  default (what `generalization_check` reports);
* `executor`: every placement in the default order;
* `gdp_planned`: as `asymmetric`, GDP also in its critical-path order
  (GDP gets a plan as the list schedulers do);
* `all_critical_path`: every placement also in its critical-path order.

Example:
  python -m tf_gdp.bench.order_check --graphs=corpus:eval \
      --devices=p100x4,p100x3 --json_out=order.json
"""

import math
import time
from typing import Optional, Sequence

from absl import app
from absl import flags
import numpy as np

from tf_gdp import errors
from tf_gdp import gdp_method
from tf_gdp.baselines import critical_path_order
from tf_gdp.bench import bench_graphs
from tf_gdp.bench import budget_check
from tf_gdp.bench import harness
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib

JUDGES = ("asymmetric", "executor", "gdp_planned", "all_critical_path")
# The orders a placement is priced in; which judge sees which, per side.
_BASELINE_ORDERS = {"asymmetric": ("default", "planned"),
                    "executor": ("default",),
                    "gdp_planned": ("default", "planned"),
                    "all_critical_path": ("default", "planned",
                                          "critical_path")}
_GDP_ORDERS = {"asymmetric": ("default",), "executor": ("default",),
               "gdp_planned": ("default", "critical_path"),
               "all_critical_path": ("default", "critical_path")}
WITHIN = 1.05


def priced(graph, topology: topology_lib.Topology, placement: np.ndarray,
           plan: Optional[np.ndarray] = None) -> dict:
  """order -> step time us of `placement` in each order it fits memory in."""
  times = {}
  runs = {"default": lambda: simulator.simulate(graph, placement, topology),
          "critical_path": lambda: critical_path_order.simulate(
              graph, topology, placement)}
  if plan is not None:
    runs["planned"] = lambda: simulator.simulate(graph, placement, topology,
                                                 priority=plan)
  for order, run in runs.items():
    result = run()
    if not simulator.memory_problems(result.peak_memory_bytes, topology):
      times[order] = float(result.step_time_us)
  return times


def check_graph(loaded, label: str, devices: str, *, policy: str,
                samples: int, seed: int,
                methods: Sequence[str] = budget_check.ONE_SHOT_METHODS
                ) -> dict:
  """One graph on one topology: every placement priced in every order.

  The baselines' placements are the ones `generalization_check` judges
  (`harness.bench_graph`: a placement over memory is made valid first).
  """
  from tf_gdp.rl import zero_shot  # pylint: disable=g-import-not-at-top
  graph, topology = loaded.graph, topology_lib.get(devices)
  found = {}
  harness.bench_graph(loaded, label, devices, methods, seed=seed,
                      placements=found)
  baselines = {method: priced(graph, topology, placement, plan)
               for method, (placement, plan) in found.items()}
  shot = zero_shot.zeroshot(policy, graph, topology, samples=samples,
                            seed=seed)
  gdp = priced(graph, topology, shot.placement)
  ratios = {}
  for judge in JUDGES:
    best = min((t for times in baselines.values()
                for order, t in times.items()
                if order in _BASELINE_ORDERS[judge]), default=math.inf)
    own = min((t for order, t in gdp.items() if order in _GDP_ORDERS[judge]),
              default=math.inf)
    ratios[judge] = own / best if math.isfinite(best) and math.isfinite(
        own) else None
  return {"graph": label, "devices": devices, "nodes": graph.num_nodes,
          "baselines": baselines, "gdp_zeroshot": gdp, "ratios": ratios}


def summary(results: Sequence[dict]) -> dict:
  """Per topology and judge: pairs within 5%, geometric mean, best methods."""
  out = {}
  for devices in sorted({r["devices"] for r in results}):
    rows = [r for r in results if r["devices"] == devices]
    out[devices] = {}
    for judge in JUDGES:
      ratios = [r["ratios"][judge] for r in rows]
      known = [x for x in ratios if x is not None]
      out[devices][judge] = {
          "graphs": len(rows),
          "within_5_percent": sum(x <= WITHIN for x in known),
          "geomean": float(np.exp(np.mean(np.log(known)))) if known else None}
  return out


def format_table(results: Sequence[dict]) -> str:
  lines = ["| graph | devices | " + " | ".join(JUDGES) + " |",
           "|---|---|" + "---|" * len(JUDGES)]
  for r in results:
    lines.append(f"| {r['graph']} | {r['devices']} | " + " | ".join(
        "-" if r["ratios"][j] is None else f"{r['ratios'][j]:.3f}"
        for j in JUDGES) + " |")
  for devices, judges in summary(results).items():
    for judge, s in judges.items():
      mean = "-" if s["geomean"] is None else f"{s['geomean']:.3f}"
      lines.append(f"{devices} {judge}: GDP zero-shot within 5% of the best "
                   f"baseline on {s['within_5_percent']}/{s['graphs']}, "
                   f"geometric mean {mean}")
  return "\n".join(lines)


def main(argv):
  del argv
  from tf_gdp.rl import cli_lib  # pylint: disable=g-import-not-at-top
  cli_lib.quiet_tensorflow_logs()
  try:
    sources = bench_graphs.parse(_GRAPHS.value)
  except errors.InputError as e:
    raise app.UsageError(str(e)) from e
  started = time.time()
  results = []
  for source in sources:
    for devices in _DEVICES.value:
      harness.stderr_progress(f"{source.label} on {devices} (elapsed "
                              f"{time.time() - started:.0f} s)")
      results.append(check_graph(
          source.load(devices), source.label, devices,
          policy=_POLICY.value or gdp_method.PRETRAINED_POLICY,
          samples=_SAMPLES.value, seed=_SEED.value))
  print(format_table(results))
  harness.finish_run("order_check", {
      "settings": {"graphs": _GRAPHS.value, "devices": _DEVICES.value,
                   "samples": _SAMPLES.value, "seed": _SEED.value,
                   "policy": _POLICY.value or "shipped"},
      "graphs": results, "summary": summary(results)}, started,
                     _JSON_OUT.value)


if __name__ == "__main__":
  _GRAPHS = flags.DEFINE_string("graphs", "corpus:eval",
                                bench_graphs.GRAPHS_HELP)
  _DEVICES = flags.DEFINE_list("devices", ["p100x4", "p100x3"], "Topologies.")
  _POLICY = flags.DEFINE_string("policy", None, "A saved policy (default: "
                                "the shipped one).")
  _SAMPLES = flags.DEFINE_integer("samples", 16, "Zero-shot samples besides "
                                  "the greedy placement.")
  _SEED = flags.DEFINE_integer("seed", 0, "Seeds sampling and randomized "
                               "baselines.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Write results here.")
  app.run(main)
