"""How long one simulator evaluation takes on a large synthetic graph.

The simulator is the reward of placement training, so its per-placement time
bounds how fast training can go (the target is <= 25 ms median on a
50k-node graph). This times `simulate` (one placement per call, as the
environment uses it) and `simulate_batch` on a layered DAG, for random and
round-robin placements, on each topology named. With `--uncontended` each
topology is also timed with one channel per directed pair
(`topology.uncontended`, the model without shared links) on the same
placements, side by side.

Example:
  python -m tf_gdp.bench.simulator_speed --uncontended --json_out=sim_speed.json
"""

import json
import platform
import sys
import time

from absl import app
from absl import flags
import numpy as np

from tf_gdp import fileio
from tf_gdp.cost import compiled
from tf_gdp.cost import simulator
from tf_gdp.cost import derived_topologies
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import generators

_NUM_NODES = flags.DEFINE_integer("num_nodes", 50_000,
                                  "Nodes of the synthetic layered DAG.",
                                  lower_bound=2)
_WIDTH = flags.DEFINE_integer("width", 100, "Nodes per layer.", lower_bound=1)
_TOPOLOGIES = flags.DEFINE_list("topologies", ["p100x4", "v100x8"],
                                "Topology presets or files.")
_REPEATS = flags.DEFINE_integer("repeats", 30,
                                "Evaluations timed per placement kind "
                                "(each a fresh placement).", lower_bound=1)
_BATCH = flags.DEFINE_integer("batch", 16, "Placements per simulate_batch "
                              "call (0 skips the batch timing).", lower_bound=0)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of graph and placements.")
_UNCONTENDED = flags.DEFINE_bool(
    "uncontended", False, "Also time each topology with one channel per "
    "directed pair (no shared links), on the same placements.")
_JSON_OUT = flags.DEFINE_string("json_out", None, "Where to write the JSON.")


def placements(kind: str, n: int, d: int, rng) -> np.ndarray:
  """`random` (uniform over devices) or `round_robin` (rotated by one draw)."""
  if kind == "random":
    return rng.integers(0, d, n)
  return (np.arange(n) + rng.integers(0, d)) % d


def time_single(graph, topo, stacked: np.ndarray) -> list:
  """Milliseconds of each `simulate` call, one per placement row."""
  times = []
  for placement in stacked:
    start = time.perf_counter()
    simulator.simulate(graph, placement, topo)
    times.append((time.perf_counter() - start) * 1e3)
  return times


def time_batch(graph, topo, stacked: np.ndarray) -> float:
  """Milliseconds per placement inside one `simulate_batch` call."""
  start = time.perf_counter()
  simulator.simulate_batch(graph, stacked, topo)
  return (time.perf_counter() - start) * 1e3 / stacked.shape[0]


def run(num_nodes: int, width: int, topologies, repeats: int, batch: int,
        seed: int, uncontended: bool = False) -> dict:
  """Times every (topology, model, placement kind); returns the JSON document.

  Each model of one topology runs on the same placements.
  """
  rng = np.random.default_rng(seed)
  start = time.perf_counter()
  graph = generators.random_layered_graph(num_nodes, width=width, seed=seed,
                                          name=f"layered_{num_nodes}")
  build_s = time.perf_counter() - start
  start = time.perf_counter()
  simulator.prepare(graph)
  prepare_s = time.perf_counter() - start
  rows = []
  for name in topologies:
    contended = topology_lib.get(name)
    models = [("contended" if contended.contended else "pairs", contended)]
    if uncontended and contended.contended:
      models.append(("uncontended", derived_topologies.uncontended(contended)))
    d = contended.num_devices
    for kind in ("random", "round_robin"):
      single = np.stack([placements(kind, num_nodes, d, rng)
                         for _ in range(repeats)])
      stacked = np.stack([placements(kind, num_nodes, d, rng)
                          for _ in range(batch)]) if batch else None
      for model, topo in models:
        start = time.perf_counter()
        warm_up = np.zeros(num_nodes, np.int64)
        simulator.simulate(graph, warm_up, topo)
        first_s = time.perf_counter() - start
        ms = time_single(graph, topo, single)
        sample = simulator.simulate(graph, single[0], topo)
        rows.append({
            "topology": contended.name, "model": model, "placement": kind,
            "median_ms": float(np.median(ms)),
            "p90_ms": float(np.percentile(ms, 90)),
            "batch_ms_per_placement": (time_batch(graph, topo, stacked)
                                       if batch else None),
            "first_call_s": first_s,
            "sample_step_time_us": sample.step_time_us,
            "sample_num_transfers": sample.num_transfers,
            "repeats": repeats})
  return {
      "benchmark": "simulator_speed",
      "command": " ".join(["python -m tf_gdp.bench.simulator_speed"] +
                          sys.argv[1:]),
      "graph": {"name": graph.name, "nodes": graph.num_nodes,
                "edges": graph.num_edges, "build_s": build_s,
                "prepare_s": prepare_s},
      "compiled": compiled.HAVE_NUMBA,
      "machine": {"python": platform.python_version(),
                  "processor": platform.processor() or platform.machine()},
      "rows": rows,
  }


def format_table(result: dict) -> str:
  graph = result["graph"]
  lines = [f"simulator speed: {graph['name']} ({graph['nodes']} nodes, "
           f"{graph['edges']} edges; prepare {graph['prepare_s']:.2f} s, "
           f"compiled={result['compiled']})",
           f"{'topology':<10} {'model':<12} {'placement':<12} "
           f"{'median ms':>10} {'p90 ms':>8} {'batch ms/pl':>12} "
           f"{'transfers':>10} {'sample step ms':>15}"]
  for row in result["rows"]:
    batch = row["batch_ms_per_placement"]
    lines.append(
        f"{row['topology']:<10} {row['model']:<12} {row['placement']:<12} "
        f"{row['median_ms']:>10.1f} {row['p90_ms']:>8.1f} "
        f"{'-' if batch is None else f'{batch:.1f}':>12} "
        f"{row['sample_num_transfers']:>10} "
        f"{row['sample_step_time_us'] / 1e3:>15.1f}")
  return "\n".join(lines)


def main(argv):
  del argv
  result = run(_NUM_NODES.value, _WIDTH.value, _TOPOLOGIES.value,
               _REPEATS.value, _BATCH.value, _SEED.value, _UNCONTENDED.value)
  print(format_table(result))
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(result, indent=1))


if __name__ == "__main__":
  app.run(main)
