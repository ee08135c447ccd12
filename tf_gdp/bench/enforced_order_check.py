"""Does an execution order's predicted gain survive TensorFlow's runtime?

The simulator prices a placement in the executor's default order, in a list
scheduler's own plan (`:planned`) and in the placement's critical-path order
(`baselines.critical_path_order`), and the planned orders often look much
faster. TF's executor follows none of them; the one way to impose an order
is a control-dependency chain per device (`runtime.enforced_order`). This
check places each graph with each method on the calibrated `cpu-workers:2`
(costs profiled on a worker, as `tf-gdp place` prices them; METIS cuts into
as many parts as there are devices) and, per placement, measures:

* `default`: the placement as is, in the executor's own order;
* `critical_path`: chained in the order of its simulated critical-path
  schedule;
* `planned`: chained in the method's own plan (m-ETF, m-SCT, HEFT);
* `default_chained`: chained in the simulator's default-order schedule, a
  control: it predicts no change, so what it measures is the price of the
  chains themselves.

Each order's predicted and measured step time is divided by the same
placement's default-order time. Rounds sweep every variant in turn (the
machine is shared), a variant's time is the median of its rounds' medians.

Example:
  python -m tf_gdp.bench.enforced_order_check \
      --graphs=keras_mobilenet_v2,keras_resnet50,keras_densenet121 \
      --json_out=enforced_order.json
"""

import json
import os
import sys
import time

from absl import app
from absl import flags
import numpy as np

from tf_gdp import fileio
from tf_gdp.bench import bench_graphs

_DEVICES = "cpu-workers:2"
ORDERS = ("critical_path", "planned", "default_chained")


def _schedules(graph, topo, result):
  """order -> the simulated run (with its schedule) the order comes from."""
  from tf_gdp.baselines import critical_path_order  # pylint: disable=g-import-not-at-top
  from tf_gdp.cost import simulator  # pylint: disable=g-import-not-at-top
  placement = result.placement
  priorities = {
      "critical_path": critical_path_order.priority(graph, topo, placement),
      "planned": result.priority, "default_chained": None}
  return {order: simulator.simulate(graph, placement, topo, priority=priority,
                                    record_schedule=True)
          for order, priority in priorities.items()
          if order != "planned" or priority is not None}


def graph_variants(name: str, topo, methods, *, seed: int, log=print):
  """(graph info, variants): every (method, order) to measure on one graph.

  A variant is a dict with `method`, `order`, the `extracted` step it runs,
  its `placement` and its `predicted_us`. Methods that fail or put every op
  on one device have nothing to order and are left out (logged).
  """
  from tf_gdp.baselines import registry  # pylint: disable=g-import-not-at-top
  from tf_gdp.cost import simulator  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import enforced_order  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import profiled_costs  # pylint: disable=g-import-not-at-top
  loaded = bench_graphs.BuiltGraph(name).load(_DEVICES)
  extracted = loaded.extracted
  graph, _ = profiled_costs.profiled_graph(loaded.graph, extracted, topo,
                                           use_cache=False, log=log)
  single = np.zeros(graph.num_nodes, np.int64)
  variants = [{"method": "single_device", "order": "default",
               "extracted": extracted, "placement": single,
               "predicted_us": simulator.simulate(graph, single,
                                                  topo).step_time_us}]
  for method in methods:
    options = {"num_parts": topo.num_devices} if method == "metis" else {}
    try:
      result = registry.run(method, graph, topo, seed=seed, **options)
    except Exception as error:  # pylint: disable=broad-except
      log(f"  {name} / {method}: no placement ({error})")
      continue
    placement = np.asarray(result.placement, np.int64)
    if (placement == placement[0]).all():
      log(f"  {name} / {method}: one device, no order to enforce")
      continue
    variants.append({"method": method, "order": "default",
                     "extracted": extracted, "placement": placement,
                     "predicted_us": simulator.simulate(
                         graph, placement, topo).step_time_us})
    for order, sim in _schedules(graph, topo, result).items():
      variants.append({
          "method": method, "order": order, "placement": placement,
          "extracted": enforced_order.ordered(extracted, graph, placement,
                                              sim.schedule),
          "predicted_us": sim.step_time_us})
  return {"graph": name, "nodes": graph.num_nodes}, variants


