"""Does the calibrated simulator rank placements the way the real runtime does?

For each of three small real training/inference graphs (two parallel matmul
chains, an Inception-style block, an unrolled 2-layer LSTM training step),
>= 20 placements over `cpu-workers:2` (all on one worker, all on the other,
round-robin, random with colocation groups kept whole, contiguous splits of
a topological order at several cut points in both orientations).
Contiguous splits are taken of two topological orders: `OpGraph.topo_order`
(breadth-first: it interleaves parallel branches) and a depth-first one (its
pieces are branches); a variable's group goes with its first user.

Each placement is
* simulated on the calibrated `cpu-workers:2` topology with the op costs of
  the roofline for one local core (`graph_specs.op_graph_from_extracted(..., devices=...)`, scaled
  by the calibrated device speed), and, unless --noprofiled, with costs
  profiled on one worker (`measure.profile_op_times`; speed 1, since a
  profile is already this core's time);
* measured for real on a `CpuWorkerCluster(2)`: --rounds sweeps over all
  placements, each timing --repeats steps; a placement's time is the median
  of its sweeps' medians (the machine is shared: a burst of someone else's
  load then spoils one sweep's value, not the result).

The simulator has no per-step cost; a trivial step costs ~0.4 ms on one
worker and ~0.8 ms spanning two (measured at the start of the run), so the
"+overhead" variants add that to each prediction: a constant measured on
empty steps, not fitted to these graphs.

Reported per graph and pooled: Spearman rank correlation of predicted vs
measured step times, and the median absolute percentage error. Issue 3
targets Spearman >= 0.8 and a MAPE under 20%.

Example:
  python -m tf_gdp.bench.agreement_check --json_out=/tmp/agreement.json
"""

import dataclasses
import json
import os
import platform
import sys
import time

from absl import app
from absl import flags
import numpy as np
from scipy import stats

from tf_gdp import fileio
from tf_gdp.cost import topology as topology_lib
from tf_gdp.runtime import calibrate

_DEVICES = "cpu-workers:2"
# Split points of the topological order, as fractions of the total cost.
_CUT_FRACTIONS = (0.15, 0.3, 0.45, 0.6, 0.75, 0.9)
_RANDOM_SHARES = (0.5, 0.5, 0.5, 0.25, 0.25, 0.1)


# ---- graphs ------------------------------------------------------------------


def _tf():
  from grappler_bridge import tf_env  # pylint: disable=g-import-not-at-top
  tf_env.prepare_tensorflow_environment()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf


def matmul_chains(size: int = 512, length: int = 6):
  """Two independent chains of `length` [size, size] matmuls (inference).

  Chain a is traced before chain b, so the topological order has all of a
  first: a split near the middle puts one chain on each worker.
  """
  tf = _tf()
  rng = tf.random.Generator.from_seed(1)
  chains = []
  for name in ("a", "b"):
    x = tf.Variable(rng.uniform([size, size], -1.0, 1.0), name=f"{name}_x")
    ws = [tf.Variable(rng.uniform([size, size], -0.08, 0.08),
                      name=f"{name}_w{i}") for i in range(length)]
    chains.append((x, ws))

  def step():
    outputs = []
    for x, ws in chains:
      h = x
      for w in ws:
        h = tf.tanh(tf.matmul(h, w))
      outputs.append(tf.reduce_sum(h))
    return tf.add_n(outputs)

  return step


def inception_block(batch: int = 8, size: int = 28, channels: int = 64):
  """A GoogLeNet-style block (1x1, 3x3, 5x5, pool branches; concat) + head,
  forward and backward with SGD updates."""
  tf = _tf()
  rng = tf.random.Generator.from_seed(2)

  def kernel(name, shape):
    fan_in = float(np.prod(shape[:-1]))
    scale = (1.0 / fan_in) ** 0.5
    return tf.Variable(rng.uniform(shape, -scale, scale), name=name)

  images = tf.Variable(rng.uniform([batch, size, size, channels], -1.0, 1.0),
                       name="images")
  k = {
      "b1": kernel("b1_1x1", [1, 1, channels, 32]),
      "b2a": kernel("b2_1x1", [1, 1, channels, 48]),
      "b2b": kernel("b2_3x3", [3, 3, 48, 64]),
      "b3a": kernel("b3_1x1", [1, 1, channels, 16]),
      "b3b": kernel("b3_5x5", [5, 5, 16, 32]),
      "b4": kernel("b4_1x1", [1, 1, channels, 32]),
      "head": kernel("head_1x1", [1, 1, 160, 64]),
  }
  variables = list(k.values())

  def conv(x, w):
    return tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))

  def step():
    with tf.GradientTape() as tape:
      b1 = conv(images, k["b1"])
      b2 = conv(conv(images, k["b2a"]), k["b2b"])
      b3 = conv(conv(images, k["b3a"]), k["b3b"])
      b4 = conv(tf.nn.max_pool2d(images, 3, 1, "SAME"), k["b4"])
      mixed = tf.concat([b1, b2, b3, b4], axis=3)
      out = conv(mixed, k["head"])
      loss = tf.reduce_mean(tf.square(out))
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads):
      v.assign_sub(0.01 * g)
    return loss

  return step


