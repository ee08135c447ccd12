"""Does the calibrated simulator rank placements the way the real runtime does?

For each graph (`real_graphs`: two parallel matmul chains, an Inception-
style block, an unrolled 2-layer LSTM training step, a Keras LSTM step with
its time loop; `keras_app_graphs`:
Keras applications' training steps), probe placements over `cpu-workers:2`
(`agreement_placements`: all on one worker, all on the other, round-robin,
random with colocation groups kept whole, contiguous splits of a
breadth-first and a depth-first topological order at several cut points in
both orientations) and the placements the product itself makes
(`agreement_methods`: every one-shot baseline, GDP zero-shot and
fine-tuned, searched on the profiled graph).

Each placement is
* simulated on the calibrated `cpu-workers:2` topology (links and the
  runtime's own costs as `tf-gdp calibrate` measured them) with the op costs
  of the roofline for one local core, scaled by the calibrated device
  speed, and, unless --noprofiled, with the costs `tf-gdp place` uses: the
  graph profiled on a worker (`profiled_costs.profiled_graph`, fresh); for a
  graph with counted while loops, also with those costs but each loop's
  transfers counted once (`loops_once`);
* measured for real on a `CpuWorkerCluster(2)`: --rounds sweeps over all
  placements, each timing --repeats steps; a placement's time is the median
  of its sweeps' medians (the machine is shared: a burst of someone else's
  load then spoils one sweep's value, not the result).

Reported per graph and pooled, over all placements and over the product's
own (":methods"): Spearman rank correlation of predicted vs measured step
times, the median and the worst absolute percentage error, and how many
are within 20%.

Example:
  python -m tf_gdp.bench.agreement_check --json_out=agreement.json
"""

import dataclasses
import json
import os
import platform
import sys
import time

from absl import app
from absl import flags
import numpy as np
from scipy import stats

from tf_gdp import fileio
from tf_gdp.bench import agreement_methods
from tf_gdp.bench import agreement_placements
from tf_gdp.bench import bench_graphs
from tf_gdp.cost import topology as topology_lib
from tf_gdp.runtime import calibrate_runtime
from tf_gdp.runtime import confirmation

_DEVICES = "cpu-workers:2"


def _summary(predicted, measured) -> dict:
  predicted = np.asarray(predicted, np.float64)
  measured = np.asarray([np.nan if m is None else m for m in measured],
                        np.float64)
  ok = np.isfinite(predicted) & np.isfinite(measured)
  predicted, measured = predicted[ok], measured[ok]
  if predicted.size < 3:
    return {"n": int(predicted.size), "spearman": None, "mape_pct": None,
            "worst_pct": None, "within_20pct": None}
  rho = stats.spearmanr(predicted, measured).statistic
  ape = np.abs(predicted - measured) / measured * 100.0
  return {"n": int(predicted.size), "spearman": float(rho),
          "mape_pct": float(np.median(ape)),
          "worst_pct": float(np.max(ape)),
          "within_20pct": int(np.sum(ape <= 20.0)),
          "bias": float(np.median(predicted / measured))}


def other_aggregate(aggregate: str) -> str:
  """The sweeps' aggregate the JSON also summarizes (median <-> min)."""
  return "min" if aggregate == "median" else "median"


def graph_summaries(rows, variants, aggregate: str):
  """(summary, summary of the other aggregate) of one graph's rows.

  Per variant (a key of `variants`, the rows' `<variant>_us`), over all
  rows and over the product's own (`<variant>:methods`).
  """
  other = other_aggregate(aggregate)
  summary = {}
  methods_rows = [r for r in rows if r["placement"].startswith("method:")]
  for variant in variants:
    summary[variant] = _summary([r[f"{variant}_us"] for r in rows],
                                [r["measured_us"] for r in rows])
    if methods_rows:
      summary[variant + ":methods"] = _summary(
          [r[f"{variant}_us"] for r in methods_rows],
          [r["measured_us"] for r in methods_rows])
  summary_other = {
      variant: _summary([r[f"{variant}_us"] for r in rows],
                        [r[f"measured_{other}_us"] for r in rows])
      for variant in variants}
  return summary, summary_other


