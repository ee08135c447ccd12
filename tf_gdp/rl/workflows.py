"""Training a policy: pretrain on many graphs, finetune on one.

    result = workflows.pretrain(graphs, [topology],
                                budget=train_config.Budget(seconds=600),
                                root_dir=d)
    result = workflows.finetune(d + "/policy", graph, topology,
                                budget=train_config.Budget(evaluations=2000))

Both run a `trainer.Trainer` (`pretrain` optionally after imitating search,
`imitation`). Placing with a policy as it is, one forward pass: `zero_shot`.
"""

import dataclasses
import json
import os
from typing import Any, Callable, Optional, Sequence

from tf_gdp import fileio
from tf_gdp.rl import anchor as anchor_lib
from tf_gdp.rl import environment
from tf_gdp.rl import exploration
from tf_gdp.rl import imitation as imitation_lib
from tf_gdp.rl import placement_task
from tf_gdp.rl import policy_io
from tf_gdp.rl import train_config
from tf_gdp.rl import train_result
from tf_gdp.rl import trainer as trainer_lib


def _env_options(env_options: Optional[dict],
                 config: Optional[train_config.TrainConfig]) -> dict:
  """`env_options` plus what the training settings imply (they win)."""
  return dict(env_options or {}, **(config.environment_options()
                                    if config is not None else {}))


def pretrain(graphs: Sequence[Any], topologies: Optional[Sequence[Any]] = None,
             *, budget: train_config.Budget, root_dir: str,
             policy_config: Optional[dict] = None,
             config: Optional[train_config.TrainConfig] = None,
             env_options: Optional[dict] = None,
             imitation: Optional[imitation_lib.ImitationConfig] = None,
             validation: Sequence[placement_task.PlacementTask] = (),
             init_policy: Optional[str] = None,
             log: Optional[Callable[[str], None]] = None
             ) -> train_result.TrainResult:
  """Trains a policy on many graphs; exports it to `<root_dir>/policy`.

  Args:
    graphs: PlacementTasks, or OpGraphs placed on each of `topologies`.
    topologies: Topologies for OpGraph entries (every graph on each).
    budget: when to stop (totals over the run, resumes included).
    root_dir: checkpoints, summaries, best placements, the final policy. A
      root directory with a run in it is resumed (its policy config wins).
    policy_config: PolicyConfig fields of the fresh policy.
    config: training loop settings.
    env_options: further `PlacementEnv` arguments (backend, measure_target).
    imitation: with epochs > 0, the policy first imitates each task's search
      target (`imitation.pretrain_phase`; not on a resumed run); its
      statistics are the result's `imitation`. Its evaluations and
      seconds are not PPO's and do not count against the budget.
    validation: tasks the imitation phase judges but never trains on
      (`imitation.imitate`).
    init_policy: a saved policy to start from instead of fresh weights
      (continuing a pre-trained policy on more graphs); its architecture
      replaces `policy_config`. A resumed run ignores it (the checkpoint
      wins).
    log: progress line sink.
  """
  tasks = []
  for item in graphs:
    if isinstance(item, placement_task.PlacementTask):
      tasks.append(item)
    else:
      tasks += [placement_task.as_task(item, t) for t in (topologies or [None])]
  os.makedirs(root_dir, exist_ok=True)
  config_path = os.path.join(root_dir, policy_io.POLICY_CONFIG_FILE)
  if os.path.isfile(config_path):
    policy = policy_io.build_policy(policy_io.read_policy_config(config_path))
  elif init_policy:
    policy = policy_io.load_policy(init_policy)
  else:
    policy = policy_io.build_policy(policy_config)
  fileio.write_atomically(
      config_path, json.dumps(policy_io.policy_config_dict(policy), indent=1))
  env = environment.PlacementEnv(tasks, **_env_options(env_options, config))
  held_out = (environment.PlacementEnv(list(validation))
              if validation else None)
  try:
    trainer = trainer_lib.Trainer(env, policy, config=config,
                                  root_dir=root_dir, log=log)
    imitated = imitation_lib.pretrain_phase(
        trainer, imitation or imitation_lib.ImitationConfig(),
        validation_env=held_out, log=log)
    result = dataclasses.replace(trainer.run(budget), imitation=imitated)
  finally:
    env.close()
    if held_out is not None:
      held_out.close()
  policy_io.save_policy(policy, os.path.join(root_dir, "policy"))
  return result


def finetune(policy_path: str, task, topology=None, *,
             budget: train_config.Budget,
             root_dir: Optional[str] = None,
             config: Optional[train_config.TrainConfig] = None,
             env_options: Optional[dict] = None,
             log: Optional[Callable[[str], None]] = None,
             entropy_floor: float = exploration.ENTROPY_FLOOR,
             anchor=None,
             anchor_epochs: int = anchor_lib.EPOCHS
             ) -> train_result.TrainResult:
  """Continues training a saved policy on one graph.

  `task` is a PlacementTask, or an OpGraph with `topology`. The budget is
  seconds and/or evaluations (`train_config.Budget`). With a `root_dir`,
  checkpoints and the best placement go there and a killed fine-tuning run
  resumes from them (they take precedence over `policy_path`); the
  fine-tuned policy is exported to `<root_dir>/policy`. A policy less
  random than `entropy_floor` on this graph has its logits scaled down
  first (`exploration.entropy_floor_scale`). With `anchor` (placement,
  step time us), typically zero-shot's, a run that starts at iteration 0
  first fits the policy to that placement (`rl.anchor`; `anchor_epochs`
  steps, 0: not at all; at most `anchor.SECONDS_SHARE` of a budget in
  seconds), and its entropy floor is `anchor.ENTROPY_FLOOR`.
  """
  task = placement_task.as_task(task, topology)
  policy = policy_io.load_policy(policy_path)
  if config is None:
    config = train_config.TrainConfig(graphs_per_iteration=1)
  if root_dir:
    os.makedirs(root_dir, exist_ok=True)
    fileio.write_atomically(
        os.path.join(root_dir, policy_io.POLICY_CONFIG_FILE),
        json.dumps(policy_io.policy_config_dict(policy), indent=1))
  env = environment.PlacementEnv([task], **_env_options(env_options, config))
  try:
    trainer = trainer_lib.Trainer(env, policy, config=config,
                                  root_dir=root_dir, log=log)
    if (anchor is not None and anchor_epochs > 0 and
        int(trainer.iteration.numpy()) == 0):
      fitted = anchor_lib.fit(
          policy, env, anchor[0], anchor[1], epochs=anchor_epochs,
          seconds=(budget.seconds * anchor_lib.SECONDS_SHARE
                   if budget.seconds else None), log=log)
      # The fit's time counts against a budget in seconds.
      trainer.seconds.assign(float(fitted["seconds"]))
      if fitted["steps"]:  # an unfitted policy keeps the usual floor
        entropy_floor = anchor_lib.ENTROPY_FLOOR
    exploration.apply_entropy_floor(policy, env.observation(0), entropy_floor,
                                    log)
    result = trainer.run(budget)
  finally:
    env.close()
  if root_dir:
    policy_io.save_policy(policy, os.path.join(root_dir, "policy"))
  return result