def lstm(steps: int = 8, batch: int = 32, hidden: int = 256, layers: int = 2):
  """A statically unrolled `layers`-layer LSTM training step (SGD)."""
  tf = _tf()
  rng = tf.random.Generator.from_seed(3)
  inputs = tf.Variable(rng.uniform([steps, batch, hidden], -1.0, 1.0),
                       name="inputs")
  kernels = [tf.Variable(rng.uniform([2 * hidden, 4 * hidden], -0.1, 0.1),
                         name=f"layer{i}/kernel") for i in range(layers)]
  biases = [tf.Variable(tf.zeros([4 * hidden]), name=f"layer{i}/bias")
            for i in range(layers)]
  variables = kernels + biases

  def step():
    with tf.GradientTape() as tape:
      sequence = tf.unstack(inputs)
      for layer in range(layers):
        with tf.name_scope(f"layer{layer}"):
          c = h = tf.zeros([batch, hidden])
          outputs = []
          for t, x in enumerate(sequence):
            with tf.name_scope(f"t{t}"):
              gates = tf.matmul(tf.concat([x, h], 1), kernels[layer])
              gates = tf.nn.bias_add(gates, biases[layer])
              i, j, f, o = tf.split(gates, 4, axis=1)
              c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
              h = tf.sigmoid(o) * tf.tanh(c)
              outputs.append(h)
          sequence = outputs
      loss = tf.reduce_mean(tf.square(tf.stack(sequence)))
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads):
      v.assign_sub(0.01 * g)
    return loss

  return step


BUILDERS = {"matmul_chains": matmul_chains,
            "inception_block": inception_block, "lstm": lstm}


# ---- placements --------------------------------------------------------------


def _group_placement(graph, group_device: np.ndarray) -> np.ndarray:
  return np.asarray(group_device, np.int64)[graph.group_ids]


def _first_in_order(graph) -> np.ndarray:
  """Groups in the order their first member appears topologically."""
  seen, order = set(), []
  for node in graph.topo_order:
    group = int(graph.group_ids[node])
    if group not in seen:
      seen.add(group)
      order.append(group)
  return np.asarray(order, np.int64)


def depth_first_order(graph) -> np.ndarray:
  """A topological order that follows each chain as far as it can.

  Kahn's algorithm with a stack instead of a queue: the op just made ready
  runs next. Unlike the breadth-first `OpGraph.topo_order` (which
  interleaves independent branches), its contiguous pieces are branches, so
  splitting it gives the branch-parallel placements a human would try.
  """
  n = graph.num_nodes
  indegree = np.zeros(n, np.int64)
  np.add.at(indegree, graph.edge_dst, 1)
  successors = [[] for _ in range(n)]
  for src, dst in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
    successors[src].append(dst)
  stack = [v for v in range(n - 1, -1, -1) if indegree[v] == 0]
  order = []
  while stack:
    v = stack.pop()
    order.append(v)
    for w in sorted(set(successors[v]), reverse=True):
      indegree[w] -= successors[v].count(w)
      if indegree[w] == 0:
        stack.append(w)
  return np.asarray(order, np.int64)


def _keep_groups_with_users(graph, placement: np.ndarray) -> np.ndarray:
  """Moves each multi-op group to the device of its first outside data user.

  A variable's group (handle, read, update) is cheap itself; what matters is
  that it sits with the ops that use its value, as a human would place it.
  Groups without outside consumers go where their first member is.
  """
  order_rank = np.empty(graph.num_nodes, np.int64)
  order_rank[graph.topo_order] = np.arange(graph.num_nodes)
  groups = graph.group_ids
  sizes = np.bincount(groups)
  result = placement.copy()
  best = {}
  data = graph.edge_output >= 0  # control edges carry no value to use
  for src, dst in zip(graph.edge_src[data].tolist(),
                      graph.edge_dst[data].tolist()):
    group = groups[src]
    if sizes[group] < 2 or groups[dst] == group:
      continue
    if group not in best or order_rank[dst] < order_rank[best[group]]:
      best[group] = dst
  for group in np.flatnonzero(sizes >= 2):
    members = np.flatnonzero(groups == group)
    anchor = best.get(group, members[np.argmin(order_rank[members])])
    result[members] = placement[anchor]
  return result


