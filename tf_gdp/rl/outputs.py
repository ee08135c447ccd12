"""What training writes besides checkpoints: best placements.

A task's best placement is a placement file (`tf_gdp.placement_file`) with
training's own fields:

  "evaluation": int (the evaluation that found it),
  "reference": {"method", "step_time_us" (simulated), "measured_us" (when
  it was measured)}, "speedup_vs_reference": float (same source as
  step_time_us), "group_devices": [int, ...]

`group_devices` (the policy's action, one device per colocation group in
the policy inputs' group order) lets a resumed run reinstate the placement
as its best without re-deriving groups from names. The checkpoint keeps the
same best as a `best_record`.
"""

import math
import os
import sys
from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp import placement_file
from tf_gdp.graph import identity
from tf_gdp.rl import placement_task
from tf_gdp.rl import rewards


def placement_document(task: placement_task.PlacementTask,
                       best: rewards.Best,
                       reference: Optional[rewards.Reference] = None,
                       method: str = "gdp",
                       command: Optional[str] = None,
                       reference_measured_us: Optional[float] = None) -> dict:
  """The placement file of a task's best (`command` None: this process's)."""
  fields = {"evaluation": int(best.evaluation),
            "group_devices": [int(d) for d in best.group_devices]}
  if reference is not None:
    fields["reference"] = {"method": reference.method,
                           "step_time_us": float(reference.step_time_us)}
    if reference_measured_us is not None:
      fields["reference"]["measured_us"] = float(reference_measured_us)
    judge = (reference.step_time_us if best.source == placement_file.SIMULATE
             else reference_measured_us)
    if judge and best.step_time_us > 0:
      fields["speedup_vs_reference"] = judge / best.step_time_us
  return placement_file.document(
      task.graph, task.topology.device_names, best.placement,
      topology_name=task.topology.name, method=method,
      step_time_us=best.step_time_us, step_time_source=best.source,
      command=command if command is not None else " ".join(sys.argv),
      fields=fields)


def write_placement(path: str, task: placement_task.PlacementTask,
                    best: rewards.Best,
                    reference: Optional[rewards.Reference] = None,
                    method: str = "gdp",
                    reference_measured_us: Optional[float] = None,
                    command: Optional[str] = None) -> None:
  """Writes `placement_document` to `path` atomically."""
  placement_file.write(path, placement_document(
      task, best, reference, method, command=command,
      reference_measured_us=reference_measured_us))


def read_best(path: str, task: placement_task.PlacementTask,
              inputs) -> Optional[rewards.Best]:
  """The Best a placement file holds for `task`, or None if it is not one."""
  if not os.path.isfile(path):
    return None
  try:
    loaded = placement_file.read(path)
  except errors.InputError:
    return None
  if (loaded.graph_fingerprint != identity.graph_fingerprint(task.graph) or
      loaded.topology_name != task.topology.name):
    return None
  return best_from_record(loaded.document, inputs)


def best_record(best: rewards.Best) -> dict:
  """JSON-able form of a Best (for the checkpoint)."""
  return {"group_devices": [int(d) for d in best.group_devices],
          "step_time_us": float(best.step_time_us), "source": best.source,
          "evaluation": int(best.evaluation)}


def best_from_record(record: dict, inputs) -> Optional[rewards.Best]:
  """Rebuilds a Best from `best_record` output (None if it does not fit)."""
  from tf_gdp.policy import features  # pylint: disable=g-import-not-at-top
  groups = np.asarray(record.get("group_devices", []), np.int32)
  step = float(record.get("step_time_us", math.nan))
  if groups.shape != (inputs.num_groups,) or not math.isfinite(step):
    return None
  try:
    placement = features.group_to_node_placement(inputs, groups)
  except Exception:  # pylint: disable=broad-except
    return None
  return rewards.Best(group_devices=groups, placement=placement,
                          step_time_us=step,
                          source=str(record.get("source", "simulate")),
                          evaluation=int(record.get("evaluation", 0)))
