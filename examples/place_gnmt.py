"""Builds the GNMT training step and prepares it for placement.

Run with no flags (`make demo`): builds a 2-layer GNMT training step
(statically unrolled LSTM encoder/decoder with attention), flattens it with
Grappler, prices every op for the chosen device preset and prints the graph
summary. Placement with GDP and the baselines lands here in later versions.

  python examples/place_gnmt.py --num_layers=4 --devices=v100x8
"""

from absl import app
from absl import flags

from tf_gdp.cost import presets
from tf_gdp.graph import json_io
from tf_gdp.graph import sources
from tf_gdp.graph import describe

_NUM_LAYERS = flags.DEFINE_integer("num_layers", 2, "LSTM layers in encoder and decoder.",
                                   lower_bound=1)
_BATCH = flags.DEFINE_integer("batch", None, "Batch size (default: the model's).",
                              lower_bound=1)
_KNOBS = flags.DEFINE_string("knobs", "", "Further GNMT knobs, e.g. 'hidden=512'.")
_DEVICES = flags.DEFINE_string("devices", presets.DEFAULT,
                               f"Device preset ({', '.join(presets.names())}).")
_GRAPH_OUT = flags.DEFINE_string("graph_out", None,
                                 "Optional path to write the op-graph JSON.")


def main(argv):
  del argv
  knobs = [f"num_layers={_NUM_LAYERS.value}"]
  if _BATCH.value is not None:
    knobs.append(f"batch={_BATCH.value}")
  if _KNOBS.value:
    knobs.append(_KNOBS.value)
  print(f"building the GNMT training step ({', '.join(knobs)}) ...", flush=True)
  loaded = sources.load_model("gnmt", knobs=",".join(knobs), devices=_DEVICES.value)
  print(describe.format_summary(describe.summary(loaded.graph, top=8)))
  if _GRAPH_OUT.value:
    json_io.save_json(loaded.graph, _GRAPH_OUT.value)
    print(f"wrote {_GRAPH_OUT.value}")


if __name__ == "__main__":
  from tf_gdp.cli import runner  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  runner.run_command(main, sys.argv)