def _splits(graph, order: np.ndarray, label: str) -> dict:
  """Contiguous splits of `order` at cost fractions, both orientations."""
  cost = graph.costs["CPU"][order]
  cumulative = np.cumsum(cost) / max(float(cost.sum()), 1e-9)
  result = {}
  for fraction in _CUT_FRACTIONS:
    cut = int(np.searchsorted(cumulative, fraction))
    split = np.zeros(graph.num_nodes, np.int64)
    split[order[cut + 1:]] = 1
    split = _keep_groups_with_users(graph, split)
    result[f"{label}{fraction:g}_0to1"] = split
    result[f"{label}{fraction:g}_1to0"] = 1 - split
  return result


def placements(graph, d: int, *, num_random: int, seed: int) -> dict:
  """Name -> int[num_nodes] placement; every one keeps groups whole."""
  n = graph.num_nodes
  num_groups = int(graph.group_ids.max()) + 1
  result = {f"all_on_{i}": np.full(n, i, np.int64) for i in range(d)}
  group_order = _first_in_order(graph)
  robin = np.empty(num_groups, np.int64)
  robin[group_order] = np.arange(num_groups) % d
  result["round_robin"] = _group_placement(graph, robin)
  rng = np.random.default_rng(seed)
  for r in range(num_random):
    share = _RANDOM_SHARES[r % len(_RANDOM_SHARES)]
    groups = (rng.random(num_groups) < share).astype(np.int64)
    result[f"random{r}_p{share:g}"] = _group_placement(graph, groups)
  if d == 2:
    result.update(_splits(graph, graph.topo_order, "split"))
    result.update(_splits(graph, depth_first_order(graph), "dfsplit"))
  return result


# ---- the run -----------------------------------------------------------------


def _summary(predicted, measured) -> dict:
  predicted = np.asarray(predicted, np.float64)
  measured = np.asarray([np.nan if m is None else m for m in measured],
                        np.float64)
  ok = np.isfinite(predicted) & np.isfinite(measured)
  predicted, measured = predicted[ok], measured[ok]
  if predicted.size < 3:
    return {"n": int(predicted.size), "spearman": None, "mape_pct": None}
  rho = stats.spearmanr(predicted, measured).statistic
  ape = np.abs(predicted - measured) / measured * 100.0
  return {"n": int(predicted.size), "spearman": float(rho),
          "mape_pct": float(np.median(ape)),
          "bias": float(np.median(predicted / measured))}


