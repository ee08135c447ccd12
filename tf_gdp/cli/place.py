"""`tf-gdp place`: place many graphs at once; one output folder per graph.

Examples:
  tf-gdp place --graphs='graphs/*.json' --devices=p100x4 --out=out/
  tf-gdp place --graphs=gnmt8 --devices=p100x4 --method=gdp --budget_seconds=600 --out=out/
  tf-gdp place --graphs=inception_v3,rnnlm2 --devices=v100x8 --method=metis --out=out/

Each graph gets `<out>/<graph>/placement.json` (op name -> device),
`report.json` (step time, the compared baselines, the lower bound, memory
per device and, on a preset, the robustness to cost-model error),
`gantt.png` and `devices.png`; with --write_graph also
`placed_graph.pb`, the MetaGraphDef with the devices written. A graph that
fails is reported and skipped; the exit code is then 2, the others' results
are kept.
"""

import os
import sys

from absl import flags

from tf_gdp import place_batch
from tf_gdp import placing
from tf_gdp.cli import graph_flags
from tf_gdp.rl import cli_lib

_GRAPHS = flags.DEFINE_string(
    "graphs", None, "Comma-separated graphs: zoo models with knobs "
    "('gnmt8', 'rnnlm2:batch=8'), graph files or globs ('dir/*.json', "
    "'*.pbtxt', SavedModel directories), generated graphs ('layered:N').",
    required=True)
_DEVICES = flags.DEFINE_string(
    "devices", "p100x4", "Topology: a preset (p100x1, p100x2, p100x4, v100x8, "
    "h100x8, cpu-workers:K, local-cpus:K) or a topology .json file.")
_METHOD = flags.DEFINE_string(
    "method", placing.AUTO, "auto (the best valid placement of gdp, the cheap "
    "baselines and local_search, each search given --budget_seconds), gdp "
    "(the learned policy alone; zero-shot, or fine-tuned for "
    "--budget_seconds) or a baseline: single_device, human_expert, random, "
    "round_robin, m_topo, m_etf, m_sct, heft, metis, stage_pipeline, "
    "contiguous_dp, side_offload, local_search, hdp.")
_BUDGET = flags.DEFINE_float(
    "budget_seconds", 0.0, "gdp: fine-tune for this long per graph after the "
    "zero-shot placement (0: zero-shot only); auto: the time each of its "
    "searches gets.", lower_bound=0.0)
_POLICY = flags.DEFINE_string(
    "policy", None, "gdp: a saved policy directory (default: the shipped "
    "pre-trained policy).")
_SAMPLES = flags.DEFINE_integer(
    "samples", 16, "gdp: sampled placements per forward pass / PPO iteration.",
    lower_bound=2)
_COMPARE = flags.DEFINE_list(
    "compare", list(placing.DEFAULT_COMPARE),
    "Baselines to evaluate beside the method for the report ('' for none).")
_SEED = flags.DEFINE_integer(
    "seed", 0, "Seeds sampling and randomized methods.", lower_bound=0)
_OUT = flags.DEFINE_string("out", None, "Output folder (one sub-folder per "
                           "graph).", required=True)
_PICTURES = flags.DEFINE_bool("pictures", True, "Write gantt.png and "
                              "devices.png per graph.")
_WRITE_GRAPH = flags.DEFINE_bool(
    "write_graph", False, "Also write placed_graph.pb (TensorFlow graphs only).")
_ROBUST_MEMBERS = flags.DEFINE_integer(
    "robust_members", placing.ROBUST_MEMBERS, "On a preset (no hardware "
    "attached), also judge each placement under this many perturbed cost "
    "models (the nominal one included): report.json's 'robustness' gives the "
    "median and worst-case ratio to one device (0: off).", lower_bound=0)
_ROBUST_OBJECTIVE = cli_lib.define_robust_objective(__name__)
_SIGNATURE = graph_flags.define_signature(__name__)
_INPUT_SHAPES = graph_flags.define_input_shapes(__name__)
_PROFILE = graph_flags.define_profile(__name__)
_CONFIRM = flags.DEFINE_bool(
    "confirm", True, "When the devices can be timed here (cpu-workers:K), "
    "measure the placement, the best compared baselines and one device "
    "(interleaved rounds) and keep the best measured median.")
_ALLOW_SIDE_EFFECTS = cli_lib.define_allow_side_effects(__name__)
_CALIBRATE = flags.DEFINE_bool(
    "calibrate", True, "cpu-workers:K: measure the links first if they never "
    "were on this machine (`tf-gdp calibrate`, saved for later runs).")


def main(argv):
  del argv
  cli_lib.quiet_tensorflow_logs()
  outcomes = place_batch.place_many(
      _GRAPHS.value, _DEVICES.value, _OUT.value, method=_METHOD.value,
      budget_seconds=_BUDGET.value, policy=_POLICY.value,
      samples=_SAMPLES.value, seed=_SEED.value,
      compare=[c for c in _COMPARE.value if c], pictures=_PICTURES.value,
      write_graph=_WRITE_GRAPH.value, signature=_SIGNATURE.value,
      input_shapes=_INPUT_SHAPES.value,
      profile=_PROFILE.value, calibrate=_CALIBRATE.value,
      confirm=_CONFIRM.value, allow_side_effects=_ALLOW_SIDE_EFFECTS.value,
      log=cli_lib.progress, robust_members=_ROBUST_MEMBERS.value,
      robust_objective=_ROBUST_OBJECTIVE.value)
  print(place_batch.format_summary(outcomes, _DEVICES.value, _METHOD.value))
  failed = [o for o in outcomes if o.result is None]
  if failed:
    first = failed[0]
    # An error about a file usually opens with its path already.
    opening = str(first.error).split(": ", 1)[0]
    named = (first.error if os.path.basename(opening) == first.label
             else f"{first.label}: {first.error}")
    sys.stderr.write(f"error: {len(failed)} of {len(outcomes)} graphs failed "
                     f"(first: {named})\n")
    sys.exit(2)