def pooled_summaries(graphs, aggregate: str):
  """(overall, overall of the other aggregate): every graph's rows pooled."""
  overall, overall_other = {}, {}
  other = other_aggregate(aggregate)
  for key in graphs[0]["summary"]:
    variant, _, subset = key.partition(":")
    rows = [r for g in graphs for r in g["rows"]
            if not subset or r["placement"].startswith("method:")]
    predicted = [r[f"{variant}_us"] for r in rows]
    overall[key] = _summary(predicted, [r["measured_us"] for r in rows])
    overall_other[key] = _summary(
        predicted, [r[f"measured_{other}_us"] for r in rows])
  return overall, overall_other


def measure_sweeps(rows, candidates, rounds: int, measure_one) -> None:
  """Fills each row's `round_medians_us` (and `reasons`) from `rounds` sweeps.

  Rounds sweep all placements in turn, so that a burst of load from other
  processes on this shared machine hits one round, not one placement. One
  placement under several names (all on worker 0 is also what single_device,
  METIS and often GDP return) is measured once: its rows share that
  measurement (`same_as` names the row measured) instead of showing the
  noise between runs. `measure_one(placement)` returns a `MeasureResult`.
  """
  same_as = confirmation.same_placements(candidates)
  by_label = {row["placement"]: row for row in rows}
  for _ in range(rounds):
    for label, placement in candidates.items():
      if same_as[label] != label:
        continue
      row = by_label[label]
      result = measure_one(placement)
      if result.valid:
        row["round_medians_us"].append(result.step_time_us)
      else:
        row["reasons"].append(result.reason)
  for row in rows:
    first = by_label[same_as[row["placement"]]]
    if first is not row:
      row["same_as"] = first["placement"]
      row["round_medians_us"] = list(first["round_medians_us"])
      row["reasons"] = list(first["reasons"])


def run_graph(name: str, cluster, topo, *, repeats: int, warmup: int,
              rounds: int, aggregate: str, num_random: int, profiled: bool,
              compare_rewrites: bool, seed: int,
              methods=agreement_methods.DEFAULT_METHODS,
              gdp_budget_seconds: float = 60.0, log=print) -> dict:
  """All placements of one graph: predictions and measurements."""
  from tf_gdp.cost import simulator  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import profiled_costs  # pylint: disable=g-import-not-at-top

  loaded = bench_graphs.BuiltGraph(name).load(_DEVICES)
  extracted, roofline_graph = loaded.extracted, loaded.graph
  variants = {"roofline": roofline_graph}
  profile_info = None
  if profiled:
    # As `tf-gdp place` prices it: profiled on the target, fresh.
    variants["profiled"], profile_info = profiled_costs.profiled_graph(
        roofline_graph, extracted, topo, use_cache=False, log=log)
    if (variants["profiled"].executions > 1).any():
      # The model that counts each loop's transfers once, side by side.
      variants["loops_once"] = dataclasses.replace(
          variants["profiled"],
          executions=np.ones(roofline_graph.num_nodes, np.int64))
  candidates = agreement_placements.placements(
      roofline_graph, topo.num_devices, num_random=num_random, seed=seed)
  if methods or gdp_budget_seconds >= 0:
    candidates.update(agreement_methods.method_placements(
        variants["profiled" if profiled else "roofline"], topo,
        methods=methods,
        gdp_budget_seconds=gdp_budget_seconds, seed=seed, log=log))
  rows = []
  for label, placement in candidates.items():
    row = {"placement": label,
           "devices": placement.astype(int).tolist(),
           "on_worker1": float(np.mean(placement == 1)),
           "round_medians_us": [], "reasons": []}
    for variant, graph in variants.items():
      sim = simulator.simulate(graph, placement, topo)
      row[f"{variant}_us"] = sim.step_time_us
      row["transfers"] = sim.num_transfers
      row["transfer_mb"] = sim.transfer_bytes / 1e6
    rows.append(row)
  measure_sweeps(rows, candidates, rounds, lambda placement: measure.measure(
      extracted, placement, cluster, topology=topo, warmup=warmup,
      repeats=repeats))
  for row in rows:
    times = row["round_medians_us"]
    row["measured_median_us"] = float(np.median(times)) if times else None
    row["measured_min_us"] = float(np.min(times)) if times else None
    row["measured_us"] = row[f"measured_{aggregate}_us"]
    row["round_spread"] = (float(max(times) / min(times))
                           if len(times) > 1 else None)
    log(f"  {name:<16} {row['placement']:<18} measured "
        f"{_ms(row['measured_us']):>8} ms  roofline "
        f"{_ms(row['roofline_us']):>8} ms"
        + (f"  profiled {_ms(row['profiled_us']):>8} ms" if profiled else "")
        + (f"  ({row['reasons'][0]})" if row["reasons"] else ""))
  summary, summary_other = graph_summaries(rows, variants, aggregate)
  other = other_aggregate(aggregate)
  out = {"graph": name, "nodes": roofline_graph.num_nodes,
         "edges": roofline_graph.num_edges, "rows": rows, "summary": summary,
         f"summary_{other}_of_rounds": summary_other,
         "profile": profile_info,
         "profiled_costs_us": (variants["profiled"].costs["CPU"].tolist()
                               if profiled else None),
         "total_cost_us": {
             variant: float(graph.costs["CPU"].sum())
             for variant, graph in variants.items()}}
  if compare_rewrites:
    single = np.zeros(roofline_graph.num_nodes, np.int64)
    times = {"off": [], "on": []}
    for _ in range(rounds):  # alternately, as the placements
      for rewrites in (False, True):
        result = measure.measure(extracted, single, cluster, topology=topo,
                                 warmup=warmup, repeats=repeats,
                                 graph_rewrites=rewrites)
        if result.valid:
          times["on" if rewrites else "off"].append(result.step_time_us)
    out["rewrites_single_worker_us"] = {
        key: float(np.median(values)) if values else None
        for key, values in times.items()}
  return out


