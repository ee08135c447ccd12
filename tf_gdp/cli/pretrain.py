"""`tf-gdp pretrain`: train a GDP policy with PPO on a set of graphs.

Examples:
  tf-gdp pretrain --graphs=gnmt2,rnnlm2,inception_v3,layered:3000,cells:2000 \
      --devices=p100x4 --root_dir=runs/pre --budget_seconds=3600
  tf-gdp pretrain --graphs=layered:500:seed=1,cells:400 --devices=p100x2,p100x4 \
      --root_dir=runs/small --budget_evaluations=20000 --placer=feedforward

Every graph is placed on every `--devices` topology, except items written
`GRAPH@DEVICES` (`branches:80@cpu-workers:2`), which train on that topology
only. A killed run resumes
from `--root_dir` (same graphs and devices); the budget counts the whole
run. Writes `<root_dir>/policy` (the policy, for `finetune` and zero-shot
placement), `<root_dir>/best/*.json` (the best placement per graph),
checkpoints and TensorBoard summaries (`tensorboard --logdir=<root_dir>`).

With `--imitation_epochs=E`, PPO is preceded by imitation of search: each
task's best placement of the one-shot baselines and a local search of
`--imitation_evaluations` evaluations (cached in `<root_dir>/targets/`) is
fitted by E epochs of cross-entropy (`tf_gdp.rl.imitation`; its statistics
in `<root_dir>/imitation.json`). A resumed run does not imitate again.
With `--imitation_validation_graphs` (say, the graphs of families kept out
of `--graphs`), the imitated policy's greedy placements of those are judged
against their own targets every `--imitation_validate_every` epochs, and
`--imitation_keep_best` ends imitation with the weights that placed them
best.
"""

import json

from absl import flags

from tf_gdp import errors
from tf_gdp import gdp_method
from tf_gdp import graph_specs
from tf_gdp.cli import graph_flags
from tf_gdp.rl import cli_lib
from tf_gdp.rl import imitation
from tf_gdp.rl import search_targets
from tf_gdp.rl import tasks as tasks_lib
from tf_gdp.rl import workflows

_GRAPHS = flags.DEFINE_string(
    "graphs", None, "Comma-separated training graphs: zoo models with knobs "
    "('gnmt2:batch=8'), 'zoo', graph files or globs, and generated graphs "
    "('layered:N[:width=W][:seed=S]', 'cells:N[:cell=C][:seed=S]').",
    required=True)
_DEVICES = flags.DEFINE_list(
    "devices", ["p100x4"], "Topologies (presets or topology .json files); "
    "every graph is trained on each.")
_ROOT_DIR = flags.DEFINE_string(
    "root_dir", None, "Checkpoints, summaries, best placements and the final "
    "policy go here; an existing run is resumed.", required=True)
_GRAPHS_PER_ITERATION = flags.DEFINE_integer(
    "graphs_per_iteration", 4, "Graphs drawn per PPO iteration.",
    lower_bound=1)
_PLACER = flags.DEFINE_enum(
    "placer", "transformer_xl", ["transformer_xl", "feedforward"],
    "Placer network ('feedforward' is the no-attention ablation).")
_SUPERPOSITION = flags.DEFINE_bool(
    "superposition", True, "Graph embedding gates the placer layers "
    "(--nosuperposition is the ablation).")
_HIDDEN_SIZE = flags.DEFINE_integer("hidden_size", 64, "Policy width.",
                                    lower_bound=2)
_POLICY_CONFIG = flags.DEFINE_string(
    "policy_config", None, "JSON object of further PolicyConfig fields, e.g. "
    "'{\"gnn_rounds\": 2, \"segment_length\": 64}'.")
_SEED = flags.DEFINE_integer(
    "seed", 0, "Seeds the policy and sampling.", lower_bound=0)
_IMITATION_EPOCHS = flags.DEFINE_integer(
    "imitation_epochs", 0, "Before PPO, epochs of supervised imitation of "
    "each task's search target (the best valid placement of the one-shot "
    "baselines and a local search); 0: none. Adam at "
    "--imitation_learning_rate, --graphs_per_iteration tasks per step. "
    "Skipped on a resumed run.", lower_bound=0)
_IMITATION_LEARNING_RATE = flags.DEFINE_float(
    "imitation_learning_rate", None, "Adam step size of the imitation "
    "phase (default: --learning_rate, which PPO uses).", lower_bound=0.0)
_IMITATION_EVALUATIONS = flags.DEFINE_integer(
    "imitation_evaluations", search_targets.DEFAULT_EVALUATIONS,
    "Simulator evaluations of each imitation target's local search.",
    lower_bound=1)
_IMITATION_CANONICAL_LABELS = flags.DEFINE_bool(
    "imitation_canonical_labels", False, "Imitate each target with its "
    "interchangeable devices numbered by first use, where that is no slower.")
_IMITATION_MATCHED_LABELS = flags.DEFINE_bool(
    "imitation_matched_labels", False, "Imitate each target under the "
    "renaming of interchangeable devices (a symmetry of its topology) that "
    "the policy's current prediction is closest to.")