def run_graph(name: str, cluster, topo, *, repeats: int, warmup: int,
              rounds: int, aggregate: str, num_random: int, profiled: bool,
              compare_rewrites: bool, seed: int, step_overhead: dict,
              log=print) -> dict:
  """All placements of one graph: predictions and measurements."""
  from grappler_bridge import costs  # pylint: disable=g-import-not-at-top
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  from tf_gdp.cost import presets  # pylint: disable=g-import-not-at-top
  from tf_gdp.cost import simulator  # pylint: disable=g-import-not-at-top
  from tf_gdp.graph import json_io  # pylint: disable=g-import-not-at-top
  from tf_gdp import graph_specs  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top

  extracted = extract.from_function(BUILDERS[name]())
  roofline_graph = graph_specs.op_graph_from_extracted(
      extracted, name=name, devices=_DEVICES)
  variants = {"roofline": (roofline_graph, topo)}
  profile_coverage = None
  if profiled:
    profile = measure.profile_op_times(extracted, cluster, repeats=5)
    document = costs.op_graph_document(
        extracted, presets.kind_hardware(_DEVICES), name=name,
        profile=profile, profile_kind="CPU")
    unit_speed = dataclasses.replace(
        topo, devices=tuple(dataclasses.replace(d, speed=1.0)
                            for d in topo.devices))
    variants["profiled"] = (json_io.from_document(document), unit_speed)
    profile_coverage = document["metadata"]["profile"]
  candidates = placements(roofline_graph, topo.num_devices,
                          num_random=num_random, seed=seed)
  rows = []
  for label, placement in candidates.items():
    row = {"placement": label,
           "on_worker1": float(np.mean(placement == 1)),
           "round_medians_us": [], "reasons": []}
    overhead = step_overhead["one_worker_us" if np.all(
        placement == placement[0]) else "all_workers_us"]
    for variant, (graph, variant_topo) in variants.items():
      sim = simulator.simulate(graph, placement, variant_topo)
      row[f"{variant}_us"] = sim.step_time_us
      row[f"{variant}+overhead_us"] = sim.step_time_us + overhead
      row["transfers"] = sim.num_transfers
      row["transfer_mb"] = sim.transfer_bytes / 1e6
    rows.append(row)
  # Rounds sweep all placements in turn, so that a burst of load from other
  # processes on this shared machine hits one round, not one placement.
  for _ in range(rounds):
    for row, placement in zip(rows, candidates.values()):
      result = measure.measure(extracted, placement, cluster, topology=topo,
                               warmup=warmup, repeats=repeats)
      if result.valid:
        row["round_medians_us"].append(result.step_time_us)
      else:
        row["reasons"].append(result.reason)
  for row in rows:
    times = row["round_medians_us"]
    row["measured_median_us"] = float(np.median(times)) if times else None
    row["measured_min_us"] = float(np.min(times)) if times else None
    row["measured_us"] = row[f"measured_{aggregate}_us"]
    row["round_spread"] = (float(max(times) / min(times))
                           if len(times) > 1 else None)
    log(f"  {name:<16} {row['placement']:<18} measured "
        f"{_ms(row['measured_us']):>8} ms  roofline "
        f"{_ms(row['roofline_us']):>8} ms"
        + (f"  profiled {_ms(row['profiled_us']):>8} ms" if profiled else "")
        + (f"  ({row['reasons'][0]})" if row["reasons"] else ""))
  summary = {}
  for variant in variants:
    for key in (variant, variant + "+overhead"):
      summary[key] = _summary([r[f"{key}_us"] for r in rows],
                              [r["measured_us"] for r in rows])
  other = "min" if aggregate == "median" else "median"
  summary_other = {
      key: _summary([r[f"{key}_us"] for r in rows],
                    [r[f"measured_{other}_us"] for r in rows])
      for key in summary}
  out = {"graph": name, "nodes": roofline_graph.num_nodes,
         "edges": roofline_graph.num_edges, "rows": rows, "summary": summary,
         f"summary_{other}_of_rounds": summary_other,
         "profile_coverage": profile_coverage,
         "total_cost_us": {
             variant: float(graph.costs["CPU"].sum())
             for variant, (graph, _) in variants.items()}}
  if compare_rewrites:
    single = np.zeros(roofline_graph.num_nodes, np.int64)
    times = {"off": [], "on": []}
    for _ in range(rounds):  # alternately, as the placements
      for rewrites in (False, True):
        result = measure.measure(extracted, single, cluster, topology=topo,
                                 warmup=warmup, repeats=repeats,
                                 graph_rewrites=rewrites)
        if result.valid:
          times["on" if rewrites else "off"].append(result.step_time_us)
    out["rewrites_single_worker_us"] = {
        key: float(np.median(values)) if values else None
        for key, values in times.items()}
  return out


def _ms(us) -> str:
  return "-" if us is None or not np.isfinite(us) else f"{us / 1e3:.2f}"


def run(graph_names, *, repeats: int, warmup: int, rounds: int,
        aggregate: str, num_random: int, profiled: bool, compare_rewrites: bool,
        seed: int) -> dict:
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  topo = topology_lib.get(_DEVICES)
  calibrated = os.path.isfile(topology_lib.calibrated_path(2))
  if not calibrated:
    print("warning: no calibrated cpu-workers:2 topology; run "
          "python -m tf_gdp.runtime.calibrate --workers=2 first",
          file=sys.stderr)
  start = time.time()
  load_before = os.getloadavg()
  graphs = []
  with workers.CpuWorkerCluster(2) as cluster:
    step_overhead = calibrate.measure_step_overhead(cluster)
    for name in graph_names:
      graphs.append(run_graph(
          name, cluster, topo, repeats=repeats, warmup=warmup,
          rounds=rounds, aggregate=aggregate, num_random=num_random,
          profiled=profiled, compare_rewrites=compare_rewrites, seed=seed,
          step_overhead=step_overhead))
  overall, overall_other = {}, {}
  other = "min" if aggregate == "median" else "median"
  for variant in graphs[0]["summary"]:
    predicted = [r[f"{variant}_us"] for g in graphs for r in g["rows"]]
    overall[variant] = _summary(
        predicted, [r["measured_us"] for g in graphs for r in g["rows"]])
    overall_other[variant] = _summary(
        predicted,
        [r[f"measured_{other}_us"] for g in graphs for r in g["rows"]])
  return {
      "benchmark": "agreement_check",
      "command": " ".join(["python -m tf_gdp.bench.agreement_check"] +
                          sys.argv[1:]),
      "date": time.strftime("%Y-%m-%d %H:%M"),
      "topology": {"path": topology_lib.calibrated_path(2) if calibrated
                   else None,
                   "latency_us": topo.latency_us.tolist(),
                   "bandwidth_gbps": topo.bandwidth_gbps.tolist(),
                   "speed": topo.speeds.tolist()},
      "machine": {"python": platform.python_version(),
                  "cpus": os.cpu_count(), "load_before": load_before,
                  "load_after": os.getloadavg()},
      "seconds": time.time() - start,
      "rounds": rounds, "repeats": repeats, "warmup": warmup,
      "step_overhead_us": step_overhead,
      "graphs": graphs,
      "aggregate": aggregate,
      "overall": overall,
      f"overall_{other}_of_rounds": overall_other,
  }


