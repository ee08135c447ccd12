"""The simulator's peak memory per device against TensorFlow's allocator.

For each graph (a zoo model with knobs, or a Keras application's training
step from `keras_app_graphs`) and each method's placement of it on
`cpu-workers:2`, the simulator's peak memory per device (`simulate`,
"Memory per device": the persistent `memory_bytes` of the ops placed there
plus live tensors and temporaries) is put beside what TensorFlow's
allocator reported while the placed step ran on the two worker processes
(`runtime.allocator_stats`: the peak while an op ran, and the floor held
between steps; the workers run TF's BFC allocator for the CPU, which counts
every allocation). Both are split into what persists across steps (predicted:
the variables placed there; measured: the floor) and what the step itself
allocates at its peak, so that a gap shows which part of the model it is in.
Every placement is measured in `--rounds` sessions: the measured peak is
their median, shown with its range (TF's executor need not run a step's ops
in the same order in every session, and the peak follows the order).
Ratios are predicted / measured; "/max" divides by the largest round.

Example:
  python -m tf_gdp.bench.memory_check --json_out=memory_check.json
"""

import time

from absl import app
from absl import flags
import numpy as np

from tf_gdp.bench import harness
from tf_gdp.bench import keras_app_graphs

_DEVICES = "cpu-workers:2"
_MIB = float(1 << 20)
DEFAULT_GRAPHS = (
    "rnnlm2:batch=16:hidden_size=256:vocab_size=4000:num_steps=10:"
    "optimizer=adam",
    "keras_mobilenet_v2")
DEFAULT_METHODS = ("single_device", "m_topo", "round_robin")


def load(spec: str):
  """(flat graph, OpGraph costed for cpu-workers:2) of a graph name or spec."""
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  from tf_gdp import graph_specs  # pylint: disable=g-import-not-at-top
  if spec in keras_app_graphs.BUILDERS:
    extracted = extract.from_function(keras_app_graphs.BUILDERS[spec]())
    return extracted, graph_specs.op_graph_from_extracted(
        extracted, name=spec, devices=_DEVICES)
  loaded = graph_specs.load_graph(spec, devices=_DEVICES)
  return loaded.extracted, loaded.graph


def check_graph(spec: str, cluster, topology, *, methods, warmup: int,
                repeats: int, rounds: int, seed: int, log=print) -> dict:
  """Every method's placement of one graph: predicted and measured peaks.

  Each round measures every placement in a session of its own (TF's
  executor may run a step's ops in another order in another session, and
  the peak follows the order); a device's measured peak is the median of
  its rounds' peaks, with their minimum and maximum beside it.
  """
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  from tf_gdp.cost import simulator  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import allocator_stats  # pylint: disable=g-import-not-at-top
  started = time.perf_counter()
  extracted, graph = load(spec)
  log(f"{spec}: {graph.num_nodes} ops, variables "
      f"{graph.memory_bytes.sum() / _MIB:.1f} MiB "
      f"({time.perf_counter() - started:.0f} s to build)")
  placements = {method: baselines.run(method, graph, topology,
                                      seed=seed).placement
                for method in methods}
  measured = {method: [] for method in methods}
  for round_index in range(rounds):
    for method, placement in placements.items():
      measured[method].append(allocator_stats.measure_memory(
          extracted, placement, cluster, topology=topology, warmup=warmup,
          repeats=repeats))
    log(f"  round {round_index + 1}: "
        + ", ".join(f"{m}: {measured[m][-1].reason or 'measured'}"
                    for m in methods)
        + f" ({time.perf_counter() - started:.0f} s)")
  rows = []
  for method, placement in placements.items():
    sim = simulator.simulate(graph, placement, topology)
    persistent = np.bincount(placement, weights=graph.memory_bytes,
                             minlength=topology.num_devices)
    for d, device in enumerate(topology.device_names):
      if np.any(placement == d):
        rows.append(_row(spec, method, d, device,
                         int(sim.peak_memory_bytes[d]), int(persistent[d]),
                         measured[method]))
  return {"graph": spec, "nodes": graph.num_nodes,
          "variable_bytes": int(graph.memory_bytes.sum()),
          "output_bytes": int(graph.output_bytes.sum()),
          "temp_bytes": int(graph.temp_bytes.sum()), "rows": rows}


def _ratio(predicted, measured):
  return predicted / measured if predicted > 0 and measured > 0 else None


