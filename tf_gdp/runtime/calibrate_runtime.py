"""Measures the runtime's own costs of a step on a `cpu-workers:K` cluster.

The link table prices a transfer between idle workers; two more costs show
up on real placements and decide whether a fine split pays (see
`cost.runtime_costs`):

* a step's fixed cost (`measure_step_overhead`): a trivial op on one
  worker, and one on every worker;
* how much of a small transfer's latency pipelines: `count` small tensors
  released at once between idle workers (`measure_transfer_burst`) cost
  less each than one alone;
* what a transfer costs the worker cores while they compute
  (`measure_transfer_cpu`): each worker is pinned to one core, and the gRPC
  work of sending or receiving a tensor runs on the same core as the ops.
  A ~20 ms matmul chain runs on one worker while `count` small tensors cross
  to or from it; the chain's step grows by what the transfers take from
  that core. The same ops without the transfers (every read and identity
  on the chain's worker) are the baseline, so the ops' own time cancels.
  The variants run alternately in one session (machine drift hits them
  alike); the result is the difference of medians over `count`. The same
  with a few 1 MB tensors gives the part that grows with the bytes (gRPC
  copies each byte on the worker's one core).

The executor's order and control-edge transfers are what TensorFlow does
(one inter-op thread runs the op just made ready; the partitioner sends a
dummy tensor per cross-device control edge), not measured numbers.
"""

import statistics
import time
from typing import Dict, Sequence

from grappler_bridge import tf_env

from tf_gdp.cost import runtime_costs

# The chain that keeps one worker busy: [n, n] matmuls (~20 ms on a core).
_CHAIN_SIZE, _CHAIN_MATMULS = 256, 30
_TENSOR_FLOATS = 1024  # 4 KB: small, like most of a training step's tensors
# Large tensors (1 MB each) for the per-byte part of a transfer's CPU cost:
# together they take less time on the link than the chain computes.
_LARGE_FLOATS, _LARGE_COUNT = 256 * 1024, 12


_tf = tf_env.import_tensorflow


def _session_parts(cluster, timeout_s: float):
  from tf_gdp.runtime import placed_session  # pylint: disable=g-import-not-at-top
  tf = _tf()
  config = placed_session.session_config(timeout_s=timeout_s)
  options = tf.compat.v1.RunOptions(timeout_in_ms=int(timeout_s * 1000))
  return tf, config, options


def median_times(tf, cluster, graph, init, variants, config, options,
                  repeats: int) -> Dict[str, float]:
  """Median wall time (us) of each variant's targets, run alternately.

  Two untimed passes first; then `repeats` passes over the variants in
  turn, so that drift in the machine's load hits them alike.
  """
  times = {key: [] for key in variants}
  with tf.compat.v1.Session(cluster.target, graph=graph,
                            config=config) as session:
    session.run(init, options=options)
    for _ in range(2):
      for targets in variants.values():
        session.run(targets, options=options)
    for _ in range(repeats):
      for key, targets in variants.items():
        start = time.perf_counter()
        session.run(targets, options=options)
        times[key].append((time.perf_counter() - start) * 1e6)
  return {key: float(statistics.median(v)) for key, v in times.items()}


def measure_step_overhead(cluster, *, repeats: int = 50,
                          timeout_s: float = 60.0) -> Dict[str, float]:
  """Median time of a trivial step on one worker and spanning all workers.

  What a real step pays just to exist (client -> master -> workers RPCs).
  """
  tf, config, options = _session_parts(cluster, timeout_s)
  with tf.Graph().as_default() as graph:
    ops = []
    for device in cluster.device_names:
      with tf.device(device):
        ops.append(tf.identity(tf.constant(0.0)).op)
  times = median_times(tf, cluster, graph, [],
                        {"one_worker_us": ops[:1], "all_workers_us": ops},
                        config, options, repeats)
  return times


def _busy_side_graph(tf, devices, busy: int, count: int, floats: int):
  """(graph, init ops, variants) for one side of `measure_transfer_cpu`.

  `busy` is the index (0 sender, 1 receiver) of the worker that runs the
  chain; `count` tensors of `floats` floats go from devices[0] to
  devices[1]. The local variant reads as many tensors of the same size from
  variables on the busy worker, so that both variants run the same ops.
  """
  src, dst = devices
  with tf.Graph().as_default() as graph:
    with tf.device(devices[busy]):
      square = tf.Variable(tf.random.uniform(
          [_CHAIN_SIZE, _CHAIN_SIZE], -0.05, 0.05, seed=1))
      h = square.read_value()
      for _ in range(_CHAIN_MATMULS):
        h = tf.matmul(h, square.read_value())
      chain = h.op
    sent, kept = [], []
    for i in range(count):
      with tf.device(src):
        sent.append(tf.Variable(tf.random.uniform([floats], seed=i + 2)))
      with tf.device(devices[busy]):
        kept.append(sent[-1] if busy == 0 else tf.Variable(
            tf.random.uniform([floats], seed=i + 2)))
    variants = {}
    for variant, variables, uses_on in (("transfers", sent, dst),
                                        ("local", kept, devices[busy])):
      ends = [chain]
      for variable in variables:
        with tf.device(variable.device):
          value = variable.read_value()
        with tf.device(uses_on):
          ends.append(tf.identity(value).op)
      variants[variant] = ends
    # Both variants touch both workers, so the step's RPCs cancel.
    with tf.device(devices[1 - busy]):
      other = tf.identity(tf.constant(0.0)).op
    for ends in variants.values():
      ends.append(other)
    init = [square.initializer] + [
        v.initializer for v in {id(v): v for v in sent + kept}.values()]
  return graph, init, variants


