"""`tf-gdp pretrain`: train a GDP policy with PPO on a set of graphs.

Examples:
  tf-gdp pretrain --graphs=gnmt2,rnnlm2,inception_v3,layered:3000,cells:2000 \
      --devices=p100x4 --root_dir=/tmp/gdp --budget_seconds=3600
  tf-gdp pretrain --graphs=layered:500:seed=1,cells:400 --devices=p100x2,p100x4 \
      --root_dir=/tmp/gdp_small --budget_evaluations=20000 --placer=feedforward

Every graph is placed on every `--devices` topology. A killed run resumes
from `--root_dir` (same graphs and devices); the budget counts the whole
run. Writes `<root_dir>/policy` (the policy, for `finetune` and zero-shot
placement), `<root_dir>/best/*.json` (the best placement per graph),
checkpoints and TensorBoard summaries (`tensorboard --logdir=<root_dir>`).
"""

import json

from absl import flags

from tf_gdp import errors
from tf_gdp.cost import topology as topology_lib
from tf_gdp.rl import cli_lib
from tf_gdp.rl import environment
from tf_gdp.rl import graph_sets
from tf_gdp.rl import ppo
from tf_gdp.rl import train_lib

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
_BUDGET_SECONDS = flags.DEFINE_float(
    "budget_seconds", None, "Stop after this much training time (whole run).",
    lower_bound=0.001)
_BUDGET_EVALUATIONS = flags.DEFINE_integer(
    "budget_evaluations", None, "Stop after this many placement evaluations.",
    lower_bound=1)
_BUDGET_ITERATIONS = flags.DEFINE_integer(
    "budget_iterations", None, "Stop after this many PPO iterations.",
    lower_bound=1)
_GRAPHS_PER_ITERATION = flags.DEFINE_integer(
    "graphs_per_iteration", 4, "Graphs drawn per PPO iteration.",
    lower_bound=1)
_SAMPLES = flags.DEFINE_integer(
    "samples", 16, "Placements sampled per graph per iteration.",
    lower_bound=2)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-3, "Adam step size.",
                                    lower_bound=0.0)
_EPOCHS = flags.DEFINE_integer("epochs", 4, "PPO epochs per iteration.",
                               lower_bound=1)
_ENTROPY = flags.DEFINE_float("entropy", 0.01,
                              "Weight of the per-group entropy bonus.",
                              lower_bound=0.0)
_RATIO = flags.DEFINE_enum("ratio", "per_group", list(ppo.RATIOS),
                           "PPO importance ratios per group or joint.")
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
_BACKEND = flags.DEFINE_enum(
    "backend", "simulate", ["simulate", "measure", "mix"],
    "Reward: the simulator, real runs (--measure), or simulate then measure "
    "the best candidates.")
_MEASURE = flags.DEFINE_string(
    "measure", None, "Where measured rewards run: local, cpu-workers:K or "
    "grpc://host:port.")
_MEASURE_REPEATS = flags.DEFINE_integer(
    "measure_repeats", 3, "Timed steps per measurement.", lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 0, "Seeds the policy and sampling.")
_LOG_EVERY = flags.DEFINE_float("log_every", 10.0,
                                "Seconds between progress lines.",
                                lower_bound=0.0)
_CHECKPOINT_EVERY = flags.DEFINE_float(
    "checkpoint_every", 60.0, "Seconds between checkpoints (0: every "
    "iteration).", lower_bound=0.0)


def main(argv):
  cli_lib.quiet_tensorflow_logs()
  del argv
  budget = cli_lib.budget(seconds=_BUDGET_SECONDS.value,
                          evaluations=_BUDGET_EVALUATIONS.value,
                          iterations=_BUDGET_ITERATIONS.value)
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
  env_options = cli_lib.env_options(
      backend=_BACKEND.value, measure=_MEASURE.value,
      measure_repeats=_MEASURE_REPEATS.value, devices=_DEVICES.value)
  config = cli_lib.train_config(
      samples=_SAMPLES.value, graphs_per_iteration=_GRAPHS_PER_ITERATION.value,
      learning_rate=_LEARNING_RATE.value, epochs=_EPOCHS.value,
      entropy=_ENTROPY.value, ratio=_RATIO.value, seed=_SEED.value,
      log_every_seconds=_LOG_EVERY.value,
      checkpoint_every_seconds=_CHECKPOINT_EVERY.value)
  items = graph_sets.parse(_GRAPHS.value)
  tasks = []
  for devices in _DEVICES.value:
    topology = topology_lib.get(devices)
    for item in items:
      cli_lib.progress(f"loading {item.label} for {devices}")
      loaded = item.load(devices)
      tasks.append(environment.PlacementTask(
          loaded.graph, topology, extracted=loaded.extracted,
          name=f"{item.label}@{devices}"))
  result = train_lib.pretrain(
      tasks, budget=budget, root_dir=_ROOT_DIR.value,
      policy_config=policy_config, config=config, env_options=env_options,
      log=cli_lib.progress)
  cli_lib.print_result(result)
  print(f"policy: {_ROOT_DIR.value}/policy")
