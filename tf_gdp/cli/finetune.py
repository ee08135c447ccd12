"""`tf-gdp finetune`: adapt a pre-trained GDP policy to one graph (or zero-shot).

Examples:
  tf-gdp finetune --policy=runs/pre/policy --graph=gnmt8 --devices=p100x4 \
      --budget_seconds=600 --root_dir=runs/gnmt8 --out=gnmt8.json
  tf-gdp finetune --policy=runs/pre/policy --graph=my_model.json --zeroshot \
      --out=placement.json
  tf-gdp finetune --policy=runs/pre/policy --graph=gnmt2:batch=4:hidden_size=64 \
      --devices=cpu-workers:2 --backend=measure --measure=cpu-workers:2 \
      --budget_evaluations=200 --out=measured.json

`--zeroshot` places the graph with one forward pass (greedy and
`--zeroshot_samples` samples, best by the simulator) and does not train.
Otherwise fine-tuning runs PPO on the graph for the budget; with
`--root_dir` a killed run resumes. `--out` gets the placement file (JSON:
op name -> device, predicted step time, method, command).
"""

import sys

from absl import flags

from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp.cli import graph_flags
from tf_gdp.cost import topology as topology_lib
from tf_gdp.rl import cli_lib
from tf_gdp.rl import outputs
from tf_gdp.rl import placement_task
from tf_gdp.rl import rewards
from tf_gdp.rl import workflows
from tf_gdp.rl import zero_shot

_POLICY = flags.DEFINE_string(
    "policy", None, "A saved policy directory (`<pretrain root>/policy`) or a "
    "training root directory.", required=True)
_GRAPH = graph_flags.define_graph(__name__)
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
_SEED = flags.DEFINE_integer(
    "seed", 0, "Seeds sampling.", lower_bound=0)
_SIGNATURE = graph_flags.define_signature(__name__)
_INPUT_SHAPES = graph_flags.define_input_shapes(__name__)
_TRAINING = cli_lib.define_training_flags(__name__)


def main(argv):
  cli_lib.quiet_tensorflow_logs()
  command = _command(argv[0] if argv else "tf-gdp finetune")
  items = graph_specs.parse(_GRAPH.value, signature=_SIGNATURE.value,
                           input_shapes=_INPUT_SHAPES.value)
  if len(items) != 1:
    raise errors.InputError("--graph names one graph")
  topology = topology_lib.get(_DEVICES.value)
  if _ZEROSHOT.value:
    budget = None
  else:
    budget = _TRAINING.budget()
    env_options = _TRAINING.env_options(_DEVICES.value)
  cli_lib.progress(f"loading {items[0].label} for {_DEVICES.value}")
  loaded = items[0].load(_DEVICES.value)
  task = placement_task.PlacementTask(loaded.graph, topology,
                                      extracted=loaded.extracted,
                                      name=f"{items[0].label}@{_DEVICES.value}")
  if budget is None:
    shot = zero_shot.zeroshot(_POLICY.value, task,
                              samples=_ZEROSHOT_SAMPLES.value,
                              seed=_SEED.value)
    print(f"zero-shot: {shot.step_time_us / 1e3:.3f} ms ({shot.chosen}, "
          f"greedy {shot.greedy_step_time_us / 1e3:.3f} ms, "
          f"{'valid' if shot.valid else 'INVALID: out of memory'}) in "
          f"{shot.seconds:.1f} s")
    if _OUT.value:
      best = rewards.Best(group_devices=shot.group_devices,
                          placement=shot.placement,
                          step_time_us=shot.step_time_us,
                          source="simulate", evaluation=0)
      _write(task, best, None, "gdp-zeroshot", command)
    return
  config = _TRAINING.train_config(graphs_per_iteration=1, seed=_SEED.value)
  result = workflows.finetune(_POLICY.value, task, budget=budget,
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
  outputs.write_placement(_OUT.value, task, best, reference, method=method,
                          reference_measured_us=reference_measured_us,
                          command=command)
  print(f"wrote {_OUT.value}")
