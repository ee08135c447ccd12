"""Simulator vs Grappler's VirtualCluster, side by side on real zoo graphs.

Two questions, answered in one run on the same graphs, topology and costs:

* speed: how much faster is one `simulate` call than one
  `Cluster.MeasureCosts` call on the same placement (median over placements);
* compute side: on single-device placements, how close are the simulator's
  step time and Grappler's estimate (Grappler ignores cross-device transfers
  in TF 2.21, so multi-device rows show its times only for reference).

  python -m tf_gdp.bench.grappler_check --json_out=grappler_check.json
"""

import json
import statistics
import time

from absl import app
from absl import flags
import numpy as np

from tf_gdp import fileio
from tf_gdp import graph_specs
from tf_gdp.cost import simulator
from tf_gdp.cost import topology

_MODELS = flags.DEFINE_list("models", ["inception_v3", "gnmt2"], "Zoo models.")
_DEVICES = flags.DEFINE_string("devices", "p100x4", "Topology preset.")
_RANDOM = flags.DEFINE_integer("random_placements", 5, "Random placements per graph.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Simulator timing repeats per placement.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random placements.")
_JSON_OUT = flags.DEFINE_string("json_out", None, "Where to write the results.")


def placements(graph, topo, num_random: int, seed: int) -> dict:
  """Named placements (int device per node) that keep colocation groups whole."""
  gpus = topo.devices_of_kind("GPU") or list(range(topo.num_devices))
  cpus = topo.devices_of_kind("CPU")
  groups = graph.group_ids
  num_groups = int(groups.max()) + 1
  named = {f"single {topo.devices[gpus[0]].kind}:0": np.full(graph.num_nodes, gpus[0])}
  if cpus:
    named["single CPU"] = np.full(graph.num_nodes, cpus[0])
  named["round-robin GPUs"] = np.asarray(gpus)[groups % len(gpus)]
  rng = np.random.default_rng(seed)
  for k in range(num_random):
    named[f"random GPUs #{k}"] = rng.choice(gpus, size=num_groups)[groups]
  return {name: p.astype(np.int32) for name, p in named.items()}


def compare(model: str, devices: str, num_random: int, repeats: int, seed: int):
  """Rows of the comparison for one zoo model."""
  from grappler_bridge import grappler_estimates  # pylint: disable=g-import-not-at-top
  from grappler_bridge import hardware  # pylint: disable=g-import-not-at-top
  loaded = graph_specs.load_model(model, devices=devices, cross_check=True)
  graph, extracted = loaded.graph, loaded.extracted
  topo = topology.get(devices)
  cluster = [(d.name, hardware.get_spec(topo.hardware[d.kind])) for d in topo.devices]
  simulator.simulate(graph, np.zeros(graph.num_nodes, np.int32), topo)  # compile/prepare
  rows = []
  for name, placement in placements(graph, topo, num_random, seed).items():
    sim_seconds = []
    for _ in range(repeats):
      start = time.perf_counter()
      result = simulator.simulate(graph, placement, topo)
      sim_seconds.append(time.perf_counter() - start)
    by_name = {n: topo.devices[placement[i]].name
               for i, n in enumerate(graph.node_names)}
    start = time.perf_counter()
    grappler_us = grappler_estimates.placed_step_time_us(extracted, by_name, cluster)
    grappler_seconds = time.perf_counter() - start
    rows.append({
        "graph": model, "nodes": graph.num_nodes, "placement": name,
        "single_device": len(set(placement.tolist())) == 1,
        "sim_ms": result.step_time_us / 1e3, "grappler_ms": grappler_us / 1e3,
        "sim_over_grappler": result.step_time_us / grappler_us,
        "sim_call_ms": statistics.median(sim_seconds) * 1e3,
        "grappler_call_ms": grappler_seconds * 1e3,
        "valid": bool(result.valid)})
  return rows, graph.metadata.get("cross_check", {})


def format_table(rows) -> str:
  header = (f"{'graph':<14}{'placement':<20}{'sim ms':>10}{'grappler ms':>13}"
            f"{'ratio':>7}{'sim call ms':>13}{'grappler call ms':>18}{'speedup':>9}")
  lines = [header, "-" * len(header)]
  for r in rows:
    lines.append(
        f"{r['graph']:<14}{r['placement']:<20}{r['sim_ms']:>10.1f}"
        f"{r['grappler_ms']:>13.1f}{r['sim_over_grappler']:>7.2f}"
        f"{r['sim_call_ms']:>13.2f}{r['grappler_call_ms']:>18.1f}"
        f"{r['grappler_call_ms'] / r['sim_call_ms']:>9.0f}x")
  return "\n".join(lines)


def main(argv):
  del argv
  rows, checks = [], {}
  for model in _MODELS.value:
    model_rows, checks[model] = compare(model, _DEVICES.value, _RANDOM.value,
                                        _REPEATS.value, _SEED.value)
    rows += model_rows
  print(format_table(rows))
  speedups = [r["grappler_call_ms"] / r["sim_call_ms"] for r in rows]
  single = [r["sim_over_grappler"] for r in rows if r["single_device"]]
  summary = {"median_speedup": statistics.median(speedups),
             "min_speedup": min(speedups),
             "single_device_ratio_median": statistics.median(single)}
  print(f"\nsimulator vs MeasureCosts speed: median {summary['median_speedup']:.0f}x, "
        f"min {summary['min_speedup']:.0f}x; single-device sim/grappler ratio "
        f"median {summary['single_device_ratio_median']:.3f}")
  for model, check in checks.items():
    print(f"{model} per-op cost cross-check: {json.dumps(check)}")
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(
        {"devices": _DEVICES.value, "rows": rows, "summary": summary,
         "cross_check": checks}, indent=1))


if __name__ == "__main__":
  app.run(main)