def _row(spec, method, index, device, predicted, persistent, rounds):
  """One device of one placement; ratios are predicted / measured."""
  row = {"graph": spec, "method": method, "device_index": index,
         "device": device, "predicted_peak_bytes": predicted,
         "predicted_persistent_bytes": persistent,
         "predicted_step_bytes": predicted - persistent,
         "measured_reasons": [m.reason for m in rounds if m.reason]}
  got = [m.devices[device] for m in rounds if device in m.devices]
  if not got:
    return row
  peaks = [g.peak_bytes for g in got]
  peak = int(np.median(peaks))
  floor = int(np.median([g.floor_bytes for g in got]))
  row.update({
      "measured_peak_bytes": peak,
      "measured_peak_min_bytes": min(peaks),
      "measured_peak_max_bytes": max(peaks),
      "measured_round_peaks": peaks,
      "measured_floor_bytes": floor,
      "measured_step_bytes": peak - floor,
      "allocator": got[0].allocator,
      "allocator_complete": all(g.complete for g in got),
      "ops_allocating": got[-1].ops,
      "ratio": _ratio(predicted, peak),
      "ratio_to_max": _ratio(predicted, max(peaks)),
      "persistent_ratio": _ratio(persistent, floor),
      "step_ratio": _ratio(predicted - persistent, peak - floor)})
  return row


def format_table(results) -> str:
  """One line per device of each placement (MiB; ratios predicted/measured)."""
  header = (f"{'graph':<20}{'method':<15}{'dev':>4}{'pred MiB':>10}"
            f"{'meas MiB (min-max)':>22}{'ratio':>7}{'/max':>6}"
            f"{'persist p/m MiB':>17}{'ratio':>7}{'step p/m MiB':>15}"
            f"{'ratio':>7}")
  lines = [header, "-" * len(header)]

  def ratio(value, width=7):
    return f"{value:>{width}.2f}" if value is not None else f"{'-':>{width}}"

  def mib(value):
    return f"{value / _MIB:.1f}"

  for result in results:
    for r in result["rows"]:
      label = r["graph"].partition(":")[0][:19]
      line = (f"{label:<20}{r['method'][:14]:<15}{r['device_index']:>4}"
              f"{mib(r['predicted_peak_bytes']):>10}")
      if "measured_peak_bytes" not in r:
        lines.append(line + "  " + ("; ".join(r["measured_reasons"]) or
                                    "no allocation measured"))
        continue
      measured = (f"{mib(r['measured_peak_bytes'])} "
                  f"({mib(r['measured_peak_min_bytes'])}-"
                  f"{mib(r['measured_peak_max_bytes'])})")
      persist = (f"{mib(r['predicted_persistent_bytes'])}/"
                 f"{mib(r['measured_floor_bytes'])}")
      step = (f"{mib(r['predicted_step_bytes'])}/"
              f"{mib(r['measured_step_bytes'])}")
      lines.append(line + f"{measured:>22}{ratio(r['ratio'])}"
                   f"{ratio(r['ratio_to_max'], 6)}{persist:>17}"
                   f"{ratio(r['persistent_ratio'])}{step:>15}"
                   f"{ratio(r['step_ratio'])}")
  for key, what in (("ratio", "median measured"),
                    ("ratio_to_max", "largest measured")):
    values = [r[key] for result in results for r in result["rows"]
              if r.get(key)]
    if values:
      lines.append(f"predicted / {what} peak over {len(values)} devices: "
                   f"median {np.median(values):.2f}, range "
                   f"{min(values):.2f}-{max(values):.2f}")
  return "\n".join(lines)


def main(argv):
  del argv
  from tf_gdp.cost import topology as topology_lib  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import cli_lib  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import allocator_stats  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  cli_lib.quiet_tensorflow_logs()
  harness.parse_methods(",".join(_METHODS.value))  # unknown names fail early
  topology = topology_lib.get(_DEVICES)
  started = time.time()
  results = []
  with workers.CpuWorkerCluster(
      2, env=allocator_stats.COUNTING_ENV) as cluster:
    for spec in _GRAPHS.value:
      results.append(check_graph(
          spec, cluster, topology, methods=_METHODS.value,
          warmup=_WARMUP.value, repeats=_REPEATS.value,
          rounds=_ROUNDS.value, seed=_SEED.value,
          log=harness.stderr_progress))
  print(format_table(results))
  harness.finish_run("memory_check", results, started, _JSON_OUT.value)


if __name__ == "__main__":
  _GRAPHS = flags.DEFINE_list(
      "graphs", list(DEFAULT_GRAPHS),
      "Zoo specs (model:knob=value:...) or Keras applications "
      f"({', '.join(keras_app_graphs.BUILDERS)}).")
  _METHODS = flags.DEFINE_list("methods", list(DEFAULT_METHODS),
                               "Placement methods, one placement each.")
  _WARMUP = flags.DEFINE_integer("warmup", 1, "Untraced steps first.",
                                 lower_bound=0)
  _REPEATS = flags.DEFINE_integer("repeats", 2, "Traced steps per session "
                                  "(the session's peak is their largest).",
                                  lower_bound=1)
  _ROUNDS = flags.DEFINE_integer("rounds", 5, "Sessions per placement (the "
                                 "measured peak is their median).",
                                 lower_bound=1)
  _SEED = flags.DEFINE_integer("seed", 0, "Seed of the methods.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Write results here.")
  app.run(main)
