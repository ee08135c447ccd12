"""Pins the public API of tf_gdp.policy, so that changing it is deliberate."""

import subprocess
import sys

import tf_gdp
from tf_gdp import policy

_PUBLIC = [
    "DEVICE_FEATURE_NAMES",
    "DeviceEncoder",
    "EDGE_FEATURE_NAMES",
    "F_DEVICE",
    "F_EDGE",
    "F_NODE",
    "FeatureWiseGate",
    "FeedForwardPlacer",
    "GdpPolicy",
    "GraphEncoder",
    "NEG_LOGIT",
    "NODE_FEATURE_NAMES",
    "OBSERVATION_KEYS",
    "OP_VOCAB",
    "PairScorer",
    "PolicyConfig",
    "PolicyInputs",
    "TransformerXLPlacer",
    "as_tensors",
    "group_to_node_placement",
    "observation_spec",
    "op_type_id",
    "policy_inputs",
]


def test_public_names_are_pinned():
  assert sorted(policy.__all__) == _PUBLIC
  for name in _PUBLIC:
    assert getattr(policy, name) is not None, name
  assert set(_PUBLIC) <= set(dir(policy))


def test_contract_constants():
  assert policy.NEG_LOGIT == -1e9
  assert policy.OBSERVATION_KEYS == (
      "node_features", "op_type_ids", "scope_ids", "edge_src", "edge_dst",
      "edge_features",
      "node_mask", "edge_mask", "group_ids", "group_mask", "device_features",
      "device_mask", "exploration_noise", "stage_features",
      "placement_features", "allowed",
      "num_nodes", "num_groups", "num_devices")
  assert (policy.F_NODE, policy.F_EDGE, policy.F_DEVICE) == (
      len(policy.NODE_FEATURE_NAMES), len(policy.EDGE_FEATURE_NAMES),
      len(policy.DEVICE_FEATURE_NAMES))


def test_features_do_not_import_tensorflow():
  code = ("import sys, tf_gdp.policy.features, tf_gdp.policy; "
          "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
  subprocess.run([sys.executable, "-c", code], check=True,
                 cwd=tf_gdp.__path__[0] + "/..")