def measure_rounds(variants, cluster, topo, *, rounds: int, repeats: int,
                   warmup: int) -> None:
  """Fills each variant's `round_medians_us` and `reasons`, in sweeps."""
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  for variant in variants:
    variant["round_medians_us"], variant["reasons"] = [], []
  for _ in range(rounds):
    for variant in variants:
      result = measure.measure(variant["extracted"], variant["placement"],
                               cluster, topology=topo, warmup=warmup,
                               repeats=repeats)
      if result.valid:
        variant["round_medians_us"].append(result.step_time_us)
      else:
        variant["reasons"].append(result.reason)


def rows_of(variants) -> list:
  """JSON rows; each ordered variant also divided by its default order."""
  rows = []
  default = {}
  for variant in variants:
    times = variant["round_medians_us"]
    row = {key: variant[key] for key in ("method", "order", "predicted_us",
                                         "round_medians_us", "reasons")}
    row["measured_us"] = float(np.median(times)) if times else None
    if variant["order"] == "default":
      default[variant["method"]] = row
    else:
      base = default[variant["method"]]
      row["predicted_ratio"] = row["predicted_us"] / base["predicted_us"]
      row["measured_ratio"] = (
          row["measured_us"] / base["measured_us"]
          if row["measured_us"] and base["measured_us"] else None)
    rows.append(row)
  return rows


def _over_chained(graph: dict, row: dict):
  """A chained order's measured time over the control's (the same placement
  chained in the default order): the order's effect without the chains'."""
  control = [r for r in graph["rows"] if r["method"] == row["method"]
             and r["order"] == "default_chained"]
  if not control or not control[0]["measured_us"] or not row["measured_us"]:
    return None
  return row["measured_us"] / control[0]["measured_us"]


def summarize(graphs) -> dict:
  """Per order over every graph and method: median predicted and measured
  ratio to the default order, how often the measured one is below 1, and
  the measured ratio to the chained control."""
  summary = {}
  for order in ORDERS:
    pairs = [(g, r) for g in graphs for r in g["rows"]
             if r["order"] == order and r.get("measured_ratio")]
    if not pairs:
      continue
    predicted = [r["predicted_ratio"] for _, r in pairs]
    measured = [r["measured_ratio"] for _, r in pairs]
    summary[order] = {
        "n": len(pairs), "predicted_median": float(np.median(predicted)),
        "predicted_range": [float(min(predicted)), float(max(predicted))],
        "measured_median": float(np.median(measured)),
        "measured_range": [float(min(measured)), float(max(measured))],
        "measured_faster": int(sum(m < 1.0 for m in measured))}
    over_chained = [x for x in (_over_chained(g, r) for g, r in pairs)
                    if x is not None]
    if order != "default_chained" and over_chained:
      summary[order]["over_chained_median"] = float(np.median(over_chained))
      summary[order]["over_chained_faster"] = int(
          sum(x < 1.0 for x in over_chained))
  return summary


def run(graph_names, methods, *, rounds: int, repeats: int, warmup: int,
        seed: int, log=print) -> dict:
  from tf_gdp.cost import topology as topology_lib  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  topo = topology_lib.get(_DEVICES)
  if not os.path.isfile(topology_lib.calibrated_path(2)):
    print("warning: no calibrated cpu-workers:2 topology; run "
          "tf-gdp calibrate --workers=2 first", file=sys.stderr)
  start, load_before = time.time(), os.getloadavg()
  graphs = []
  with workers.CpuWorkerCluster(2) as cluster:
    for name in graph_names:
      info, variants = graph_variants(name, topo, methods, seed=seed, log=log)
      measure_rounds(variants, cluster, topo, rounds=rounds, repeats=repeats,
                     warmup=warmup)
      info["rows"] = rows_of(variants)
      graphs.append(info)
      log(format_graph(info))
  return {"benchmark": "enforced_order_check",
          "command": " ".join(["python -m tf_gdp.bench.enforced_order_check"]
                              + sys.argv[1:]),
          "date": time.strftime("%Y-%m-%d %H:%M"),
          "seconds": time.time() - start,
          "load_before": load_before, "load_after": os.getloadavg(),
          "rounds": rounds, "repeats": repeats, "warmup": warmup,
          "graphs": graphs, "summary": summarize(graphs)}


