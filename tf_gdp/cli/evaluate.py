"""`tf-gdp evaluate`: the simulated step time of a given placement, per device.

Examples:
  tf-gdp place --graphs=layered:200 --devices=p100x4 --method=metis --out=out/
  tf-gdp evaluate --graph=layered:200 --placement=out/layered_200/placement.json
  tf-gdp evaluate --graph=gnmt2 --placement=single_device --devices=p100x4 \
      --json_out=single.json

Prints the step time the simulator predicts for the placement (the judge of
`place`, so the two agree), the lower bound, whether the placement is valid
(and why not), and per device its busy time, peak memory against capacity,
ops placed and bytes sent and received. `--placement` is a placement file or
a baseline's name (write `./metis` for a file named like a baseline).
Nothing of the graph runs.
"""

import json

from absl import flags

from tf_gdp import evaluation
from tf_gdp import fileio
from tf_gdp.cli import graph_flags

_GRAPH = graph_flags.define_graph(__name__)
_PLACEMENT = flags.DEFINE_string(
    "placement", None, "A placement file (from `place`, `finetune --out` or "
    "PlacedFunction.save), or a baseline name (single_device, metis, m_etf, "
    "...) to evaluate the placement it finds.", required=True)
_DEVICES = flags.DEFINE_string(
    "devices", None, "Topology: a preset or a topology .json file (default: "
    "the preset the placement file was made for).")
_SEED = flags.DEFINE_integer(
    "seed", 0, "Seeds a randomized baseline.", lower_bound=0)
_JSON_OUT = flags.DEFINE_string(
    "json_out", None, "Also write the report as JSON here (step_time_us, "
    "valid, reason, devices, transfer_bytes, lower_bound_us, ...).")
_SIGNATURE = graph_flags.define_signature(__name__)
_INPUT_SHAPES = graph_flags.define_input_shapes(__name__)


def main(argv):
  del argv
  report = evaluation.evaluate(_GRAPH.value, _PLACEMENT.value,
                               devices=_DEVICES.value,
                               signature=_SIGNATURE.value,
                               input_shapes=_INPUT_SHAPES.value,
                               seed=_SEED.value)
  print(evaluation.format_report(report))
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(report, indent=1))
