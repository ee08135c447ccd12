"""`tf-gdp finetune`: adapt a pre-trained GDP policy to one graph (or zero-shot).

Examples:
  tf-gdp finetune --policy=/tmp/gdp/policy --graph=gnmt8 --devices=p100x4 \
      --budget_seconds=600 --root_dir=/tmp/gdp_gnmt8 --out=/tmp/gnmt8.json
  tf-gdp finetune --policy=/tmp/gdp/policy --graph=my_model.json --zeroshot \
      --out=/tmp/placement.json
  tf-gdp finetune --policy=/tmp/gdp/policy --graph=gnmt2:batch=4:hidden_size=64 \
      --devices=cpu-workers:2 --backend=measure --measure=cpu-workers:2 \
      --budget_evaluations=200 --out=/tmp/measured.json

`--zeroshot` places the graph with one forward pass (greedy and
`--zeroshot_samples` samples, best by the simulator) and does not train.
Otherwise fine-tuning runs PPO on the graph for the budget; with
`--root_dir` a killed run resumes. `--out` gets the placement file (JSON:
op name -> device, predicted step time, method, command).
"""

import json
import sys

from absl import flags

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.cost import topology as topology_lib
from tf_gdp.rl import cli_lib
from tf_gdp.rl import environment
from tf_gdp.rl import graph_sets
from tf_gdp.rl import outputs
from tf_gdp.rl import ppo
from tf_gdp.rl import train_lib

_POLICY = flags.DEFINE_string(
    "policy", None, "A saved policy directory (`<pretrain root>/policy`) or a "
    "training root directory.", required=True)
_GRAPH = flags.DEFINE_string(
    "graph", None, "The graph: a zoo model with knobs ('gnmt8', "
    "'rnnlm2:batch=8'), a graph file (.json/.pb/.pbtxt, SavedModel dir) or a "
    "generated graph ('layered:N', 'cells:N').", required=True)
_DEVICES = flags.DEFINE_string(
    "devices", "p100x4", "Topology (preset or topology .json file).")
_OUT = flags.DEFINE_string("out", None, "Write the placement file here.")
_ROOT_DIR = flags.DEFINE_string(
    "root_dir", None, "Checkpoints, summaries and the fine-tuned policy go "
    "here; an existing run is resumed.")
_ZEROSHOT = flags.DEFINE_bool(
    "zeroshot", False, "Place with one forward pass; no training.")
_ZEROSHOT_SAMPLES = flags.DEFINE_integer(
    "zeroshot_samples", 16, "Sampled placements besides the greedy one.",
    lower_bound=0)
_BUDGET_SECONDS = flags.DEFINE_float(
    "budget_seconds", None, "Stop after this much fine-tuning time.",
    lower_bound=0.001)
_BUDGET_EVALUATIONS = flags.DEFINE_integer(
    "budget_evaluations", None, "Stop after this many placement evaluations.",
    lower_bound=1)
_BUDGET_ITERATIONS = flags.DEFINE_integer(
    "budget_iterations", None, "Stop after this many PPO iterations.",
    lower_bound=1)
_SAMPLES = flags.DEFINE_integer(
    "samples", 16, "Placements sampled per PPO iteration.", lower_bound=2)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-3, "Adam step size.",
                                    lower_bound=0.0)
_EPOCHS = flags.DEFINE_integer("epochs", 4, "PPO epochs per iteration.",
                               lower_bound=1)
_ENTROPY = flags.DEFINE_float("entropy", 0.01,
                              "Weight of the per-group entropy bonus.",
                              lower_bound=0.0)
_RATIO = flags.DEFINE_enum("ratio", "per_group", list(ppo.RATIOS),
                           "PPO importance ratios per group or joint.")
_BACKEND = flags.DEFINE_enum(
    "backend", "simulate", ["simulate", "measure", "mix"],
    "Reward: the simulator, real runs (--measure), or simulate then measure "
    "the best candidates.")