def format_table(result: dict) -> str:
  variants = list(result["overall"])
  header = f"{'graph':<16} {'nodes':>6} {'placements':>10}"
  for variant in variants:
    header += f" | {variant + ' rho':>21} {'MAPE%':>6}"
  lines = ["agreement with reality on cpu-workers:2 (simulated vs measured "
           f"step time, {result['aggregate']} of {result['rounds']} sweeps' "
           "medians; Spearman rho, median abs % error)", header]

  def cells(summary):
    text = ""
    for variant in variants:
      s = summary[variant]
      rho = "-" if s["spearman"] is None else f"{s['spearman']:.3f}"
      mape = "-" if s["mape_pct"] is None else f"{s['mape_pct']:.1f}"
      text += f" | {rho:>21} {mape:>6}"
    return text

  for g in result["graphs"]:
    lines.append(f"{g['graph']:<16} {g['nodes']:>6} {len(g['rows']):>10}"
                 + cells(g["summary"]))
  total = sum(len(g["rows"]) for g in result["graphs"])
  lines.append(f"{'pooled':<16} {'':>6} {total:>10}" + cells(result["overall"]))
  rewrites = [(g["graph"], g.get("rewrites_single_worker_us"))
              for g in result["graphs"] if g.get("rewrites_single_worker_us")]
  if rewrites:
    lines.append("single-worker step with Grappler rewrites off / on (ms):")
    for name, both in rewrites:
      lines.append(f"  {name:<16} {_ms(both['off'])} / {_ms(both['on'])}")
  return "\n".join(lines)


def main(argv):
  del argv
  unknown = sorted(set(_GRAPHS.value) - set(BUILDERS))
  if unknown:
    sys.exit(f"error: unknown graph(s) {unknown}; known: {sorted(BUILDERS)}")
  result = run(_GRAPHS.value, repeats=_REPEATS.value, warmup=_WARMUP.value,
               rounds=_ROUNDS.value, aggregate=_AGGREGATE.value,
               num_random=_RANDOM.value,
               profiled=_PROFILED.value,
               compare_rewrites=_COMPARE_REWRITES.value, seed=_SEED.value)
  print(format_table(result))
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(result, indent=1))


if __name__ == "__main__":
  # Flags live here, not at module level, so that other code (tests, the CLI,
  # another benchmark) can import this module's functions.
  _GRAPHS = flags.DEFINE_list(
      "graphs", ["matmul_chains", "inception_block", "lstm"],
      "Benchmark graphs to run.")
  _REPEATS = flags.DEFINE_integer("repeats", 5, "Timed steps per placement.",
                                  lower_bound=1)
  _WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed steps per placement.",
                                 lower_bound=0)
  _ROUNDS = flags.DEFINE_integer(
      "rounds", 3, "Sweeps over all placements; a placement's time is the "
      "median of its sweeps' medians.", lower_bound=1)
  _AGGREGATE = flags.DEFINE_enum(
      "aggregate", "median", ["median", "min"],
      "How a placement's sweeps combine: their median, or the least disturbed "
      "(min) one; the JSON has the summary of the other too.")
  _RANDOM = flags.DEFINE_integer(
      "random_placements", 6, "Random group-respecting placements per graph.",
      lower_bound=0)
  _PROFILED = flags.DEFINE_boolean(
      "profiled", True, "Also predict with per-op costs profiled on a worker.")
  _COMPARE_REWRITES = flags.DEFINE_boolean(
      "compare_rewrites", True, "Also time the single-worker placement with "
      "Grappler's rewrites on and off, once per sweep.")
  _SEED = flags.DEFINE_integer("seed", 0, "Seed of the random placements.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Where to write the JSON.")
  app.run(main)
