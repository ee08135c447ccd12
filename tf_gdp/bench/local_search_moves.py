r"""local_search with and without its moves along the cut, side by side.

`local_search` proposes random moves (a group, a swap, a numbered scope, a
chunk of the topological order, each to a random device) and moves along
the current cut (`local_search.BORDER_MOVES`: a group joins its neighbour
across a cut edge; a run beside a cut edge crosses it). This bench runs
both move sets from the same start, seed and evaluation budget per graph
and topology, so the gain of the cut moves is measured, not assumed:

  python -m tf_gdp.bench.local_search_moves --graphs=corpus:train \
      --devices=p100x4,p100x3 --budget=2000 --json_out=moves.json

It prints one row per pair (both step times and their ratio) and, per
topology, how often the full move set is at or below the plain one and the
geometric mean of the ratio.
"""

import json
import math

from absl import app
from absl import flags

from tf_gdp.bench import flag_checks


def check(graph, topology, *, budget: int, seed: int = 0) -> dict:
  """One graph on one topology: local_search with each move set."""
  # pylint: disable=g-import-not-at-top
  from tf_gdp import baselines
  from tf_gdp.baselines import local_search
  # pylint: enable=g-import-not-at-top
  row = {"graph": graph.name, "devices": topology.name, "budget": budget}
  for name, moves in (("plain", local_search.PLAIN_MOVES),
                      ("with_cut_moves", local_search.MOVES)):
    result = baselines.run("local_search", graph, topology, seed=seed,
                           evaluations=budget, moves=moves)
    row[f"{name}_us"] = result.info["simulated_step_time_us"]
    row[f"{name}_start"] = result.info["start"]
  row["ratio"] = row["with_cut_moves_us"] / row["plain_us"]
  return row


def summary(rows) -> list:
  """Per topology: pairs at or below the plain moves, geometric mean."""
  lines = []
  for devices in dict.fromkeys(r["devices"] for r in rows):
    ratios = [r["ratio"] for r in rows if r["devices"] == devices]
    mean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    lines.append(f"{devices}: with the cut moves at or below the plain moves "
                 f"on {sum(x <= 1.0 for x in ratios)} of {len(ratios)} "
                 f"pairs; geometric mean {mean:.4f}")
  return lines


def main(argv):
  del argv
  import tf_gdp  # pylint: disable=g-import-not-at-top,unused-import
  # pylint: disable=g-import-not-at-top
  from tf_gdp import fileio
  from tf_gdp import graph_specs
  from tf_gdp.cost import topology as topology_lib
  # pylint: enable=g-import-not-at-top
  rows = []
  print(f"{'graph':<34} {'devices':<8} {'plain ms':>10} {'cut moves ms':>12} "
        f"{'ratio':>7}")
  for spec in graph_specs.parse(_GRAPHS.value):
    for devices in _DEVICES.value:
      row = check(spec.load(devices).graph, topology_lib.get(devices),
                  budget=_BUDGET.value, seed=_SEED.value)
      rows.append(row)
      print(f"{row['graph']:<34} {devices:<8} {row['plain_us'] / 1e3:>10.3f} "
            f"{row['with_cut_moves_us'] / 1e3:>12.3f} {row['ratio']:>7.4f}",
            flush=True)
  print("\n".join(summary(rows)))
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(
        {"graphs": _GRAPHS.value, "devices": _DEVICES.value,
         "budget": _BUDGET.value, "seed": _SEED.value, "rows": rows},
        indent=1))


if __name__ == "__main__":
  # Flags only here, so tests may import this module beside other benches.
  _GRAPHS = flags.DEFINE_string("graphs", "corpus:train",
                                "Graphs (as `tf-gdp bench --graphs`).")
  _DEVICES = flags.DEFINE_list("devices", ["p100x4", "p100x3"],
                               "Topologies.")
  _BUDGET = flags.DEFINE_integer("budget", 2000,
                                 "Simulator evaluations per search, starts "
                                 "included.", lower_bound=1)
  _SEED = flags.DEFINE_integer("seed", 0, "Search seed.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Write the rows here.")
  flags.register_validator("graphs", flag_checks.from_parser(flag_checks.graphs))
  flags.register_validator("devices",
                           flag_checks.from_parser(flag_checks.devices))
  app.run(main)
