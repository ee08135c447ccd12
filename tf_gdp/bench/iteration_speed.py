"""How long one PPO iteration takes on a large graph.

Times `Trainer.run_iteration` (B sampled placements from one forward pass,
their simulation, the PPO epochs) on a random layered DAG or a given graph
(`--graph`, any graph spec: `gnmt8`, a file, `corpus:VARIANT`), per
topology: the
first iteration (which traces the policy's forward and backward pass) and
the median of the next ones, split into forward / evaluate / train.

Example:
  python -m tf_gdp.bench.iteration_speed --num_nodes=5000 \
      --topologies=p100x2,p100x4 --placer=transformer_xl
  python -m tf_gdp.bench.iteration_speed --graph=gnmt8 --topologies=p100x4
"""

import json
import os
import statistics
import tempfile
import time

from absl import app
from absl import flags

import tf_gdp  # pylint: disable=unused-import

# pylint: disable=g-import-not-at-top,wrong-import-position
from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp import graph_specs
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import generators
from tf_gdp.rl import environment
from tf_gdp.rl import placement_task
from tf_gdp.rl import policy_io
from tf_gdp.rl import train_config
from tf_gdp.rl import trainer as trainer_lib

_NUM_NODES = flags.DEFINE_integer("num_nodes", 5000, "Ops of the layered DAG.",
                                  lower_bound=2)
_WIDTH = flags.DEFINE_integer("width", 50, "Ops per layer.", lower_bound=1)
_GRAPH = flags.DEFINE_string("graph", None, "A graph spec to time instead "
                             "of the layered DAG.")
_TOPOLOGIES = flags.DEFINE_list("topologies", ["p100x2", "p100x4"],
                                "Topology presets or files.")
_PLACER = flags.DEFINE_enum("placer", "transformer_xl",
                            ["transformer_xl", "feedforward"], "Placer.")
_SAMPLES = flags.DEFINE_integer("samples", 16, "Placements per iteration.",
                                lower_bound=2)
_ITERATIONS = flags.DEFINE_integer("iterations", 4,
                                   "Timed iterations after the first.",
                                   lower_bound=1)
_JSON_OUT = flags.DEFINE_string("json_out", None, "Write the results here.")


def time_topology(graph, devices: str) -> dict:
  task = placement_task.PlacementTask(graph, topology_lib.get(devices))
  env = environment.PlacementEnv([task])
  started = time.perf_counter()
  env.reference(0)
  env.observation(0)
  setup_s = time.perf_counter() - started
  policy = policy_io.build_policy({"placer": _PLACER.value})
  config = train_config.TrainConfig(samples_per_graph=_SAMPLES.value,
                                    log_every_seconds=1e9)
  with tempfile.TemporaryDirectory() as root:
    started = time.perf_counter()
    trainer = trainer_lib.Trainer(env, policy, config=config,
                                  root_dir=os.path.join(root, "run"),
                                  log=lambda line: None)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    first = trainer.run_iteration()
    first_s = time.perf_counter() - started
    rows = []
    for _ in range(_ITERATIONS.value):
      started = time.perf_counter()
      stats = trainer.run_iteration()
      stats["total"] = time.perf_counter() - started
      rows.append(stats)
    started = time.perf_counter()
    trainer.save()
    save_s = time.perf_counter() - started
  median = lambda key: statistics.median(r[key] for r in rows)
  return {
      "devices": devices, "num_devices": task.topology.num_devices,
      "setup_s": setup_s, "build_s": build_s, "first_iteration_s": first_s,
      "first_forward_s": first["seconds_forward"],
      "first_train_s": first["seconds_train"],
      "iteration_s": median("total"), "forward_s": median("seconds_forward"),
      "evaluate_s": median("seconds_evaluate"),
      "train_s": median("seconds_train"), "checkpoint_s": save_s,
  }


def main(argv):
  del argv
  if _GRAPH.value:
    try:
      graph = graph_specs.load_graph(_GRAPH.value,
                                     devices=_TOPOLOGIES.value[0]).graph
    except errors.InputError as e:
      raise app.UsageError(str(e)) from e
  else:
    graph = generators.random_layered_graph(_NUM_NODES.value,
                                            width=_WIDTH.value)
  print(f"{graph.name}: {graph.num_nodes} ops, {graph.num_edges} edges; "
        f"{_PLACER.value} policy (default config), {_SAMPLES.value} samples "
        "per iteration")
  results = []
  for devices in _TOPOLOGIES.value:
    row = time_topology(graph, devices)
    results.append(row)
    print(f"{devices} ({row['num_devices']} devices): first iteration "
          f"{row['first_iteration_s']:.1f} s (tracing), then "
          f"{row['iteration_s']:.2f} s = forward {row['forward_s']:.2f} + "
          f"simulate {row['evaluate_s']:.2f} + train {row['train_s']:.2f}; "
          f"checkpoint {row['checkpoint_s']:.2f} s", flush=True)
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(
        {"graph": graph.name, "num_nodes": graph.num_nodes,
         "num_edges": graph.num_edges,
         "placer": _PLACER.value, "samples": _SAMPLES.value,
         "results": results}, indent=1))


if __name__ == "__main__":
  app.run(main)
