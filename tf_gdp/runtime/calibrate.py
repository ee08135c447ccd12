"""Calibrates the `cpu-workers:K` topology against this machine.

The simulator can only predict the real testbed if its link and device
figures are the testbed's. This measures them with the real runtime and
saves a topology file (`topology.calibrated_path(K)`), which
`topology.get("cpu-workers:K")` then reads:

* links: the time to send a float32 tensor of 1 KB .. 64 MB from worker
  `src` to worker `dst` in the middle of a step, from step times of a
  ping-pong graph minus the same graph run all on `src` (see
  `measure_transfers`); `--rounds` fresh clusters, median round per size.
  A least-squares fit of `latency + bytes / bandwidth`, weighted by relative
  error (small and large transfers count alike), gives the link's latency
  and bandwidth. Both directions between workers 0 and 1 are measured, and
  every pair gets their mean (points and fit): loopback is the same for
  every pair, and the two directions' difference in the ping-pong (up to 2x
  on small tensors) does not show in real steps, whose splits measure alike
  in both orientations (docs/BENCHMARKS.md).
* compute (optional, `--compute`): the roofline (`local_cpu_core`) prices
  two calibration graphs (an MLP and a conv stack, training steps) unlike
  the ones benchmarks use; each is timed on every worker in turn, and per
  worker the geometric mean of roofline / (measured - trivial step time)
  becomes that device's `speed` (the workers measured up to 10% apart on
  this machine; worker 0 also hosts the session's master).
* the runtime's own costs (`calibrate_runtime`): a step's fixed cost and
  what a transfer takes from a busy worker's core, measured in every round
  and saved, each figure the median over rounds, as the topology's
  `runtime` (`cost.runtime_costs`).

Run it as `tf-gdp calibrate --workers=2 [--compute]`.
"""

import dataclasses
import json
import os
import time
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
from scipy import optimize

from grappler_bridge import tf_env

from tf_gdp import errors
from tf_gdp.cost import runtime_costs
from tf_gdp.cost import topology as topology_lib
from tf_gdp.runtime import calibrate_runtime
from tf_gdp.runtime import calibrate_speed

# What a saved calibration must hold to be used as it is: a file without one
# of these runtime fields was measured by an older version.
_CURRENT_RUNTIME_FIELDS = ("transfer_cpu_us_per_mb",)
# Transfer sizes: 1 KB .. 64 MB, x4 apart.
DEFAULT_SIZES = tuple(1024 * 4 ** i for i in range(9))
_FLOAT_BYTES = 4
# Timed steps per size and variant; small transfers are noisier and cheap.
_REPEATS_SMALL, _REPEATS_LARGE, _REPEATS_TOKEN = 30, 10, 60
_LARGE_BYTES = 4 << 20
# The sender computes this many [n, n] matmuls (~2 ms) before the payload.
_DELAY_SIZE, _DELAY_MATMULS = 256, 6


@dataclasses.dataclass(frozen=True)
class TransferPoint:
  """One measured transfer size (median step times, microseconds)."""
  nbytes: int
  remote_us: float  # step with the consumer on the other worker
  local_us: float  # same step, consumer on the sender
  transfer_us: float  # remote - local


@dataclasses.dataclass(frozen=True)
class LinkFit:
  """`time_us = latency_us + nbytes / (bandwidth_gbps * 1e3)`."""
  latency_us: float
  bandwidth_gbps: float
  points: int

  def predict_us(self, nbytes) -> np.ndarray:
    return self.latency_us + np.asarray(nbytes, np.float64) / (
        self.bandwidth_gbps * 1e3)