_IMITATION_TARGET_TOLERANCE = flags.DEFINE_float(
    "imitation_target_tolerance", 0.0, "Imitate the simplest candidate (the "
    "fewest bytes between devices) within this fraction of the fastest "
    "one; 0: the fastest.", lower_bound=0.0, upper_bound=0.99)
_IMITATION_VALIDATION_GRAPHS = flags.DEFINE_string(
    "imitation_validation_graphs", None, "Graphs (as --graphs, on "
    "--devices) the imitation phase judges its policy on but never trains "
    "on.")
_IMITATION_VALIDATE_EVERY = flags.DEFINE_integer(
    "imitation_validate_every", 0, "Judge the validation graphs every this "
    "many imitation epochs (0: at the end only).", lower_bound=0)
_IMITATION_KEEP_BEST = flags.DEFINE_bool(
    "imitation_keep_best", False, "End imitation with the weights whose "
    "greedy placements of the validation graphs were best (needs "
    "--imitation_validation_graphs).")
_INIT_POLICY = flags.DEFINE_string(
    "init_policy", None, "Start from this saved policy (a directory as "
    "`finetune --policy` takes; 'pretrained': the shipped one) instead of "
    "fresh weights; its architecture replaces --placer, --hidden_size, "
    "--superposition and --policy_config. A resumed run keeps its own.")
_SIGNATURE = graph_flags.define_signature(__name__)
_TRAINING = cli_lib.define_training_flags(__name__)


def main(argv):
  cli_lib.quiet_tensorflow_logs()
  del argv
  budget = _TRAINING.budget()
  init_policy = _init_policy()  # checked before any graph is loaded
  policy_config = {"placer": _PLACER.value,
                   "superposition": _SUPERPOSITION.value,
                   "hidden_size": _HIDDEN_SIZE.value, "seed": _SEED.value}
  if _POLICY_CONFIG.value:
    try:
      extra = json.loads(_POLICY_CONFIG.value)
    except ValueError as e:
      raise errors.InputError(f"--policy_config is not JSON: {e}") from e
    if not isinstance(extra, dict):
      raise errors.InputError("--policy_config must be a JSON object")
    policy_config.update(extra)
  env_options = _TRAINING.env_options(_DEVICES.value)
  config = _TRAINING.train_config(
      graphs_per_iteration=_GRAPHS_PER_ITERATION.value, seed=_SEED.value)
  items = graph_specs.parse(_GRAPHS.value, allow_devices=True,
                            signature=_SIGNATURE.value)
  held_out = _validation_items()
  tasks = tasks_lib.placement_tasks(items, _DEVICES.value,
                                    log=cli_lib.progress)
  imitation_config = imitation.ImitationConfig(
      epochs=_IMITATION_EPOCHS.value,
      evaluations=_IMITATION_EVALUATIONS.value,
      learning_rate=(_TRAINING.learning_rate.value
                     if _IMITATION_LEARNING_RATE.value is None
                     else _IMITATION_LEARNING_RATE.value),
      graphs_per_step=_GRAPHS_PER_ITERATION.value, seed=_SEED.value,
      canonical_labels=_IMITATION_CANONICAL_LABELS.value,
      matched_labels=_IMITATION_MATCHED_LABELS.value,
      target_tolerance=_IMITATION_TARGET_TOLERANCE.value,
      validate_every=_IMITATION_VALIDATE_EVERY.value,
      keep_best=_IMITATION_KEEP_BEST.value)
  validation = tasks_lib.placement_tasks(
      held_out, _DEVICES.value, log=cli_lib.progress)
  result = workflows.pretrain(
      tasks, budget=budget, root_dir=_ROOT_DIR.value,
      policy_config=policy_config, config=config, env_options=env_options,
      imitation=imitation_config, validation=validation,
      init_policy=init_policy, log=cli_lib.progress)
  cli_lib.print_result(result)
  print(f"policy: {_ROOT_DIR.value}/policy")


def _validation_items():
  """The parsed --imitation_validation_graphs; InputError before any graph
  is loaded if they, or --imitation_keep_best without them, are wrong."""
  if not _IMITATION_VALIDATION_GRAPHS.value:
    if _IMITATION_KEEP_BEST.value:
      raise errors.InputError(
          "--imitation_keep_best needs --imitation_validation_graphs")
    return []
  try:
    return graph_specs.parse(_IMITATION_VALIDATION_GRAPHS.value,
                             allow_devices=True, signature=_SIGNATURE.value)
  except errors.InputError as e:
    raise errors.InputError("--imitation_validation_graphs: " + str(
        e).removeprefix("--graphs: ")) from e


def _init_policy():
  """--init_policy as a checked directory ('pretrained': the shipped one)."""
  if not _INIT_POLICY.value:
    return None
  return gdp_method.check_policy(
      None if _INIT_POLICY.value == "pretrained" else _INIT_POLICY.value)
