"""How policies saved by earlier versions load: what each lacks, what it gets.

A saved policy is `policy_config.json` (the `PolicyConfig` fields) and a TF
checkpoint of the network. Every field and variable added since is missing
from older saves; each gets the value that reproduces the policy it was
trained as, so an old policy places exactly as it did:

  v1      the checkpoint has no `logit_scale` variable: it keeps its initial
          1.0 (weights are restored partially, `rl.policy_io.load_policy`).
  v1, v2  the config has no `scope_features`: False. The encoder then reads
          the first `UNSCOPED_F_NODE` node-feature columns and no scope ids.
  v1-v3   the config has no `stage_affinity`: False (no `StageAffinity`
          layer). The policy shipped in `tf_gdp/pretrained` is a v3 policy.

Observation entries a version did not know (`stage_features`, the pipeline
columns of `exploration_noise`) need no decision: they carry no weights, and
a network built without the layer that reads them ignores them.
"""

from tf_gdp.policy import features

# Config fields a saved policy may lack, with the value it was trained with.
SAVED_DEFAULTS = {"scope_features": False, "stage_affinity": False}
# Node-feature columns of a policy without scope features: those before the
# scope columns.
UNSCOPED_F_NODE = features.NODE_FEATURE_NAMES.index("scope_0_rank")


def saved_config(config: dict) -> dict:
  """PolicyConfig fields of a saved config, with what it predates filled in."""
  return {**SAVED_DEFAULTS, **config}
