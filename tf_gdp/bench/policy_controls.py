"""The controls of what pre-training buys: a random policy, uniform logits.

Beside the pre-trained policy, two policies with its `PolicyConfig` place
the same graphs through the same code (zero-shot, then fine-tuning:
`gdp_search`), with the same pipeline pushes, self-imitation and budget:

* `random`: a fresh `GdpPolicy`, its initialiser seeded with the
  benchmark's seed: the network without any pre-training.
* `uniform`: the pre-trained policy with its logit scale set to 0. The
  network's scores are multiplied by the scale before the pushes are added
  (`policy.network.GdpPolicy.finish`), so every allowed device is equally
  likely for every colocation group and only the pushes lean. The scale is
  not trained and the entropy floor only ever lowers it, so it stays 0
  through fine-tuning: PPO's gradients through the scores are zero, and
  fine-tuning is sampling with pushes that keeps the best placement. Its
  greedy placement (argmax of equal logits) is every group on its first
  allowed device.

Each is saved like the pre-trained one (`rl.policy_io`), so the search
loads it the same way.
"""

import os
from typing import Dict, List, Sequence

import tensorflow as tf

from tf_gdp import errors
from tf_gdp.policy import features
from tf_gdp.rl import exploration
from tf_gdp.rl import placement_task
from tf_gdp.rl import policy_io

PRETRAINED = "pretrained"
RANDOM = "random"
UNIFORM = "uniform"
POLICIES = (PRETRAINED, RANDOM, UNIFORM)


def parse(values: Sequence[str]) -> List[str]:
  """The named policies, in order; InputError on an unknown or repeated one."""
  names = [v.strip() for v in values if v.strip()]
  unknown = [n for n in names if n not in POLICIES]
  if unknown or not names or len(set(names)) != len(names):
    raise errors.InputError(
        f"policies must be distinct names among {', '.join(POLICIES)}; got "
        f"{','.join(values) or 'none'}")
  return names


def prepare(names: Sequence[str], pretrained: str, directory: str, *,
            seed: int, task: placement_task.PlacementTask) -> Dict[str, str]:
  """name -> saved policy path; the controls are written under `directory`.

  `task` is any graph and topology: one forward pass on it creates the
  variables (and restores the pre-trained ones) so that they are saved.
  """
  paths = {}
  for name in parse(names):
    if name == PRETRAINED:
      paths[name] = pretrained
      continue
    if name == RANDOM:
      config = policy_io.read_policy_config(
          os.path.join(pretrained, policy_io.POLICY_CONFIG_FILE))
      policy = policy_io.build_policy(dict(config, seed=seed))
    else:
      policy = policy_io.load_policy(pretrained)
    _build(policy, task)
    if name == UNIFORM:
      policy.logit_scale.assign(0.0)
    paths[name] = policy_io.save_policy(policy, os.path.join(directory, name))
  return paths


def _build(policy, task: placement_task.PlacementTask) -> None:
  """Creates the policy's variables with one forward pass on `task`."""
  inputs = features.policy_inputs(task.graph, task.topology)
  exploration.policy_logits(policy, {
      k: tf.convert_to_tensor(v[None])
      for k, v in features.as_tensors(inputs).items()})
