r"""Times the policy's forward pass and records peak memory, at a given size.

GDP must place 50k+ op graphs (GNMT-8 is ~60k ops) in bounded time and
memory; this script is the measurement behind that claim:

  python -m tf_gdp.bench.forward_speed --nodes=60000 --devices=p100x4
  python -m tf_gdp.bench.forward_speed --graph=gnmt8.json

It prints one line per stage (inputs, first call with tracing, median of
repeated calls) and the process's peak RSS, and optionally writes JSON.
"""

import json
import resource
import statistics
import sys
import time

from absl import app
from absl import flags

import numpy as np

from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import generators

_NODES = flags.DEFINE_integer("nodes", 60000, "Synthetic graph size.")
_GRAPH = flags.DEFINE_string(
    "graph", None, "An op-graph JSON file instead of a synthetic one.")
_DEVICES = flags.DEFINE_string("devices", "p100x4", "Topology preset or file.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls after the first.")
_BATCH = flags.DEFINE_integer("batch", 1, "Copies of the graph per call.")
_PLACER = flags.DEFINE_enum("placer", "transformer_xl",
                            ["transformer_xl", "feedforward"], "Placer kind.")
_GRADIENT = flags.DEFINE_bool("gradient", False,
                              "Also time a forward + backward pass.")
_OUTPUT = flags.DEFINE_string("output", None, "Write the results as JSON here.")


def _peak_rss_gib() -> float:
  scale = 1 if sys.platform == "darwin" else 1024  # bytes vs KiB
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / (1 << 30)


def run(graph, topology, *, repeats=3, batch=1, placer="transformer_xl",
        gradient=False) -> dict:
  """Measures one configuration; returns a dict of seconds and GiB."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from tf_gdp.policy import features
  from tf_gdp.policy import network

  result = {"graph": graph.name, "nodes": graph.num_nodes,
            "edges": graph.num_edges, "devices": topology.name,
            "batch": batch, "placer": placer}
  start = time.perf_counter()
  inputs = features.policy_inputs(graph, topology)
  result["inputs_s"] = time.perf_counter() - start
  single = features.as_tensors(inputs)
  observation = {k: np.stack([v] * batch) for k, v in single.items()}
  policy = network.GdpPolicy(network.PolicyConfig(placer=placer))
  forward = tf.function(lambda obs: policy(obs))

  start = time.perf_counter()
  logits = forward(observation).numpy()
  result["first_call_s"] = time.perf_counter() - start
  assert np.isfinite(logits).all()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    forward(observation).numpy()
    times.append(time.perf_counter() - start)
  result["forward_s"] = statistics.median(times)
  result["parameters"] = int(policy.count_params())
  if gradient:
    @tf.function
    def loss_and_gradient(obs):
      with tf.GradientTape() as tape:
        out = policy(obs, training=True)
        probs = tf.nn.softmax(out)
        loss = -tf.reduce_sum(probs * tf.nn.log_softmax(out))
      return tape.gradient(loss, policy.trainable_variables)
    loss_and_gradient(observation)
    start = time.perf_counter()
    loss_and_gradient(observation)
    result["forward_backward_s"] = time.perf_counter() - start
  result["peak_rss_gib"] = _peak_rss_gib()
  return result


def main(argv):
  del argv
  import tf_gdp  # pylint: disable=g-import-not-at-top,unused-import
  from tf_gdp.graph import json_io  # pylint: disable=g-import-not-at-top
  graph = (json_io.load_json(_GRAPH.value) if _GRAPH.value
           else generators.random_grid_graph(_NODES.value))
  result = run(graph, topology_lib.get(_DEVICES.value),
               repeats=_REPEATS.value, batch=_BATCH.value,
               placer=_PLACER.value, gradient=_GRADIENT.value)
  for key, value in result.items():
    print(f"{key:>20}: {value:.3f}" if isinstance(value, float)
          else f"{key:>20}: {value}")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w", encoding="utf-8") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  app.run(main)