def fit_link(nbytes: Sequence[float], times_us: Sequence[float]) -> LinkFit:
  """Least-squares latency + bytes/bandwidth, minimizing relative error.

  Points with a non-positive time (noise swamped a tiny transfer) carry no
  information about a relative error and are dropped. Latency is kept >= 0.

  Raises:
    InputError: fewer than two usable points, or mismatched lengths.
  """
  x = np.asarray(nbytes, np.float64)
  t = np.asarray(times_us, np.float64)
  if x.shape != t.shape or x.ndim != 1:
    raise errors.InputError("fit_link needs two equally long 1-D sequences")
  keep = (t > 0) & np.isfinite(t) & (x >= 0)
  x, t = x[keep], t[keep]
  if x.size < 2 or np.unique(x).size < 2:
    raise errors.InputError(
        "fit_link needs at least two positive times at different sizes")
  scale = x.max()  # keeps the two columns of similar magnitude
  design = np.stack([np.ones_like(x), x / scale], axis=1) / t[:, None]
  result = optimize.lsq_linear(design, np.ones_like(t),
                               bounds=([0.0, 1e-12], [np.inf, np.inf]))
  latency, us_per_scaled_byte = result.x
  us_per_byte = us_per_scaled_byte / scale
  return LinkFit(latency_us=float(latency),
                 bandwidth_gbps=float(1.0 / (us_per_byte * 1e3)),
                 points=int(x.size))


# ---- transfers ---------------------------------------------------------------


_tf = tf_env.import_tensorflow