_MEASURE = flags.DEFINE_string(
    "measure", None, "Where measured rewards run: local, cpu-workers:K or "
    "grpc://host:port.")
_MEASURE_REPEATS = flags.DEFINE_integer(
    "measure_repeats", 3, "Timed steps per measurement.", lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 0, "Seeds sampling.")
_LOG_EVERY = flags.DEFINE_float("log_every", 10.0,
                                "Seconds between progress lines.",
                                lower_bound=0.0)
_CHECKPOINT_EVERY = flags.DEFINE_float(
    "checkpoint_every", 60.0, "Seconds between checkpoints (0: every "
    "iteration).", lower_bound=0.0)


def main(argv):
  cli_lib.quiet_tensorflow_logs()
  command = _command(argv[0] if argv else "tf-gdp finetune")
  items = graph_sets.parse(_GRAPH.value)
  if len(items) != 1:
    raise errors.InputError("--graph names one graph")
  topology = topology_lib.get(_DEVICES.value)
  if _ZEROSHOT.value:
    budget = None
  else:
    budget = cli_lib.budget(seconds=_BUDGET_SECONDS.value,
                            evaluations=_BUDGET_EVALUATIONS.value,
                            iterations=_BUDGET_ITERATIONS.value)
    env_options = cli_lib.env_options(
        backend=_BACKEND.value, measure=_MEASURE.value,
        measure_repeats=_MEASURE_REPEATS.value, devices=_DEVICES.value)
  cli_lib.progress(f"loading {items[0].label} for {_DEVICES.value}")
  loaded = items[0].load(_DEVICES.value)
  task = environment.PlacementTask(loaded.graph, topology,
                                   extracted=loaded.extracted,
                                   name=f"{items[0].label}@{_DEVICES.value}")
  if budget is None:
    shot = train_lib.zeroshot(_POLICY.value, task,
                              samples=_ZEROSHOT_SAMPLES.value,
                              seed=_SEED.value)
    print(f"zero-shot: {shot.step_time_us / 1e3:.3f} ms ({shot.chosen}, "
          f"greedy {shot.greedy_step_time_us / 1e3:.3f} ms, "
          f"{'valid' if shot.valid else 'INVALID: out of memory'}) in "
          f"{shot.seconds:.1f} s")
    if _OUT.value:
      best = environment.Best(group_devices=shot.group_devices,
                              placement=shot.placement,
                              step_time_us=shot.step_time_us,
                              source="simulate", evaluation=0)
      _write(task, best, None, "gdp-zeroshot", command)
    return
  config = cli_lib.train_config(
      samples=_SAMPLES.value, graphs_per_iteration=1,
      learning_rate=_LEARNING_RATE.value, epochs=_EPOCHS.value,
      entropy=_ENTROPY.value, ratio=_RATIO.value, seed=_SEED.value,
      log_every_seconds=_LOG_EVERY.value,
      checkpoint_every_seconds=_CHECKPOINT_EVERY.value)
  result = train_lib.finetune(_POLICY.value, task, budget=budget,
                              root_dir=_ROOT_DIR.value, config=config,
                              env_options=env_options, log=cli_lib.progress)
  cli_lib.print_result(result)
  best = result.best[task.name]
  if _OUT.value:
    if best is None:
      raise errors.InputError(
          "fine-tuning found no valid placement; nothing written to "
          f"{_OUT.value}")
    _write(task, best, result.references[task.name], "gdp", command,
           result.measured_references.get(task.name))


def _command(program: str) -> str:
  """The command line that produced the result: program + the flags given."""
  given = [flag.serialize() for flag in
           flags.FLAGS.get_flags_for_module(sys.modules[__name__])
           if flag.present]
  return " ".join([program] + given)


def _write(task, best, reference, method, command,
           reference_measured_us=None) -> None:
  document = outputs.placement_document(
      task, best, reference, method=method, command=command,
      reference_measured_us=reference_measured_us)
  fileio.write_atomically(_OUT.value, json.dumps(document, indent=1))
  print(f"wrote {_OUT.value}")
