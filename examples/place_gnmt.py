"""Places the GNMT training step with GDP and with every baseline.

Run with no flags (`make demo`): builds the 2-layer GNMT training step
(statically unrolled LSTM encoder/decoder with attention, Adam update),
places it on 4 P100s with the shipped pre-trained GDP policy (zero-shot) and
with the baselines, prints the comparison table, and writes the placement,
its report and the Gantt chart of the simulated schedule to --out. When real
GPUs are attached, the placed step also runs on them and the measured step
time is printed next to the prediction.

  python examples/place_gnmt.py --num_layers=8 --devices=v100x8 --budget_seconds=600
"""

import sys

from absl import flags

import tf_gdp as gdp
from tf_gdp import cli
from tf_gdp.cost import presets
from tf_gdp.graph import describe

_NUM_LAYERS = flags.DEFINE_integer("num_layers", 2, "LSTM layers in encoder "
                                   "and decoder (8 = the 50k+ op GNMT-8).",
                                   lower_bound=1)
_BATCH = flags.DEFINE_integer("batch", None, "Batch size (default: the "
                              "model's).", lower_bound=1)
_KNOBS = flags.DEFINE_string("knobs", "", "Further GNMT knobs, e.g. "
                             "'hidden_size=512'.")
_DEVICES = flags.DEFINE_string("devices", presets.DEFAULT, "Device preset "
                               f"({', '.join(presets.names())}) or file.")
_METHOD = flags.DEFINE_string("method", "gdp", "gdp or a baseline.")
_BUDGET = flags.DEFINE_float("budget_seconds", 0.0, "GDP fine-tuning time "
                             "(0: zero-shot).", lower_bound=0.0)
_POLICY = flags.DEFINE_string("policy", None, "GDP policy directory "
                              "(default: the shipped one).")
_COMPARE = flags.DEFINE_list(
    "compare", ["single_device", "human_expert", "m_topo", "m_etf", "m_sct",
                "heft", "metis"], "Baselines for the comparison table.")
_OUT = flags.DEFINE_string("out", "out/place_gnmt", "Output folder.")
flags.DEFINE_alias("layers", "num_layers")
flags.DEFINE_alias("budget", "budget_seconds")


def main(argv):
  del argv
  knobs = [f"num_layers={_NUM_LAYERS.value}"]
  if _BATCH.value is not None:
    knobs.append(f"batch={_BATCH.value}")
  if _KNOBS.value:
    knobs.append(_KNOBS.value.replace(",", ":"))
  print(f"building the GNMT training step ({', '.join(knobs)}) ...",
        flush=True)
  loaded = gdp.load_graph(":".join(["gnmt"] + knobs), devices=_DEVICES.value)
  graph = loaded.graph
  print(describe.format_summary(describe.summary(graph, top=5)))
  topology = gdp.get_topology(_DEVICES.value)
  print(f"placing with {_METHOD.value} on {topology.name} ...", flush=True)
  result = gdp.place_graph(graph, topology, _METHOD.value,
                           budget_seconds=_BUDGET.value, policy=_POLICY.value,
                           compare=[c for c in _COMPARE.value if c],
                           extracted=loaded.extracted,
                           log=lambda line: print(line, flush=True))
  print(comparison_table(result))
  gdp.write_outputs(_OUT.value, loaded, topology, result)
  print(f"wrote {_OUT.value}/placement.json, report.json, gantt.png, "
        "devices.png")
  run_on_attached_gpus(loaded, topology, result)


def comparison_table(result: gdp.PlaceResult) -> str:
  """Method, predicted step time and ratios, fastest first."""
  rows = [(result.method, result.step_time_us, result.valid,
           result.search_seconds)]
  rows += [(name, entry["step_time_us"], entry["valid"],
            entry["search_seconds"])
           for name, entry in result.compared.items() if "step_time_us" in entry]
  by_name = {name: step for name, step, _, _ in rows}
  single = by_name.get("single_device")
  expert = by_name.get("human_expert")
  lines = [f"{'method':<16} {'step ms':>10} {'x single':>9} {'/expert':>8} "
           f"{'/bound':>7} {'search s':>9}"]
  for name, step, valid, seconds in sorted(rows, key=lambda r: r[1]):
    lines.append(
        f"{name:<16} {step / 1e3:>10,.1f} "
        f"{(single / step if single else float('nan')):>9.2f} "
        f"{(step / expert if expert else float('nan')):>8.2f} "
        f"{step / result.lower_bound_us:>7.2f} {seconds:>9.1f}"
        + ("" if valid else "  INVALID (out of memory or constraints)"))
  lines.append(f"lower bound {result.lower_bound_us / 1e3:,.1f} ms")
  return "\n".join(lines)


def run_on_attached_gpus(loaded, topology, result) -> None:
  """With the placement's GPUs attached, measure the placed step for real."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = len(tf.config.list_physical_devices("GPU"))
  wanted = len(topology.devices_of_kind("GPU"))
  if not wanted or gpus < wanted:
    print(f"real run skipped: the placement uses {wanted} GPUs, {gpus} "
          "attached (predicted times only)")
    return
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  measured = measure.measure(loaded.extracted, result.placement, "local",
                             topology=topology)
  if measured.valid:
    print(f"measured on the attached GPUs: {measured.step_time_us / 1e3:,.1f}"
          f" ms (predicted {result.step_time_us / 1e3:,.1f} ms)")
  else:
    print(f"real run failed: {measured.reason}")


if __name__ == "__main__":
  cli.run_command(main, sys.argv)