def measure_transfers(cluster, sizes: Sequence[int] = DEFAULT_SIZES, *,
                      src: int = 0, dst: int = 1,
                      repeats: Optional[int] = None,
                      timeout_s: float = 120.0) -> List[TransferPoint]:
  """Times sending tensors of `sizes` bytes from worker `src` to `dst`.

  What the simulator calls a transfer is mid-step: the receiving worker
  asked for the tensor when its part of the step began (a `_Recv` has no
  inputs), and the tensor goes out when its producer ends. So each size is
  a ping-pong in the middle of a step: ~2 ms of matmuls on src, then the
  payload is read there and sent to dst, whose Identity of it sends a
  4-byte token back to src, where the step ends. The local variant runs the
  same ops all on src (plus a no-op step part on dst, so both variants span
  two workers and pay the same RPC overhead). Their difference is the
  payload's trip plus the token's; a ping-pong with a 4-byte payload is two
  token trips, so half of it is subtracted. Both variants run alternately
  in one session, so that drift in the machine's load hits them alike;
  each time is the difference of medians.
  """
  from tf_gdp.runtime import placed_session  # pylint: disable=g-import-not-at-top
  tf = _tf()
  devices = cluster.device_names
  if not (0 <= src < len(devices) and 0 <= dst < len(devices)) or src == dst:
    raise errors.InputError(f"src/dst must be two different tasks of "
                            f"{len(devices)} workers, got {src}, {dst}")
  config = placed_session.session_config(timeout_s=timeout_s)
  options = tf.compat.v1.RunOptions(timeout_in_ms=int(timeout_s * 1000))

  def round_trip(n: int, count: int):
    graph, variants = _ping_pong_graph(tf, devices[src], devices[dst], n)
    times = calibrate_runtime.median_times(
        tf, cluster, graph, graph.get_collection(_INIT), variants, config,
        options, count)
    return times["remote"], times["local"]

  remote, local = round_trip(1, _REPEATS_TOKEN)
  token_us = (remote - local) / 2.0
  points = []
  for nbytes in sizes:
    n = max(1, int(nbytes) // _FLOAT_BYTES)
    count = repeats or (_REPEATS_LARGE if nbytes >= _LARGE_BYTES
                        else _REPEATS_SMALL)
    remote, local = round_trip(n, count)
    points.append(TransferPoint(nbytes=n * _FLOAT_BYTES, remote_us=remote,
                                local_us=local,
                                transfer_us=remote - local - token_us))
  return points


_INIT = "tf_gdp_calibration_init"


def _ping_pong_graph(tf, src_device: str, dst_device: str, n: int):
  """One transfer size: (graph, {"remote": targets, "local": targets})."""
  with tf.Graph().as_default() as graph:
    with tf.device(src_device):
      payload_variable = tf.Variable(tf.random.uniform([n], seed=1),
                                     name="payload")
      square = tf.Variable(tf.random.uniform([_DELAY_SIZE, _DELAY_SIZE],
                                             -0.05, 0.05, seed=2),
                           name="delay")
      for variable in (payload_variable, square):
        graph.add_to_collection(_INIT, variable.initializer)
    ends = {}
    for variant, there in (("remote", dst_device), ("local", src_device)):
      with tf.device(src_device):
        h = square.read_value()
        for _ in range(_DELAY_MATMULS):
          h = tf.matmul(h, square.read_value())
        with tf.control_dependencies([h]):
          payload = payload_variable.read_value()
      with tf.device(there):
        received = tf.identity(payload)
        with tf.control_dependencies([received]):
          token = tf.constant(0.0)
      with tf.device(src_device):
        ends[variant] = tf.identity(token).op
    with tf.device(dst_device):
      # The local variant's part on dst, so that it too spans two workers.
      dst_part = tf.identity(tf.constant(0.0)).op
  return graph, {"remote": [ends["remote"]],
                 "local": [ends["local"], dst_part]}


# ---- the topology ------------------------------------------------------------


def stale_reason(num_workers: int) -> Optional[str]:
  """Why cpu-workers:K must be calibrated (again) before use, or None.

  Never measured here, or measured by a version that did not yet measure
  every runtime cost the simulator now charges. An unreadable file is left
  to `topology.get`, which says what is wrong with it.
  """
  path = topology_lib.calibrated_path(num_workers)
  try:
    with open(path, encoding="utf-8") as f:
      document = json.load(f)
  except FileNotFoundError:
    return "links never measured here"
  except (OSError, ValueError):
    return None
  runtime = document.get("runtime") if isinstance(document, dict) else None
  missing = [field for field in _CURRENT_RUNTIME_FIELDS
             if not isinstance(runtime, dict) or field not in runtime]
  if missing:
    return f"calibrated by an older version (without {', '.join(missing)})"
  return None


def calibrated_topology(num_workers: int, links: Dict[tuple, LinkFit],
                        speed: Union[float, Sequence[float]] = 1.0,
                        tables: Optional[Dict[tuple, Sequence[TransferPoint]]]
                        = None,
                        runtime: Optional[runtime_costs.RuntimeCosts] = None
                        ) -> topology_lib.Topology:
  """cpu-workers:K with measured links ((src, dst) -> fit) and speed.

  `speed` is every worker's, or one per worker.

  Pairs not measured get the mean latency and the harmonic-mean bandwidth
  (i.e. mean time per byte) of the measured ones. With `tables` (the
  measured median points per link, same sizes on every link), the topology
  also carries them as its link table (see `topology`), monotone
  non-decreasing in size; unmeasured pairs get the mean table.
  """
  if not links:
    raise errors.InputError("calibrated_topology needs at least one link fit")
  base = topology_lib.get(f"{topology_lib.CPU_WORKERS}:{num_workers}")
  mean_latency = float(np.mean([f.latency_us for f in links.values()]))
  mean_bandwidth = float(1.0 / np.mean(
      [1.0 / f.bandwidth_gbps for f in links.values()]))
  bandwidth = np.full((num_workers, num_workers), mean_bandwidth)
  latency = np.full((num_workers, num_workers), mean_latency)
  for (src, dst), fit in links.items():
    bandwidth[src, dst] = fit.bandwidth_gbps
    latency[src, dst] = fit.latency_us
  np.fill_diagonal(latency, 0.0)
  table_bytes = table_us = None
  if tables:
    table_bytes, table_us = _link_tables(num_workers, tables)
    # The table starts at its first point: no link's latency may exceed it.
    latency = np.minimum(latency, table_us[..., 0])
  speeds = np.broadcast_to(np.asarray(speed, np.float64), (num_workers,))
  devices = [topology_lib.Device(dev.name, dev.kind, dev.memory_bytes,
                                 float(v))
             for dev, v in zip(base.devices, speeds)]
  return topology_lib.custom(f"{topology_lib.CPU_WORKERS}:{num_workers}",
                             devices, bandwidth, latency,
                             hardware={"CPU": "local_cpu_core"},
                             table_bytes=table_bytes, table_us=table_us,
                             runtime=runtime)


def _link_tables(num_workers: int,
                 tables: Dict[tuple, Sequence[TransferPoint]]):
  """(bytes[k], us[K, K, k]) from measured points; noise made monotone."""
  sizes = None
  rows = {}
  for link, points in tables.items():
    points = sorted(points, key=lambda p: p.nbytes)
    link_sizes = [p.nbytes for p in points]
    if sizes is None:
      sizes = link_sizes
    elif link_sizes != sizes:
      raise errors.InputError("every link table must use the same sizes")
    # A smaller tensor never takes longer: a dip is noise, so hold the max.
    rows[link] = np.maximum.accumulate(
        np.maximum([p.transfer_us for p in points], 0.0))
  if not sizes:
    raise errors.InputError("link tables need at least one point")
  mean_row = np.mean(list(rows.values()), axis=0)
  table = np.tile(mean_row, (num_workers, num_workers, 1))
  for (src, dst), row in rows.items():
    table[src, dst] = row
  for i in range(num_workers):
    table[i, i] = 0.0
  return np.asarray(sizes, np.float64), table


def pooled_links(num_workers: int, fits: Dict[tuple, LinkFit],
                 tables: Dict[tuple, Sequence[TransferPoint]]):
  """(fits, tables) for every pair of workers: the measured ones' mean.

  Every pair is the same loopback. The fit takes the mean latency and the
  harmonic-mean bandwidth (mean time per byte); the table, per size, the
  mean point of the measured directions (the same sizes in each).
  """
  pooled = LinkFit(
      latency_us=float(np.mean([f.latency_us for f in fits.values()])),
      bandwidth_gbps=float(1.0 / np.mean(
          [1.0 / f.bandwidth_gbps for f in fits.values()])),
      points=sum(f.points for f in fits.values()))
  points = [TransferPoint(
      nbytes=same[0].nbytes,
      remote_us=float(np.mean([p.remote_us for p in same])),
      local_us=float(np.mean([p.local_us for p in same])),
      transfer_us=float(np.mean([p.transfer_us for p in same])))
            for same in zip(*tables.values())]
  pairs = [(i, j) for i in range(num_workers) for j in range(num_workers)
           if i != j]
  return ({pair: pooled for pair in pairs},
          {pair: points for pair in pairs})


def median_points(rounds: Sequence[Sequence[TransferPoint]]
                 ) -> List[TransferPoint]:
  """Per size, the point of the median round (by transfer time).

  One round's points can be off by 20-40% on this shared machine, and not
  only from load: large transfers in one cluster instance ran ~1.8x faster
  than in the next. Rounds in fresh clusters, and their median, are much
  steadier.
  """
  by_size: Dict[int, List[TransferPoint]] = {}
  for points in rounds:
    for point in points:
      by_size.setdefault(point.nbytes, []).append(point)
  result = []
  for nbytes in sorted(by_size):
    ranked = sorted(by_size[nbytes], key=lambda p: p.transfer_us)
    result.append(ranked[(len(ranked) - 1) // 2])
  return result


# The runtime's own costs, measured in every round (median over rounds).
_RUNTIME_MEASUREMENTS = {
    "step_overhead": calibrate_runtime.measure_step_overhead,
    "transfer_cpu": calibrate_runtime.measure_transfer_cpu,
    "transfer_burst": calibrate_runtime.measure_transfer_burst,
}


def calibrate(num_workers: int, *, sizes: Sequence[int] = DEFAULT_SIZES,
              rounds: int = 3, compute: bool = False,
              out_path: Optional[str] = None, log=print) -> dict:
  """Measures links (and optionally speed), saves the topology, reports."""
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  if num_workers < 2:
    raise errors.InputError("calibration needs at least 2 workers")
  out_path = out_path or topology_lib.calibrated_path(num_workers)
  if rounds < 1:
    raise errors.InputError("rounds must be >= 1")
  report = {"workers": num_workers, "date": time.strftime("%Y-%m-%d %H:%M"),
            "rounds": rounds, "load_before": os.getloadavg(),
            "links": {}, "transfers": {}, "transfer_rounds_us": {}}
  fits = {}
  tables = {}
  directions = ((0, 1), (1, 0))
  rounds_by_direction = {direction: [] for direction in directions}
  speed = 1.0
  runtime_rounds = {name: [] for name in _RUNTIME_MEASUREMENTS}
  for round_index in range(rounds):
    # A fresh cluster per round: the instance itself is a source of variance.
    with workers.CpuWorkerCluster(num_workers) as cluster:
      for src, dst in directions:
        rounds_by_direction[(src, dst)].append(
            measure_transfers(cluster, sizes, src=src, dst=dst))
      for name, measure in _RUNTIME_MEASUREMENTS.items():
        runtime_rounds[name].append(measure(cluster))
      if round_index < rounds - 1:
        continue
      if compute:
        report["compute"] = calibrate_speed.measure_speed(
            cluster,
            step_overhead_us=calibrate_runtime.median_of_rounds(
                runtime_rounds["step_overhead"])["one_worker_us"])
        speed = calibrate_speed.worker_speeds(report["compute"])
        log("device speed (roofline / measured, geometric mean), per "
            f"worker: {', '.join(f'{v:.3f}' for v in speed)}")
  report["runtime_rounds"] = runtime_rounds
  for name, measured in runtime_rounds.items():
    report[name] = calibrate_runtime.median_of_rounds(measured)
  for (src, dst), measured in rounds_by_direction.items():
    points = median_points(measured)
    fit = fit_link([p.nbytes for p in points],
                   [p.transfer_us for p in points])
    fits[(src, dst)] = fit
    tables[(src, dst)] = points
    key = f"{src}->{dst}"
    report["transfers"][key] = [dataclasses.asdict(p) for p in points]
    report["transfer_rounds_us"][key] = [
        [p.transfer_us for p in one_round] for one_round in measured]
    report["links"][key] = dataclasses.asdict(fit)
    log(f"link {key}: latency {fit.latency_us:.1f} us, bandwidth "
        f"{fit.bandwidth_gbps:.3f} GB/s ({fit.points} points)")
  fits, tables = pooled_links(num_workers, fits, tables)
  report["speed"] = speed
  report["load_after"] = os.getloadavg()
  runtime = calibrate_runtime.measured_runtime_costs(
      report["step_overhead"], report["transfer_cpu"],
      report["transfer_burst"],
      small_transfer_us=min(points[0].transfer_us
                            for points in tables.values()))
  report["runtime"] = runtime_costs.to_document(runtime)
  log(f"step overhead {runtime.step_overhead_us[0]:.0f} us on one worker, "
      f"{runtime.step_overhead_us[1]:.0f} us on all; a transfer costs a busy "
      f"sender {runtime.transfer_cpu_us[0]:.0f} us, a busy receiver "
      f"{runtime.transfer_cpu_us[1]:.0f} us; {runtime.pipelined_latency_us:.0f}"
      " us of a transfer's latency pipelines")
  per_mb = [(r.get("sender_us_per_mb", 0.0), r.get("receiver_us_per_mb", 0.0))
            for r in runtime_rounds["transfer_cpu"]]
  log("per MB sent / received, by round (the median is saved): " + ", ".join(
      f"{sent:.0f} / {received:.0f} us" for sent, received in per_mb))
  topo = calibrated_topology(num_workers, fits, speed, tables, runtime)
  topology_lib.save(topo, out_path)
  report["topology_path"] = out_path
  log(f"saved {out_path}")
  return report