def _ms(us) -> str:
  return "-" if us is None or not np.isfinite(us) else f"{us / 1e3:.2f}"


def run(graph_names, *, repeats: int, warmup: int, rounds: int,
        aggregate: str, num_random: int, profiled: bool, compare_rewrites: bool,
        seed: int, methods=agreement_methods.DEFAULT_METHODS,
        gdp_budget_seconds: float = 60.0) -> dict:
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  topo = topology_lib.get(_DEVICES)
  calibrated = os.path.isfile(topology_lib.calibrated_path(2))
  if not calibrated:
    print("warning: no calibrated cpu-workers:2 topology; run "
          "tf-gdp calibrate --workers=2 first",
          file=sys.stderr)
  start = time.time()
  load_before = os.getloadavg()
  graphs = []
  with workers.CpuWorkerCluster(2) as cluster:
    step_overhead = calibrate_runtime.measure_step_overhead(cluster)
    # What a transfer costs a busy core varies between cluster instances
    # (the calibration takes the median over its own): this instance's
    # figures, for the record beside the calibration's.
    transfer_cpu = calibrate_runtime.median_of_rounds(
        [calibrate_runtime.measure_transfer_cpu(cluster)])
    for name in graph_names:
      graphs.append(run_graph(
          name, cluster, topo, repeats=repeats, warmup=warmup,
          rounds=rounds, aggregate=aggregate, num_random=num_random,
          profiled=profiled, compare_rewrites=compare_rewrites, seed=seed,
          methods=methods,
          gdp_budget_seconds=gdp_budget_seconds))
  overall, overall_other = pooled_summaries(graphs, aggregate)
  other = other_aggregate(aggregate)
  return {
      "benchmark": "agreement_check",
      "command": " ".join(["python -m tf_gdp.bench.agreement_check"] +
                          sys.argv[1:]),
      "date": time.strftime("%Y-%m-%d %H:%M"),
      "topology": {"path": topology_lib.calibrated_path(2) if calibrated
                   else None,
                   "latency_us": topo.latency_us.tolist(),
                   "bandwidth_gbps": topo.bandwidth_gbps.tolist(),
                   "speed": topo.speeds.tolist()},
      "machine": {"python": platform.python_version(),
                  "cpus": os.cpu_count(), "load_before": load_before,
                  "load_after": os.getloadavg()},
      "seconds": time.time() - start,
      "rounds": rounds, "repeats": repeats, "warmup": warmup,
      "step_overhead_us": step_overhead,
      "transfer_cpu_this_cluster": transfer_cpu,
      "runtime": topology_lib.to_document(topo).get("runtime"),
      "graphs": graphs,
      "aggregate": aggregate,
      "overall": overall,
      f"overall_{other}_of_rounds": overall_other,
  }


