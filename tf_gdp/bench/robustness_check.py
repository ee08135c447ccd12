"""Are placements robust to cost-model error? Every method under an ensemble.

For each graph on a preset (no hardware attached, so every step time is a
prediction): every classic baseline and GDP zero-shot (the shipped policy)
place it; each placement is simulated with the nominal cost model and under
the K members of `tf_gdp.cost.ensemble` (seeded by `ensemble.REPORT_SEED`,
as `tf-gdp place`'s report), and is reported as the median and the worst
ratio of its step time to the single-device placement's under the same
member (below 1: faster than one device).

With --finetune_seconds, GDP is also fine-tuned that long twice, on the
nominal model and on the ensemble median (`--robust_objective`, whose
members are seeded by `ensemble.OBJECTIVE_SEED`, so the judge's members are
held out), and both results are judged the same way.

Example:
  python -m tf_gdp.bench.robustness_check --json_out=robustness.json
"""

import json
import os
import time

from absl import app
from absl import flags

from tf_gdp import fileio
from tf_gdp import graph_specs
from tf_gdp import placing
from tf_gdp.bench import harness
from tf_gdp.cost import topology as topology_lib

# Small sizes of four zoo families: a minute or two of baselines each.
DEFAULT_GRAPHS = ("rnnlm2:batch=8:num_steps=10:hidden_size=512,"
                  "gnmt2:batch=8:hidden_size=256:source_length=10:"
                  "target_length=10,"
                  "transformer_xl2:batch=4:segment_length=64:memory_length=64,"
                  "inception_v3:batch=8")


def run_graph(item, devices: str, methods, *, members: int,
              finetune_seconds: float, samples: int, seed: int,
              log=print) -> dict:
  """Every method on one graph: nominal, median and worst ratio."""
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  started = time.perf_counter()
  loaded = item.load(devices)
  graph, topo = loaded.graph, topology_lib.get(devices)
  judge = placing.robust_judge(graph, topo, members)
  found = {}
  for method in methods:
    clock = time.perf_counter()
    try:
      found[method] = (baselines.run(method, graph, topo, seed=seed).placement,
                       time.perf_counter() - clock)
    except Exception as e:  # pylint: disable=broad-except
      log(f"  {item.label}: {method} failed: {e}")
  runs = [("gdp_zero_shot", 0.0, False)]
  if finetune_seconds > 0:
    runs += [("gdp_finetuned", finetune_seconds, False),
             ("gdp_finetuned_robust", finetune_seconds, True)]
  for label, budget, robust in runs:
    clock = time.perf_counter()
    result = placing.place(
        graph, topo, placing.GDP, budget_seconds=budget, samples=samples,
        seed=seed, compare=(), extracted=loaded.extracted,
        robust_members=members if robust else 0, robust_objective=robust)
    found[label] = (result.placement, time.perf_counter() - clock)
  rows = []
  from tf_gdp.cost import simulator  # pylint: disable=g-import-not-at-top
  for method, (placement, seconds) in found.items():
    sim = simulator.simulate(graph, placement, topo)
    row = {"method": method, "step_time_us": sim.step_time_us,
           "valid": bool(sim.valid), "search_seconds": seconds}
    row.update(judge(placement) if judge else {})
    rows.append(row)
    log(f"  {item.label.split(':')[0]:<16} {method:<22} {_row_text(row)}")
  single = next((r["step_time_us"] for r in rows
                 if r["method"] == harness.REFERENCE_METHOD), None)
  for row in rows:
    row["nominal_ratio"] = (row["step_time_us"] / single if single else None)
  return {"graph": item.label, "nodes": graph.num_nodes, "rows": rows,
          "seconds": time.perf_counter() - started}


def _row_text(row) -> str:
  median, worst = row.get("median_ratio"), row.get("worst_ratio")
  return (f"{row['step_time_us'] / 1e3:>9.2f} ms "
          f"{'' if row['valid'] else 'INVALID ':<8}"
          + (f"median {median:.3f} worst {worst:.3f}"
             if median is not None else row.get("error", "")))


def format_table(result: dict) -> str:
  lines = [f"robustness on {result['devices']}: ratio to one device under "
           f"{result['members']} cost models (member 0 nominal)",
           f"{'graph':<16} {'nodes':>6} {'method':<22} {'nominal ms':>10} "
           f"{'/single':>8} {'median':>7} {'worst':>7} {'valid':>5}"]
  lines.append("-" * len(lines[-1]))
  for graph in result["graphs"]:
    for row in graph["rows"]:
      cells = [_cell(row.get(k)) for k in ("nominal_ratio", "median_ratio",
                                           "worst_ratio")]
      lines.append(f"{graph['graph'].split(':')[0][:16]:<16} "
                   f"{graph['nodes']:>6} {row['method']:<22} "
                   f"{row['step_time_us'] / 1e3:>10.2f} {cells[0]:>8} "
                   f"{cells[1]:>7} {cells[2]:>7} "
                   f"{'yes' if row['valid'] else 'NO':>5}")
  lines.append(f"{result['seconds']:.0f} s")
  return "\n".join(lines)


def _cell(value) -> str:
  return "-" if value is None else f"{value:.3f}"


def run(graphs: str, devices: str, methods, *, members: int,
        finetune_seconds: float, samples: int, seed: int, log=print) -> dict:
  started = time.perf_counter()
  out = {"devices": devices, "members": members, "methods": list(methods),
         "finetune_seconds": finetune_seconds, "samples": samples,
         "seed": seed, "load_before": list(os.getloadavg()), "graphs": []}
  for item in graph_specs.parse(graphs):
    out["graphs"].append(run_graph(
        item, devices, methods, members=members,
        finetune_seconds=finetune_seconds, samples=samples, seed=seed,
        log=log))
  out["seconds"] = time.perf_counter() - started
  out["load_after"] = list(os.getloadavg())
  return out


def main(argv):
  del argv
  result = run(_GRAPHS.value, _DEVICES.value,
               harness.parse_methods(_METHODS.value), members=_MEMBERS.value,
               finetune_seconds=_FINETUNE.value, samples=_SAMPLES.value,
               seed=_SEED.value)
  print(format_table(result))
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(result, indent=1))


if __name__ == "__main__":
  # Flags live here, not at module level, so that other code (tests, the CLI,
  # another benchmark) can import this module's functions.
  _GRAPHS = flags.DEFINE_string("graphs", DEFAULT_GRAPHS, "Graph spec.")
  _DEVICES = flags.DEFINE_string("devices", "p100x4", "A preset.")
  _METHODS = flags.DEFINE_string("methods", "all", "Baselines ('all': the "
                                 "classic ones).")
  _MEMBERS = flags.DEFINE_integer("members", placing.ROBUST_MEMBERS,
                                  "Cost models per judgement "
                                  "(member 0 nominal).", lower_bound=1)
  _FINETUNE = flags.DEFINE_float(
      "finetune_seconds", 0.0, "Also fine-tune GDP this long on the nominal "
      "and on the robust objective (0: zero-shot only).", lower_bound=0.0)
  _SAMPLES = flags.DEFINE_integer("samples", 16, "GDP samples per pass.",
                                  lower_bound=2)
  _SEED = flags.DEFINE_integer("seed", 0, "Seeds the methods.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Where to write the JSON.")
  app.run(main)
