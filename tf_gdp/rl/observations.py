"""The environment's observation: its padded sizes and tf-agents specs.

An observation is the padded dict of `tf_gdp.policy.features` plus
`GRAPH_ID`. All tasks of an environment share one padding (`padding_for`),
so that their observations batch together under one spec.
"""

from typing import Any, Sequence

import numpy as np
# pylint: disable=g-bad-import-order,unused-import
from tf_gdp.rl import tf_agents_import  # before any tf_agents module
# pylint: enable=g-bad-import-order,unused-import
from tf_agents.specs import array_spec

from tf_gdp.graph import scopes
from tf_gdp.policy import features

# Extra observation entry: rows of a batch with the same id show the same
# task, so the actor network encodes each distinct graph once per batch.
GRAPH_ID = "graph_id"


def padding_for(tasks: Sequence[Any]) -> dict:
  """Smallest padding (max_nodes ... max_devices) holding every task."""
  return {
      "max_nodes": max(t.graph.num_nodes for t in tasks),
      "max_edges": max(max(t.graph.num_edges for t in tasks), 1),
      "max_groups": max(int(t.graph.group_ids.max()) + 1 for t in tasks),
      "max_devices": max(t.topology.num_devices for t in tasks),
  }


def observation_spec(padding: dict, num_tasks: int) -> dict:
  """ArraySpecs of the observation; integer entries are bounded.

  The bounds matter: tf-agents builds networks by calling them on a sample
  of the spec, and an unbounded int32 sample is no valid op-type id or node
  index.
  """
  n, g, d = (padding["max_nodes"], padding["max_groups"],
             padding["max_devices"])
  bounds = {"op_type_ids": (0, features.OP_VOCAB - 1),
            "scope_ids": (0, scopes.SCOPE_VOCAB - 1),
            "edge_src": (0, n - 1), "edge_dst": (0, n - 1),
            "group_ids": (0, g - 1), "num_nodes": (1, n),
            "num_groups": (1, g), "num_devices": (1, d)}
  specs = {}
  for name, (shape, dtype) in features.observation_spec(**padding).items():
    if name in bounds:
      low, high = bounds[name]
      specs[name] = array_spec.BoundedArraySpec(shape, dtype, low, high,
                                                name=name)
    else:
      specs[name] = array_spec.ArraySpec(shape, dtype, name=name)
  specs[GRAPH_ID] = array_spec.BoundedArraySpec(
      (), np.int32, 0, max(num_tasks - 1, 0), name=GRAPH_ID)
  return specs
