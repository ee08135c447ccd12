"""What training writes besides checkpoints: placement files and best records.

Placement file (JSON, written atomically; DESIGN.md section 5):

  {"format": "tf-gdp-placement", "version": 1, "method": "gdp",
   "graph": name, "graph_fingerprint": sha256 hex, "topology": name,
   "devices": [device names], "step_time_us": float, "step_time_source":
   "simulate" | "measure", "reference": {"method", "step_time_us"
   (simulated), "measured_us" (when it was measured)},
   "speedup_vs_reference": float (same source as step_time_us), "evaluation": int, "command": str,
   "placement": {op name: device name}, "group_devices": [int, ...]}

`group_devices` (the policy's action, one device per colocation group in
the policy inputs' group order) lets a resumed run reinstate the placement
as its best without re-deriving groups from names.
"""

import json
import math
import os
import sys
from typing import Optional

import numpy as np

from tf_gdp import fileio
from tf_gdp.graph import identity
from tf_gdp.rl import environment
from tf_gdp.rl import rewards

FORMAT = "tf-gdp-placement"
VERSION = 1


graph_fingerprint = identity.graph_fingerprint
safe_name = identity.safe_name


def placement_document(task: environment.PlacementTask,
                       best: rewards.Best,
                       reference: Optional[rewards.Reference] = None,
                       method: str = "gdp",
                       command: Optional[str] = None,
                       reference_measured_us: Optional[float] = None) -> dict:
  names = task.topology.device_names
  doc = {
      "format": FORMAT, "version": VERSION, "method": method,
      "graph": task.graph.name,
      "graph_fingerprint": graph_fingerprint(task.graph),
      "topology": task.topology.name,
      "devices": names,
      "step_time_us": float(best.step_time_us),
      "step_time_source": best.source,
      "evaluation": int(best.evaluation),
      "command": command if command is not None else " ".join(sys.argv),
      "placement": {op: names[int(d)] for op, d in
                    zip(task.graph.node_names, best.placement)},
      "group_devices": [int(d) for d in best.group_devices],
  }
  if reference is not None:
    doc["reference"] = {"method": reference.method,
                        "step_time_us": float(reference.step_time_us)}
    if reference_measured_us is not None:
      doc["reference"]["measured_us"] = float(reference_measured_us)
    judge = (reference.step_time_us if best.source == "simulate"
             else reference_measured_us)
    if judge and best.step_time_us > 0:
      doc["speedup_vs_reference"] = judge / best.step_time_us
  return doc


def write_placement(path: str, task: environment.PlacementTask,
                    best: rewards.Best,
                    reference: Optional[rewards.Reference] = None,
                    method: str = "gdp",
                    reference_measured_us: Optional[float] = None) -> None:
  fileio.write_atomically(path, json.dumps(placement_document(
      task, best, reference, method,
      reference_measured_us=reference_measured_us), indent=1))


def read_best(path: str, task: environment.PlacementTask,
              inputs) -> Optional[rewards.Best]:
  """The Best a placement file holds for `task`, or None if it is not one."""
  if not os.path.isfile(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      doc = json.load(f)
  except (OSError, ValueError):
    return None
  if (doc.get("format") != FORMAT or
      doc.get("graph_fingerprint") != graph_fingerprint(task.graph) or
      doc.get("topology") != task.topology.name):
    return None
  return best_from_record(doc, inputs)


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
