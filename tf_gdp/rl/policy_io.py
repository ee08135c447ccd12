"""Policies on disk: a `policy_config.json` and TF checkpoint files.

    save_policy(policy, d + "/policy")
    policy = load_policy(d + "/policy")       # or a training root directory

A policy is rebuilt from its config (`build_policy`), then its weights are
restored. Configs saved by earlier versions load as they were trained
(`policy.compat`).
"""

import dataclasses
import json
import os
import shutil
import time
from typing import Optional

import tensorflow as tf

from tf_gdp import errors
from tf_gdp.policy import compat
from tf_gdp.rl import run_dir

POLICY_CONFIG_FILE = "policy_config.json"
POLICY_WEIGHTS = "weights"


def build_policy(config: Optional[dict] = None) -> tf.keras.Model:
  """A fresh `GdpPolicy` from a PolicyConfig dict (None: the defaults)."""
  from tf_gdp.policy import network  # pylint: disable=g-import-not-at-top
  try:
    policy_config = network.PolicyConfig(**(config or {}))
  except (TypeError, ValueError) as e:
    raise errors.InputError(f"bad policy config: {e}") from e
  return network.GdpPolicy(policy_config)


def read_policy_config(path: str) -> dict:
  """A saved policy config; fields it predates get their old behaviour."""
  try:
    with open(path, encoding="utf-8") as f:
      config = json.load(f)
  except (OSError, ValueError) as e:
    raise errors.InputError(f"{path}: unreadable policy config: {e}") from e
  if not isinstance(config, dict):
    raise errors.InputError(f"{path}: a policy config must be a JSON object")
  return compat.saved_config(config)


def policy_config_dict(policy: tf.keras.Model) -> dict:
  config = getattr(policy, "config", None)
  if config is None or not dataclasses.is_dataclass(config):
    raise errors.InputError(
        f"{type(policy).__name__} has no dataclass `config`; only policies "
        "that can be rebuilt from their config can be saved")
  return dataclasses.asdict(config)


def save_policy(policy: tf.keras.Model, directory: str) -> str:
  """Writes `policy_config.json` + weights into `directory`, atomically.

  Everything is written into a fresh sibling directory first, which then
  replaces `directory` by renames, so a reader (or a kill) sees the old
  policy or the new one, never half of each.
  """
  if not policy.built:  # a policy never called: save the weights it gets
    _create_variables(policy)
  directory = os.path.abspath(directory)
  parent = os.path.dirname(directory)
  os.makedirs(parent, exist_ok=True)
  staging = f"{directory}.tmp-{os.getpid()}-{time.monotonic_ns()}"
  os.makedirs(staging)
  try:
    with open(os.path.join(staging, POLICY_CONFIG_FILE), "w",
              encoding="utf-8") as f:
      json.dump(policy_config_dict(policy), f, indent=1)
    tf.train.Checkpoint(policy=policy).write(
        os.path.join(staging, POLICY_WEIGHTS))
    old = None
    if os.path.exists(directory):
      old = f"{directory}.old-{os.getpid()}-{time.monotonic_ns()}"
      os.replace(directory, old)
    os.replace(staging, directory)
    if old is not None:
      shutil.rmtree(old, ignore_errors=True)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  return directory


def load_policy(path: str) -> tf.keras.Model:
  """A policy saved by `save_policy`, or the policy of a training root dir.

  `path` is a directory with `policy_config.json` and either `weights*`
  (an exported policy) or `checkpoints/` (a `pretrain` / `finetune` root
  directory: its latest checkpoint's policy is loaded).
  """
  config_path = os.path.join(path, POLICY_CONFIG_FILE)
  if not os.path.isfile(config_path):
    raise errors.InputError(
        f"{path}: not a saved policy (no {POLICY_CONFIG_FILE})")
  config = read_policy_config(config_path)
  policy = build_policy(config)
  prefix = os.path.join(path, POLICY_WEIGHTS)
  if not tf.io.gfile.exists(prefix + ".index"):
    prefix = tf.train.latest_checkpoint(os.path.join(path, "checkpoints"))
    if prefix is None:
      raise errors.InputError(f"{path}: no policy weights or checkpoints")
  # The variables exist before the restore, so weights that do not fit the
  # config fail here, named, and not inside the first placement. Partial:
  # variables an older checkpoint lacks keep their initial values
  # (`policy.compat`).
  _create_variables(policy)
  run_dir.restore_checkpoint(tf.train.Checkpoint(policy=policy), prefix,
                             partial=True)
  _check_weights_match(policy, prefix, config_path)
  policy._tf_gdp_restored_from = prefix  # pylint: disable=protected-access
  return policy


def _create_variables(policy: tf.keras.Model) -> None:
  """Creates the network's variables by one call on a four-op graph (their
  shapes do not depend on the graph); one GPU, so that the placement pushes
  to compute are the fewest (no cut, no LP)."""
  from tf_gdp.cost import topology as topology_lib  # pylint: disable=g-import-not-at-top
  from tf_gdp.graph import generators  # pylint: disable=g-import-not-at-top
  from tf_gdp.policy import features  # pylint: disable=g-import-not-at-top
  inputs = features.policy_inputs(
      generators.random_layered_graph(4, width=2), topology_lib.get("p100x1"))
  policy({k: tf.convert_to_tensor(v[None])
          for k, v in features.as_tensors(inputs).items()})


# Variables a saved policy may lack (`policy.compat`): v1 has no logit scale.
_MAY_LACK = ("policy/logit_scale/.ATTRIBUTES/VARIABLE_VALUE",)


def _check_weights_match(policy: tf.keras.Model, prefix: str,
                         config_path: str) -> None:
  """InputError when the checkpoint holds more or fewer of the network's
  variables than the config builds (layers added or removed by hand): a
  partial restore would otherwise leave some layers random."""
  saved = {name for name, _ in tf.train.list_variables(prefix)
           if name.startswith("policy/") and ".OPTIMIZER_SLOT" not in name
           and name.endswith("/.ATTRIBUTES/VARIABLE_VALUE")}
  lacking = sum(name not in saved for name in _MAY_LACK)
  built = len(policy.variables)
  if len(saved) not in (built, built - lacking):
    raise errors.InputError(
        f"{prefix}: the weights hold {len(saved)} of the network's variables "
        f"but {config_path} builds {built}: the config does not belong to "
        "these weights")