def measure_transfer_cpu(cluster, *, count: int = 128,
                         large_count: int = _LARGE_COUNT,
                         large_floats: int = _LARGE_FLOATS,
                         repeats: int = 15,
                         timeout_s: float = 60.0) -> Dict[str, float]:
  """What a busy sender and a busy receiver lose to a transfer.

  Per side, `count` small (4 KB) tensors give the fixed cost per transfer
  (`sender_us`, `receiver_us`), and `large_count` tensors of `large_floats`
  floats its growth with size (`sender_us_per_mb`, `receiver_us_per_mb`,
  per 10^6 bytes): on a one-core worker, gRPC copies every byte of a
  tensor it sends or receives on the core that runs the ops.
  """
  tf, config, options = _session_parts(cluster, timeout_s)
  devices = cluster.device_names[:2]
  result = {}
  small_mb = _TENSOR_FLOATS * 4 / 1e6
  large_mb = large_floats * 4 / 1e6
  for side, busy in (("sender", 0), ("receiver", 1)):
    per_transfer = {}
    for size, tensors, floats in (("small", count, _TENSOR_FLOATS),
                                  ("large", large_count, large_floats)):
      graph, init, variants = _busy_side_graph(tf, devices, busy, tensors,
                                               floats)
      times = median_times(tf, cluster, graph, init, variants, config,
                           options, repeats)
      per_transfer[size] = max(
          0.0, (times["transfers"] - times["local"]) / tensors)
      result[f"{side}_{size}_steps_us"] = times
    result[f"{side}_us"] = per_transfer["small"]
    result[f"{side}_us_per_mb"] = max(
        0.0, (per_transfer["large"] - per_transfer["small"])
        / (large_mb - small_mb))
  return result


def measure_transfer_burst(cluster, *, count: int = 128, repeats: int = 15,
                           timeout_s: float = 60.0) -> Dict[str, float]:
  """Microseconds per transfer when `count` small ones leave at once.

  Between idle workers, released together after ~2 ms of matmuls on the
  sender; against the same reads and identities all on the sender. The
  per-transfer figure is what a burst pays per tensor; a single transfer's
  latency is larger, and the difference is the part of it that pipelines.
  """
  tf, config, options = _session_parts(cluster, timeout_s)
  src, dst = cluster.device_names[:2]
  with tf.Graph().as_default() as graph:
    with tf.device(src):
      square = tf.Variable(tf.random.uniform(
          [_CHAIN_SIZE, _CHAIN_SIZE], -0.05, 0.05, seed=1))
      h = square.read_value()
      for _ in range(6):
        h = tf.matmul(h, square.read_value())
      variables = [tf.Variable(tf.random.uniform([_TENSOR_FLOATS],
                                                 seed=i + 2))
                   for i in range(count)]
    variants = {}
    for variant, uses_on in (("transfers", dst), ("local", src)):
      with tf.device(src), tf.control_dependencies([h]):
        values = [v.read_value() for v in variables]
      with tf.device(uses_on):
        ends = [tf.identity(value).op for value in values]
      with tf.device(dst):
        ends.append(tf.identity(tf.constant(0.0)).op)
      variants[variant] = ends
    init = [square.initializer] + [v.initializer for v in variables]
  times = median_times(tf, cluster, graph, init, variants, config, options,
                        repeats)
  return {"per_transfer_us": max(0.0, (times["transfers"] - times["local"])
                                 / count), "steps_us": times}


def median_of_rounds(rounds: Sequence[Dict]) -> Dict[str, float]:
  """Each number of one measurement's result, as the median over rounds.

  Every round runs in a fresh cluster, and one instance's figures drift by
  a quarter between instances (the per-byte cost most: a dozen 1 MB tensors
  against a 20 ms chain), so one round is not enough to price a split that
  moves tens of megabytes.
  """
  keys = [key for key, value in rounds[0].items()
          if isinstance(value, (int, float))]
  return {key: float(statistics.median(r[key] for r in rounds))
          for key in keys}


def measured_runtime_costs(step_overhead: Dict[str, float],
                           transfer_cpu: Dict[str, float],
                           burst: Dict[str, float],
                           small_transfer_us: float
                           ) -> runtime_costs.RuntimeCosts:
  """The `RuntimeCosts` of a calibrated cluster from the measurements.

  `small_transfer_us` is the link table's time for its smallest size; what
  a burst pays per transfer below it is the latency that does not pipeline.
  """
  return runtime_costs.RuntimeCosts(
      step_overhead_us=(step_overhead["one_worker_us"],
                        step_overhead["all_workers_us"]),
      control_transfers=True,
      transfer_cpu_us=(transfer_cpu["sender_us"],
                       transfer_cpu["receiver_us"]),
      transfer_cpu_us_per_mb=(transfer_cpu.get("sender_us_per_mb", 0.0),
                              transfer_cpu.get("receiver_us_per_mb", 0.0)),
      executor_order=runtime_costs.LAST_READY_FIRST,
      pipelined_latency_us=max(0.0, small_transfer_us
                               - burst["per_transfer_us"]))
