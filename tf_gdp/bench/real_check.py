"""GDP fine-tuned on real step times against the baselines, all measured.

On `cpu-workers:2` (two single-core TF worker processes over gRPC), for small
real graphs: every baseline's placement (planned on the calibrated
topology), and GDP fine-tuned with the `measure` reward backend (every
sampled placement run on the cluster) from the pre-trained policy. With
`--sim_warmup_seconds`, the pre-trained policy is first fine-tuned on the
simulator for that long (sim-to-real: the simulator is cheap and smooth,
measured rewards are slow and punish every early cross-worker tensor), and
the measure stage continues from there; GDP's placement is still the best
one the policy sampled in the measure stage, judged by measurement. Then
all final placements are measured again, interleaved over several sweeps
(median of sweep medians), so that GDP and the baselines are timed by the
same protocol in the same minutes of a shared machine.

Example:
  python -m tf_gdp.bench.real_check --graphs=matmul_chains,lstm \
      --finetune_seconds=180 --json_out=real_check.json
"""

import os
import statistics
import tempfile
import time
from typing import Optional

from absl import app
from absl import flags
import numpy as np

from tf_gdp import graph_specs
from tf_gdp import gdp_method
from tf_gdp import placing
from tf_gdp.bench import harness
from tf_gdp.bench import real_graphs
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib

_DEVICES = "cpu-workers:2"
BASELINES = ("single_device", "round_robin", "m_topo", "m_etf", "m_sct",
             "heft", "metis")


def check_graph(name: str, cluster, topology, *, policy: str,
                finetune_seconds: float, sweeps: int, repeats: int,
                samples: int, seed: int, backend: str = "measure",
                entropy: float = 0.01,
                sim_warmup_seconds: float = 0.0,
                refloor_after: Optional[int] = None,
                log=print) -> dict:
  """Baselines and GDP fine-tuned on real rewards; final measured sweeps.

  `backend` is the fine-tuning reward: "measure" (every sample run on the
  cluster) or "mix" (every sample simulated, the fastest few measured; the
  best placement is judged by measurement either way).
  """
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import exploration  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import placement_task  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import train_config  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import workflows  # pylint: disable=g-import-not-at-top
  if refloor_after is None:
    refloor_after = exploration.REFLOOR_AFTER
  extracted = extract.from_function(real_graphs.BUILDERS[name]())
  graph = graph_specs.op_graph_from_extracted(extracted, name=name,
                                              devices=_DEVICES)
  candidates = {}
  for method in BASELINES:
    candidates[method] = baselines.run(method, graph, topology,
                                       seed=seed).placement
  task = placement_task.PlacementTask(graph, topology, extracted=extracted,
                                      name=name)
  config = train_config.TrainConfig(graphs_per_iteration=1,
                                    samples_per_graph=samples, seed=seed,
                                    refloor_after=refloor_after,
                                    ppo=train_config.PpoConfig(
                                        entropy_regularization=entropy),
                                    log_every_seconds=30.0,
                                    checkpoint_every_seconds=1e9)
  started = time.perf_counter()
  with tempfile.TemporaryDirectory() as warm_dir:
    if sim_warmup_seconds > 0:
      warm = workflows.finetune(
          policy, task,
          budget=train_config.Budget(seconds=sim_warmup_seconds),
          root_dir=warm_dir, config=config,
          env_options={"backend": "simulate"},
          log=lambda line: log(f"  {name} (simulated warm-up): {line}"))
      policy = os.path.join(warm_dir, "policy")
      log(f"  {name}: simulated warm-up {warm.iterations} iterations, best "
          f"{warm.best[name].step_time_us / 1e3:.2f} ms simulated")
    tuned = workflows.finetune(
        policy, task, budget=train_config.Budget(seconds=finetune_seconds),
        config=config, env_options={"backend": backend,
                                    "measure_target": cluster,
                                    "measure_repeats": repeats},
        log=lambda line: log(f"  {name}: {line}"))
  best = tuned.best[name]
  if best is None:
    raise RuntimeError(f"{name}: fine-tuning found no valid placement")
  candidates["gdp"] = best.placement
  log(f"  {name}: gdp fine-tuned {tuned.iterations} iterations, "
      f"{tuned.evaluations} evaluations, {tuned.measurements} distinct "
      f"placements measured, best "
      f"{best.step_time_us / 1e3:.2f} ms ({time.perf_counter() - started:.0f} s)")
  times = {method: [] for method in candidates}
  for _ in range(sweeps):  # interleaved: every method in every sweep
    for method, placement in candidates.items():
      m = measure.measure(extracted, placement, cluster, topology=topology,
                          warmup=2, repeats=repeats)
      times[method].append(m.step_time_us if m.valid else float("nan"))
  rows = []
  for method, placement in candidates.items():
    sim = simulator.simulate(graph, placement, topology)
    finite = [t for t in times[method] if np.isfinite(t)]
    rows.append({
        "method": method,
        "measured_us": statistics.median(finite) if finite else None,
        "sweeps_us": times[method], "simulated_us": sim.step_time_us,
        "devices_used": int(len(set(placement.tolist()))),
        "placement": placement.tolist()})
  measured = [r for r in rows if r["method"] != "gdp" and r["measured_us"]]
  best_baseline = min(measured, key=lambda r: r["measured_us"])
  gdp = next(r for r in rows if r["method"] == "gdp")
  return {
      "graph": name, "nodes": graph.num_nodes,
      "node_names": list(graph.node_names), "rows": rows,
      "finetune": {"backend": backend,
                   "sim_warmup_seconds": sim_warmup_seconds,
                   "refloor_after": refloor_after,
                   "entropy": entropy,
                   "iterations": tuned.iterations,
                   "evaluations": tuned.evaluations,
                   "measurements": tuned.measurements,
                   "seconds": tuned.seconds,
                   "best_during_training_us": best.step_time_us},
      "best_baseline": best_baseline["method"],
      "gdp_over_best_baseline": (gdp["measured_us"] /
                                 best_baseline["measured_us"]
                                 if gdp["measured_us"] else None),
  }


