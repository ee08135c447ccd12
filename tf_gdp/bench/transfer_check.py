"""Measured transfer times between two cpu-workers vs the calibrated link model.

The simulator prices a cross-device tensor with the link model
`tf-gdp calibrate` saved for `cpu-workers:2`: the measured
link table (piecewise linear in bytes) when there is one, else
`latency + bytes / bandwidth`; the straight-line fit is shown beside it.
This measures transfer times again (the calibration's mid-step ping-pong
method, `--rounds` rounds each in a fresh cluster, median per size) for
1 KB .. 64 MB in both directions and prints them next to the model's
prediction. The target is within 25% from 1 MB up.

Example:
  python -m tf_gdp.bench.transfer_check --json_out=transfer_check.json
"""

import json
import os
import statistics
import sys
import time

from absl import app
from absl import flags

from tf_gdp import fileio
from tf_gdp.cost import topology as topology_lib
from tf_gdp.runtime import calibrate

_DEVICES = "cpu-workers:2"


def run(rounds: int, tolerance: float, from_bytes: int) -> dict:
  """Measures both directions `rounds` times; compares with the topology."""
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  topo = topology_lib.get(_DEVICES)
  calibrated = os.path.isfile(topology_lib.calibrated_path(2))
  if not calibrated:
    print("warning: no calibrated cpu-workers:2 topology; comparing with the "
          "uncalibrated defaults", file=sys.stderr)
  load_before = os.getloadavg()
  samples = {}
  for _ in range(rounds):
    # A fresh cluster per round, as in the calibration: large transfers vary
    # between cluster instances, not only over time.
    with workers.CpuWorkerCluster(2) as cluster:
      for src, dst in ((0, 1), (1, 0)):
        for point in calibrate.measure_transfers(cluster, src=src, dst=dst):
          samples.setdefault((src, dst, point.nbytes), []).append(
              point.transfer_us)
  rows = []
  for (src, dst, nbytes), times in sorted(samples.items()):
    measured = statistics.median(times)
    predicted = topo.transfer_us(src, dst, nbytes)
    linear = float(topo.latency_us[src, dst] +
                   nbytes / (topo.bandwidth_gbps[src, dst] * 1e3))
    error = predicted / measured - 1.0 if measured > 0 else float("inf")
    rows.append({"src": src, "dst": dst, "bytes": nbytes,
                 "measured_us": measured, "rounds_us": times,
                 "predicted_us": predicted, "rel_error": error,
                 "linear_us": linear,
                 "linear_rel_error": linear / measured - 1.0
                                     if measured > 0 else float("inf"),
                 "checked": nbytes >= from_bytes,
                 "within": abs(error) <= tolerance})
  checked = [r for r in rows if r["checked"]]
  return {
      "benchmark": "transfer_check",
      "command": " ".join(["python -m tf_gdp.bench.transfer_check"] +
                          sys.argv[1:]),
      "date": time.strftime("%Y-%m-%d %H:%M"),
      "topology_path": topology_lib.calibrated_path(2) if calibrated else None,
      "model": "table" if topo.table_bytes is not None else "linear",
      "links": {f"{s}->{d}": {
          "latency_us": float(topo.latency_us[s, d]),
          "bandwidth_gbps": float(topo.bandwidth_gbps[s, d])}
                for s, d in ((0, 1), (1, 0))},
      "tolerance": tolerance, "from_bytes": from_bytes, "rounds": rounds,
      "load_before": load_before, "load_after": os.getloadavg(),
      "rows": rows,
      "all_within": all(r["within"] for r in checked),
      "max_abs_error_checked": max(abs(r["rel_error"]) for r in checked)
                               if checked else None,
  }


def _size(nbytes: int) -> str:
  if nbytes >= 1 << 20:
    return f"{nbytes >> 20} MB"
  return f"{nbytes >> 10} KB"


def format_table(result: dict) -> str:
  lines = ["transfer times between cpu-workers (mid-step, median of "
           f"{result['rounds']} rounds) vs the calibrated link model"]
  for key, link in result["links"].items():
    lines.append(f"  model {key}: latency {link['latency_us']:.1f} us, "
                 f"bandwidth {link['bandwidth_gbps']:.3f} GB/s")
  lines.append(f"  link model used by the simulator: {result['model']}")
  lines.append(f"{'link':<6} {'size':>7} {'measured us':>12} "
               f"{'model us':>10} {'error':>8}  ok  {'line us':>10} "
               f"{'error':>8}")
  for r in result["rows"]:
    mark = ("yes" if r["within"] else "NO") if r["checked"] else "-"
    lines.append(f"{r['src']}->{r['dst']:<3} {_size(r['bytes']):>7} "
                 f"{r['measured_us']:>12.1f} {r['predicted_us']:>10.1f} "
                 f"{r['rel_error'] * 100:>+7.1f}%  {mark:<3} "
                 f"{r['linear_us']:>10.1f} {r['linear_rel_error'] * 100:>+7.1f}%")
  worst = result["max_abs_error_checked"]
  lines.append(
      f"from {_size(result['from_bytes'])} up: "
      f"{'all within' if result['all_within'] else 'NOT all within'} "
      f"{result['tolerance'] * 100:.0f}% (worst {worst * 100:.1f}%)"
      if worst is not None else "no size checked")
  return "\n".join(lines)


def main(argv):
  del argv
  result = run(_ROUNDS.value, _TOLERANCE.value, _FROM_BYTES.value)
  print(format_table(result))
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(result, indent=1))


if __name__ == "__main__":
  # Flags live here, not at module level, so that other code (tests, the CLI,
  # another benchmark) can import this module's functions.
  _ROUNDS = flags.DEFINE_integer("rounds", 3, "Independent measurement rounds "
                                 "(median per size).", lower_bound=1)
  _TOLERANCE = flags.DEFINE_float(
      "tolerance", 0.25, "Allowed relative error from --from_bytes up.")
  _FROM_BYTES = flags.DEFINE_integer("from_bytes", 1 << 20,
                                     "Smallest size the tolerance applies to.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Where to write the JSON.")
  app.run(main)
