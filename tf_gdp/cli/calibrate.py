"""`tf-gdp calibrate`: measure this machine's cpu-workers:K links (and speed).

Examples:
  tf-gdp calibrate --workers=2
  tf-gdp calibrate --workers=2 --compute --json_out=calibration.json

Starts K single-core TF worker processes, times tensors of 1 KB to 64 MB sent
between them in the middle of a step (fresh clusters, median round), fits
latency + bytes / bandwidth and, with --compute, each worker's speed against
the roofline, and saves the topology file that `--devices=cpu-workers:K` then
reads (`tf_gdp.runtime.calibrate` describes the method). Without it,
cpu-workers:K uses guessed links, and reports say so.
"""

import json

from absl import flags

from tf_gdp import fileio
from tf_gdp.rl import cli_lib

_WORKERS = flags.DEFINE_integer("workers", 2, "Worker processes (K).",
                                lower_bound=2, upper_bound=64)
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Transfer measurement rounds, "
                               "each in a fresh cluster (median per size).",
                               lower_bound=1)
_COMPUTE = flags.DEFINE_boolean("compute", False,
                                "Also calibrate each worker's speed factor.")
_OUT = flags.DEFINE_string("out", None, "Topology file to write (default: "
                           "where cpu-workers:K looks, under $TF_GDP_HOME).")
_JSON_OUT = flags.DEFINE_string("json_out", None,
                                "Also write the calibration report here.")


def main(argv):
  del argv
  cli_lib.quiet_tensorflow_logs()
  from tf_gdp.runtime import calibrate  # pylint: disable=g-import-not-at-top
  report = calibrate.calibrate(_WORKERS.value, rounds=_ROUNDS.value,
                               compute=_COMPUTE.value, out_path=_OUT.value,
                               log=cli_lib.progress)
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(report, indent=1))
  print(f"cpu-workers:{_WORKERS.value} calibrated: {report['topology_path']}")