def format_table(results) -> str:
  lines = [f"{'graph':<16} {'method':<14} {'measured ms':>12} "
           f"{'simulated ms':>13} {'devices':>8}"]
  for result in results:
    for r in sorted(result["rows"], key=lambda r: r["measured_us"] or 1e18):
      measured = (f"{r['measured_us'] / 1e3:>12.2f}" if r["measured_us"]
                  else f"{'failed':>12}")
      lines.append(f"{result['graph']:<16} {r['method']:<14} {measured} "
                   f"{r['simulated_us'] / 1e3:>13.2f} {r['devices_used']:>8}")
    ratio = result["gdp_over_best_baseline"]
    lines.append(f"{'':<16} gdp / best baseline ({result['best_baseline']}): "
                 + (f"{ratio:.3f}" if ratio else "n/a"))
  return "\n".join(lines)


def main(argv):
  del argv
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import cli_lib  # pylint: disable=g-import-not-at-top
  cli_lib.quiet_tensorflow_logs()
  topology = topology_lib.get(_DEVICES)
  started = time.time()
  results = []
  with workers.CpuWorkerCluster(2) as cluster:
    for name in _GRAPHS.value:
      results.append(check_graph(
          name, cluster, topology,
          policy=_POLICY.value or gdp_method.PRETRAINED_POLICY,
          finetune_seconds=_FINETUNE.value, sweeps=_SWEEPS.value,
          repeats=_REPEATS.value, samples=_SAMPLES.value, seed=_SEED.value,
          backend=_BACKEND.value, entropy=_ENTROPY.value,
          sim_warmup_seconds=_SIM_WARMUP.value,
          refloor_after=_REFLOOR.value))
  print(format_table(results))
  harness.finish_run("real_check", results, started, _JSON_OUT.value)


if __name__ == "__main__":
  from tf_gdp.rl import exploration  # pylint: disable=g-import-not-at-top
  _GRAPHS = flags.DEFINE_list("graphs", ["matmul_chains", "lstm"],
                              f"Of {', '.join(real_graphs.BUILDERS)}.")
  _POLICY = flags.DEFINE_string("policy", None, "Pre-trained policy "
                                "(default: the shipped one).")
  _FINETUNE = flags.DEFINE_float("finetune_seconds", 180.0,
                                 "Measure-backend fine-tuning per graph.",
                                 lower_bound=1.0)
  _SWEEPS = flags.DEFINE_integer("sweeps", 3, "Final interleaved sweeps.",
                                 lower_bound=1)
  _REPEATS = flags.DEFINE_integer("repeats", 3, "Timed steps per "
                                  "measurement.", lower_bound=1)
  _SAMPLES = flags.DEFINE_integer("samples", 8, "Placements per PPO "
                                  "iteration.", lower_bound=2)
  _SEED = flags.DEFINE_integer("seed", 0, "Seed.")
  _BACKEND = flags.DEFINE_enum("backend", "measure", ["measure", "mix"],
                               "Fine-tuning reward backend.")
  _ENTROPY = flags.DEFINE_float("entropy", 0.01, "PPO's entropy bonus.",
                                lower_bound=0.0)
  _SIM_WARMUP = flags.DEFINE_float(
      "sim_warmup_seconds", 0.0, "Fine-tune on the simulator this long "
      "before the measured stage (0: measured rewards only).",
      lower_bound=0.0)
  _REFLOOR = flags.DEFINE_integer(
      "refloor_after", exploration.REFLOOR_AFTER,
      "Make the policy explore again after this many "
      "iterations of one placement only (0: never).", lower_bound=0)
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Write results here.")
  app.run(main)
