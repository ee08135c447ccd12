"""stage_pipeline: the stage rules' own placements, as a named baseline.

The stage rules (`graph.scopes.stage_coordinates`) read a stage in [0, 1]
off the numbered name scopes along a graph's main stack of blocks
(`layer_3/`, `segment_1/layer_2/`); GDP's pipeline exploration pushes its
samples towards stage i on device i. What those rules give with no learning
at all is hand-written knowledge, so it is a baseline row of its own: a
table then shows what the policy adds to it.

A rule's placement is the limit of a pipeline push of huge gain: the stage
s of an op pulls device j, the r-th of the K devices of its kind, by
max(0, 1 - |s (K - 1) - r|) (kinds with one device, and ops without a
stage, pull nothing); each colocation group goes to the allowed device its
ops pull hardest (the first allowed device when nothing pulls). This is the
policy's `devices.stage_direction` without a centre shift. Every rule that
gives some op a stage is simulated (one batch) and the fastest valid one is
returned; if none fits in memory, the fastest is repaired with
`common.repair_memory` (the info says so).

Where no rule applies (names without a numbered main stack), the method
falls back to m-TOPO, a split of the topological order into contiguous
stages of balanced compute, and says so in the info (`fallback`).
"""

from typing import Dict

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.baselines import m_topo
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph
from tf_gdp.graph import scopes

FALLBACK = "m_topo"


def stage_pull(stage: np.ndarray, known: np.ndarray,
               topology: topology_lib.Topology) -> np.ndarray:
  """float[n, d]: how much each op's stage pulls each device, in [0, 1]."""
  kinds = topology.kinds
  index_in_kind = np.zeros(len(kinds))
  count_of_kind = np.zeros(len(kinds))
  for kind in set(kinds):
    members = [j for j, k in enumerate(kinds) if k == kind]
    index_in_kind[members] = np.arange(len(members))
    count_of_kind[members] = len(members)
  position = np.asarray(stage, np.float64)[:, None] * (count_of_kind - 1.0)
  pull = np.maximum(0.0, 1.0 - np.abs(position - index_in_kind[None, :]))
  shared = (count_of_kind > 1).astype(np.float64)
  return pull * shared[None, :] * np.asarray(known, np.float64)[:, None]


def rule_placements(graph: op_graph.OpGraph,
                    topology: topology_lib.Topology) -> Dict[str, np.ndarray]:
  """Stage rule name -> int32[num_nodes] device per op (see the module doc).

  Rules under which no op has a stage are left out.
  """
  view = common.group_view(graph, topology)
  placements = {}
  for rule, (stage, known) in zip(scopes.STAGE_RULES,
                                  scopes.stage_coordinates_of_rules(
                                      graph.node_names, graph.edge_src,
                                      graph.edge_dst, graph.topo_order)):
    if not known.any():
      continue
    pull = stage_pull(stage, known, topology)
    total = np.zeros((view.num_groups, topology.num_devices))
    np.add.at(total, view.group_of, pull)
    scores = np.where(view.allowed, total, -np.inf)
    placements[rule] = view.expand(np.argmax(scores, axis=1))
  return placements


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """The best stage rule's placement, or m-TOPO's where no rule applies."""
  del seed  # deterministic
  found = rule_placements(graph, topology)
  if not found:
    common.note("fallback", f"{FALLBACK}: no stage rule applies (no numbered "
                "name scopes along a main stack of blocks)")
    return m_topo.place(graph, topology,
                        activation_fraction=activation_fraction,
                        memory_headroom=memory_headroom)
  names = list(found)
  batch = common.simulate_batch(graph, np.stack([found[r] for r in names]),
                                topology)
  common.note("rules", {r: {"step_time_us": round(float(t), 3),
                            "valid": bool(v)}
                        for r, t, v in zip(names, batch.step_time_us,
                                           batch.valid)})
  ranked = sorted(range(len(names)), key=lambda i: (
      not batch.valid[i], batch.step_time_us[i]))
  best = ranked[0]
  common.note("rule", names[best])
  if batch.valid[best]:
    return found[names[best]]
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  group_device = found[names[best]][view.members[view.member_ptr[:-1]]]
  common.note("repaired", "no rule's placement fits in memory: groups moved "
              "off over-full devices (common.repair_memory)")
  return view.expand(common.repair_memory(view, model, group_device))
