"""The placements pipeline exploration leans towards, as a reference.

A pipeline push (`network._pipeline_noise`) adds g times a stage rule's
direction (`devices.stage_direction`) to the policy's logits; as g grows,
the sample becomes the rule's own placement: each colocation group on the
allowed device its ops' stages pull hardest, ops without a stage on the
first allowed device. Benchmarks report these next to GDP, so a table shows
what the rules give with no learning at all and what the policy adds.
"""

from typing import Dict

import numpy as np

from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph
from tf_gdp.policy import devices
from tf_gdp.policy import features
from tf_gdp.policy import scopes


def stage_placements(graph: op_graph.OpGraph,
                     topology: topology_lib.Topology) -> Dict[str, np.ndarray]:
  """Stage rule name -> int32[num_nodes] device per op (original ids).

  Rules under which no op has a stage are left out.
  """
  inputs = features.policy_inputs(graph, topology)
  n, g = inputs.num_nodes, inputs.num_groups
  placements = {}
  for r, rule in enumerate(scopes.STAGE_RULES):
    pair = inputs.stage_features[None, :, 2 * r:2 * r + 2]
    if not pair[0, :n, 1].any():
      continue
    pull = devices.stage_direction(
        pair, inputs.device_features[None], inputs.device_mask[None]
    ).numpy()[0, :n]
    groups = inputs.group_ids[:n]
    total = np.zeros((g, pull.shape[1]))
    np.add.at(total, groups, pull)
    allowed = inputs.allowed[:g] & inputs.device_mask[None, :]
    scores = np.where(allowed, total, -np.inf)
    placements[rule] = features.group_to_node_placement(
        inputs, np.argmax(scores, axis=1))
  return placements