def _ms(us) -> str:
  return "-" if us is None else f"{us / 1e3:.2f}"


def _ratio(value) -> str:
  return "-" if value is None else f"{value:.3f}"


def format_graph(graph: dict) -> str:
  lines = [f"{graph['graph']} ({graph['nodes']} ops): ms predicted / measured;"
           " ordered variants also / default order",
           f"  {'method':<14} {'order':<16} {'pred':>8} {'meas':>8} "
           f"{'pred/dflt':>9} {'meas/dflt':>9}"]
  for row in graph["rows"]:
    lines.append(
        f"  {row['method']:<14} {row['order']:<16} "
        f"{_ms(row['predicted_us']):>8} {_ms(row['measured_us']):>8} "
        f"{_ratio(row.get('predicted_ratio')):>9} "
        f"{_ratio(row.get('measured_ratio')):>9}"
        + (f"  ({row['reasons'][0][:80]})" if row["reasons"] else ""))
  return "\n".join(lines)


def format_summary(summary: dict) -> str:
  lines = ["order over default order, every graph and method: median "
           "(range); measured faster than the default; measured over the "
           "chained control (median, faster)",
           f"{'order':<16} {'n':>3} {'predicted':>22} {'measured':>22} "
           f"{'faster':>7} {'/ chained':>16}"]
  for order, s in summary.items():
    cell = lambda median, span: (f"{median:.3f} ({span[0]:.2f}-"
                                 f"{span[1]:.2f})")
    chained = (f"{s['over_chained_median']:.3f} {s['over_chained_faster']:>3}"
               f"/{s['n']}" if "over_chained_median" in s else "-")
    lines.append(
        f"{order:<16} {s['n']:>3} "
        f"{cell(s['predicted_median'], s['predicted_range']):>22} "
        f"{cell(s['measured_median'], s['measured_range']):>22} "
        f"{s['measured_faster']:>4}/{s['n']} {chained:>16}")
  return "\n".join(lines)


def main(argv):
  del argv
  bench_graphs.check_built(_GRAPHS.value)
  from tf_gdp.bench import harness  # pylint: disable=g-import-not-at-top
  methods = harness.parse_methods(",".join(_METHODS.value))
  result = run(_GRAPHS.value, methods, rounds=_ROUNDS.value,
               repeats=_REPEATS.value, warmup=_WARMUP.value, seed=_SEED.value)
  print(format_summary(result["summary"]))
  print(f"total time {result['seconds']:.0f} s")
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(result, indent=1))


if __name__ == "__main__":
  _GRAPHS = flags.DEFINE_list(
      "graphs", ["keras_mobilenet_v2", "keras_resnet50", "keras_densenet121"],
      "Benchmark graphs (training steps built by code) to run.")
  _METHODS = flags.DEFINE_list(
      "methods", ["m_etf", "m_sct", "heft", "metis", "m_topo"],
      "Methods whose placements are ordered; METIS cuts into as many parts "
      "as there are devices.")
  _ROUNDS = flags.DEFINE_integer("rounds", 3, "Sweeps over all variants.",
                                 lower_bound=1)
  _REPEATS = flags.DEFINE_integer("repeats", 10, "Timed steps per variant "
                                  "and round.", lower_bound=1)
  _WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed steps per variant "
                                 "and round.", lower_bound=0)
  _SEED = flags.DEFINE_integer("seed", 0, "The methods' seed.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Where to write the JSON.")
  app.run(main)
