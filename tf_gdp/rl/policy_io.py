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
  # Deferred restoration: the variables are created (and restored) on the
  # policy's first call. Partial: variables an older checkpoint lacks keep
  # their initial values (`policy.compat`).
  run_dir.restore_checkpoint(tf.train.Checkpoint(policy=policy), prefix,
                             partial=True)
  policy._tf_gdp_restored_from = prefix  # pylint: disable=protected-access
  return policy