def format_table(result: dict) -> str:
  """Per graph and pooled, per variant: rho, median and worst error."""
  lines = ["agreement with reality on cpu-workers:2 (simulated vs measured "
           f"step time, {result['aggregate']} of {result['rounds']} sweeps' "
           "medians): Spearman rho, median and worst abs % error, how many "
           "within 20%; ':methods' = the product's own placements only",
           f"{'graph':<20} {'variant':<18} {'n':>4} {'rho':>7} {'MAPE%':>6} "
           f"{'worst%':>7} {'<=20%':>6} {'bias':>6}"]

  def line(label, key, s):
    cell = lambda v, f: "-" if v is None else format(v, f)
    return (f"{label:<20} {key:<18} {s['n']:>4} "
            f"{cell(s['spearman'], '.3f'):>7} {cell(s['mape_pct'], '.1f'):>6}"
            f" {cell(s['worst_pct'], '.1f'):>7} "
            f"{cell(s['within_20pct'], 'd'):>6} "
            f"{cell(s.get('bias'), '.2f'):>6}")

  for g in result["graphs"]:
    for key, s in g["summary"].items():
      lines.append(line(g["graph"], key, s))
  for key, s in result["overall"].items():
    lines.append(line("pooled", key, s))
  rewrites = [(g["graph"], g.get("rewrites_single_worker_us"))
              for g in result["graphs"] if g.get("rewrites_single_worker_us")]
  if rewrites:
    lines.append("single-worker step with Grappler rewrites off / on (ms):")
    for name, both in rewrites:
      lines.append(f"  {name:<16} {_ms(both['off'])} / {_ms(both['on'])}")
  return "\n".join(lines)


def main(argv):
  del argv
  bench_graphs.check_built(_GRAPHS.value)
  result = run(_GRAPHS.value, repeats=_REPEATS.value, warmup=_WARMUP.value,
               rounds=_ROUNDS.value, aggregate=_AGGREGATE.value,
               num_random=_RANDOM.value,
               profiled=_PROFILED.value,
               compare_rewrites=_COMPARE_REWRITES.value, seed=_SEED.value,
               methods=_METHODS.value,
               gdp_budget_seconds=_GDP_BUDGET.value)
  print(format_table(result))
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(result, indent=1))


if __name__ == "__main__":
  # Flags live here, not at module level, so that other code (tests, the CLI,
  # another benchmark) can import this module's functions.
  _GRAPHS = flags.DEFINE_list(
      "graphs", ["matmul_chains", "inception_block", "lstm"],
      "Benchmark graphs to run.")
  _REPEATS = flags.DEFINE_integer("repeats", 5, "Timed steps per placement.",
                                  lower_bound=1)
  _WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed steps per placement.",
                                 lower_bound=0)
  _ROUNDS = flags.DEFINE_integer(
      "rounds", 3, "Sweeps over all placements; a placement's time is the "
      "median of its sweeps' medians.", lower_bound=1)
  _AGGREGATE = flags.DEFINE_enum(
      "aggregate", "median", ["median", "min"],
      "How a placement's sweeps combine: their median, or the least disturbed "
      "(min) one; the JSON has the summary of the other too.")
  _RANDOM = flags.DEFINE_integer(
      "random_placements", 6, "Random group-respecting placements per graph.",
      lower_bound=0)
  _PROFILED = flags.DEFINE_boolean(
      "profiled", True, "Also predict with per-op costs profiled on a worker.")
  _COMPARE_REWRITES = flags.DEFINE_boolean(
      "compare_rewrites", True, "Also time the single-worker placement with "
      "Grappler's rewrites on and off, once per sweep.")
  _SEED = flags.DEFINE_integer("seed", 0, "Seed of the random placements.")
  _METHODS = flags.DEFINE_list(
      "methods", list(agreement_methods.DEFAULT_METHODS),
      "Baselines whose placements (searched on the profiled graph, as "
      "`tf-gdp place` would) are timed beside the probe placements.")
  _GDP_BUDGET = flags.DEFINE_float(
      "gdp_budget_seconds", 60.0, "Also time GDP's zero-shot placement and, "
      "when > 0, the one fine-tuned for this many seconds (negative: no GDP).")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Where to write the JSON.")
  app.run(main)
