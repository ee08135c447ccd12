"""The GDP policy: padded policy inputs, TF-GNN encoder, Transformer-XL placer.

    inputs = policy.policy_inputs(graph, topology, max_nodes=..., ...)
    observation = policy.as_tensors(inputs)           # numpy dict, one graph
    logits = policy.GdpPolicy(policy.PolicyConfig())(batched_observation)
    placement = policy.group_to_node_placement(inputs, group_devices)

`features` is TF-free, so environments and tools can build observations
without importing TensorFlow; the network names below are loaded on first
use (PEP 562), which imports TensorFlow only then.
"""

from grappler_bridge import package_api as _package_api
from tf_gdp.policy.features import DEVICE_FEATURE_NAMES
from tf_gdp.policy.features import EDGE_FEATURE_NAMES
from tf_gdp.policy.features import F_DEVICE
from tf_gdp.policy.features import F_EDGE
from tf_gdp.policy.features import F_NODE
from tf_gdp.policy.features import NODE_FEATURE_NAMES
from tf_gdp.policy.features import OBSERVATION_KEYS
from tf_gdp.policy.features import OP_VOCAB
from tf_gdp.policy.features import PolicyInputs
from tf_gdp.policy.features import as_tensors
from tf_gdp.policy.features import group_to_node_placement
from tf_gdp.policy.features import observation_spec
from tf_gdp.policy.features import op_type_id
from tf_gdp.policy.features import policy_inputs

# Public names that need TensorFlow: name -> defining module.
_LAZY = {
    "DeviceEncoder": "tf_gdp.policy.devices",
    "FeatureWiseGate": "tf_gdp.policy.superposition",
    "FeedForwardPlacer": "tf_gdp.policy.placer",
    "GdpPolicy": "tf_gdp.policy.network",
    "GraphEncoder": "tf_gdp.policy.encoder",
    "NEG_LOGIT": "tf_gdp.policy.network",
    "PairScorer": "tf_gdp.policy.devices",
    "PolicyConfig": "tf_gdp.policy.network",
    "TransformerXLPlacer": "tf_gdp.policy.placer",
}


__all__ = [
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

_package_api.install(
    globals(),
    modules=("devices", "encoder", "features", "network", "placer",
             "superposition"),
    lazy=_LAZY)
