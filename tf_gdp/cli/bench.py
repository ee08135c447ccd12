"""`tf-gdp bench`: every placement method on every graph, one table per topology.

Examples:
  tf-gdp bench --graphs=zoo --devices=p100x4 --json_out=bench.json
  tf-gdp bench --graphs=gnmt2,inception_v3 --devices=p100x4,v100x8 --methods=all,hdp
  tf-gdp bench --graphs=gnmt2:batch=4:hidden_size=64 --devices=cpu-workers:2 \
      --measure=cpu-workers:2
"""

import dataclasses
import json
import sys
import time

from absl import flags

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp import graph_specs
from tf_gdp.bench import harness
from tf_gdp.cli import graph_flags
from tf_gdp.cost import topology as topology_lib
from tf_gdp.rl import cli_lib

_GRAPHS = flags.DEFINE_string(
    "graphs", graph_specs.ZOO, "Comma-separated: 'zoo' (every benchmark model), zoo "
    "names with optional knobs ('gnmt2:batch=8:hidden_size=64'), graph files "
    "/ globs (MetaGraphDef .pb/.pbtxt, SavedModel directory, op-graph .json) "
    "or generated graphs ('layered:N').")
_DEVICES = flags.DEFINE_list(
    "devices", ["p100x4"], "Topologies (presets or topology .json files); one "
    "table each.")
_METHODS = flags.DEFINE_string(
    "methods", "all", "Comma-separated methods; 'all' = "
    f"{','.join(harness.CLASSIC_METHODS)}. Learned: hdp.")
_HDP_BUDGET = flags.DEFINE_integer(
    "hdp_budget", 2000, "Simulator evaluations for the HDP-style baseline.",
    lower_bound=1)
_MEASURE = flags.DEFINE_string(
    "measure", None, "Also run each placement for real on this target "
    "(cpu-workers:K; it must also be one of --devices, whose tables get a "
    "measured column).")
_REPEATS = flags.DEFINE_integer("measure_repeats", 5, "Timed steps per measurement.",
                                lower_bound=1)
_SEED = flags.DEFINE_integer(
    "seed", 0, "Seed for randomized methods.", lower_bound=0)
_JSON_OUT = flags.DEFINE_string("json_out", None, "Write all rows and settings here.")
_SIGNATURE = graph_flags.define_signature(__name__)
_INPUT_SHAPES = graph_flags.define_input_shapes(__name__)
_ALLOW_SIDE_EFFECTS = cli_lib.define_allow_side_effects(__name__)
_PROFILE = graph_flags.define_profile(__name__)


def _profiled(loaded, devices: str):
  """`loaded` priced by a profile on `devices` when they are here."""
  from tf_gdp.runtime import profiled_costs  # pylint: disable=g-import-not-at-top
  graph, costs = profiled_costs.profiled_graph(
      loaded.graph, loaded.extracted, topology_lib.get(devices),
      allow_side_effects=_ALLOW_SIDE_EFFECTS.value,
      log=harness.stderr_progress)
  if costs["source"] == "profiled":
    harness.stderr_progress(
        f"  costs: {costs['profiled_ops']} ops profiled on {costs['target']}, "
        f"{costs['roofline_ops']} roofline")
  return dataclasses.replace(loaded, graph=graph)


def main(argv):
  graphs = graph_specs.parse(_GRAPHS.value, signature=_SIGNATURE.value,
                              input_shapes=_INPUT_SHAPES.value)
  methods = harness.parse_methods(_METHODS.value)
  if _MEASURE.value and _MEASURE.value not in _DEVICES.value:
    raise errors.InputError(
        f"--measure={_MEASURE.value} must also be in --devices (placements are "
        "made for the devices they are measured on)")
  options = {"hdp": {"budget": _HDP_BUDGET.value}}
  started = time.time()
  all_rows, tables = [], []
  with harness.measurer_for(
      _MEASURE.value, repeats=_REPEATS.value,
      allow_side_effects=_ALLOW_SIDE_EFFECTS.value) as measurer:
    for devices in _DEVICES.value:
      rows = []
      for k, source in enumerate(graphs):
        harness.stderr_progress(
            f"[{devices}] graph {k + 1}/{len(graphs)}: {source.label} "
            f"(elapsed {time.time() - started:.0f} s)")
        loaded = source.load(devices)
        if _PROFILE.value:
          loaded = _profiled(loaded, devices)
        rows += harness.bench_graph(
            loaded, source.label, devices, methods, seed=_SEED.value,
            method_options=options,
            measurer=measurer if devices == _MEASURE.value else None,
            progress=harness.stderr_progress)
      tables.append(harness.format_table(rows, devices))
      print(tables[-1], flush=True)
      print()
      all_rows += rows
  speedups = harness.geomean_speedups(all_rows)
  print("geometric-mean speedup over single device: " + ", ".join(
      f"{m} {s:.2f}x" for m, s in speedups.items()))
  print(f"total time {time.time() - started:.0f} s")
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps({
        "command": " ".join(["tf-gdp"] + sys.argv[1:]),
        "settings": {"graphs": _GRAPHS.value, "devices": _DEVICES.value,
                     "methods": methods, "hdp_budget": _HDP_BUDGET.value,
                     "measure": _MEASURE.value, "seed": _SEED.value},
        "rows": harness.rows_as_dicts(all_rows),
        "geomean_speedup_vs_single": speedups,
        "seconds": time.time() - started}, indent=1))
