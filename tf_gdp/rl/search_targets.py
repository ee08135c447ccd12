"""Imitation targets: the best placement search finds for each training task.

Pre-training starts by imitating search (`imitation`): for every task, the
fastest valid placement among the one-shot baselines of `BASELINES` (one
device, the expert's rules where the graph has them, the list schedulers,
METIS, the stage rules, the contiguous-split DP) and `local_search` with a
budget of `evaluations` simulator evaluations. Every candidate is repaired
to fit memory (`baselines.repair`) and judged by the nominal simulator, as
the environment judges PPO's samples (`baselines.best_of`); a baseline that
cannot place the graph (no rules for it, say) is left out and named in the
target's `skipped`.

A placement the policy imitates only partly (half its groups right, say)
can be far slower than either the target or one device: every group on
the wrong side of a cut adds a transfer. With a `tolerance` the target is
therefore the simplest candidate within that fraction of the fastest: the
one that moves the fewest bytes between devices (ties: the faster), so a
scatter that wins by 2% gives way to one device or a clean pipeline.

    found = search_targets.targets(tasks, "runs/pre/targets",
                                   evaluations=2000, log=print)

Targets are cached, one JSON file per task (`cache_path`: the task's name,
its topology's name, the graph's fingerprint and the search budget), written
atomically when found; a rerun reads them back, so a killed run resumes
where it stopped. A cached file that does not parse, belongs to another
graph or budget, or whose placement is no longer valid or no longer has its
recorded step time (the graph was re-costed) is recomputed.
"""

import dataclasses
import json
import math
import os
from typing import Callable, List, Optional, Sequence

import numpy as np

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.baselines import best_of
from tf_gdp.cost import simulator
from tf_gdp.graph import identity
from tf_gdp.policy import features
from tf_gdp.rl import placement_task

BASELINES = ("single_device", "human_expert", "m_etf", "m_sct", "heft",
             "metis", "stage_pipeline", "contiguous_dp")
LOCAL_SEARCH = "local_search"
DEFAULT_EVALUATIONS = 2000
FORMAT = "tf-gdp imitation target"
VERSION = 1
# A cached target's step time must simulate again to within this fraction.
_SAME_TIME = 1e-6


@dataclasses.dataclass(frozen=True)
class Target:
  """The placement one task is pre-trained towards.

  Attributes:
    task: the task's name.
    method: the candidate that won, or None when no candidate is valid
      (then there is nothing to imitate; `reason` says why).
    step_time_us: the winner's simulated step time (NaN without one).
    evaluations: simulator evaluations the search used in all (every
      method's own and the repairs').
    group_devices: int32[num_groups] device per colocation group (the
      policy's action, unpadded; `features.node_to_group_placement`).
    placement: int32[num_nodes] device per op.
    candidates: method -> {step_time_us (None: invalid), valid,
      evaluations, repaired}.
    skipped: method -> why it could not place the graph.
    reason: why there is no target, or None.
    fastest_us: the fastest candidate's step time (`step_time_us` is the
      chosen one's; they differ only with a tolerance).
  """
  task: str
  method: Optional[str]
  step_time_us: float
  evaluations: int
  group_devices: Optional[np.ndarray]
  placement: Optional[np.ndarray]
  candidates: dict
  skipped: dict
  reason: Optional[str] = None
  fastest_us: float = math.nan


def search_target(task: placement_task.PlacementTask, *,
                  evaluations: int = DEFAULT_EVALUATIONS,
                  seed: int = 0, tolerance: float = 0.0) -> Target:
  """The best valid placement of `BASELINES` and `local_search`, or the
  simplest within `tolerance` of it (module doc)."""
  methods = [(name, {}) for name in BASELINES]
  methods.append((LOCAL_SEARCH, {"evaluations": int(evaluations)}))
  try:
    found = best_of.best_of(task.graph, task.topology, methods, seed=seed,
                            label="the imitation target's candidates")
  except errors.InfeasibleError as e:
    return Target(task=task.name, method=None, step_time_us=math.nan,
                  evaluations=0, group_devices=None, placement=None,
                  candidates={}, skipped={}, reason=str(e).splitlines()[0])
  method = simplest(task.graph, found, tolerance)
  placement = np.asarray(found.valid_placements[method], np.int32)
  inputs = features.policy_inputs(task.graph, task.topology)
  return Target(
      task=task.name, method=method,
      step_time_us=float(found.candidates[method]["step_time_us"]),
      evaluations=int(found.evaluations),
      group_devices=features.node_to_group_placement(inputs, placement),
      placement=placement, candidates=found.candidates,
      skipped=found.skipped, fastest_us=float(found.step_time_us))


def simplest(graph, found: best_of.BestOf, tolerance: float) -> str:
  """The valid candidate within `tolerance` of the fastest that moves the
  fewest bytes between devices (ties: the faster, then the earlier)."""
  if tolerance <= 0:
    return found.method
  limit = found.step_time_us * (1.0 + tolerance)
  near = []
  for order, (name, placement) in enumerate(found.valid_placements.items()):
    step = found.candidates[name]["step_time_us"]
    if step <= limit:
      cut = placement[graph.edge_src] != placement[graph.edge_dst]
      near.append((float(graph.edge_bytes[cut].sum()), step, order, name))
  return min(near)[-1]


def cache_path(cache_dir: str, task: placement_task.PlacementTask,
               evaluations: int, tolerance: float = 0.0) -> str:
  """`<cache_dir>/<task>@<topology>-<fingerprint>-<evaluations>.json`.

  The topology is left out of the name when the task's name ends with it
  (`tasks.placement_tasks` names tasks `<graph>@<devices>`); a tolerance
  adds `-simplest<tolerance>` before `.json`.
  """
  fingerprint = identity.graph_fingerprint(task.graph)[:16]
  name = task.name
  if not name.endswith(f"@{task.topology.name}"):
    name = f"{name}@{task.topology.name}"
  name = identity.safe_name(name)
  suffix = f"-simplest{tolerance:g}" if tolerance > 0 else ""
  return os.path.join(cache_dir,
                      f"{name}-{fingerprint}-{int(evaluations)}{suffix}.json")


def targets(tasks: Sequence[placement_task.PlacementTask],
            cache_dir: Optional[str] = None, *,
            evaluations: int = DEFAULT_EVALUATIONS, seed: int = 0,
            tolerance: float = 0.0,
            log: Optional[Callable[[str], None]] = None) -> List[Target]:
  """Each task's `Target`, read from `cache_dir` or searched and cached."""
  log = log or (lambda line: None)
  found = []
  for number, task in enumerate(tasks, 1):
    path = (cache_path(cache_dir, task, evaluations, tolerance)
            if cache_dir else None)
    target = None
    if path and os.path.exists(path):
      target, problem = read_target(path, task, evaluations, seed, tolerance)
      if target is None:
        log(f"imitation target {os.path.basename(path)}: {problem}; "
            "searching again")
    if target is None:
      target = search_target(task, evaluations=evaluations, seed=seed,
                             tolerance=tolerance)
      if path:
        fileio.write_atomically(path, json.dumps(
            _record(target, task, evaluations, seed, tolerance)))
      log(f"imitation target {number}/{len(tasks)} {task.name}: "
          + _describe(target))
    found.append(target)
  return found


def _describe(target: Target) -> str:
  if target.method is None:
    return f"none ({target.reason})"
  return (f"{target.method} {target.step_time_us / 1e3:.3f} ms "
          f"({target.evaluations} evaluations)")


def _record(target: Target, task, evaluations: int, seed: int,
            tolerance: float) -> dict:
  """The cache file's JSON document."""
  return {
      "format": FORMAT, "version": VERSION, "task": task.name,
      "topology": task.topology.name,
      "fingerprint": identity.graph_fingerprint(task.graph),
      "search_evaluations": int(evaluations), "seed": int(seed),
      "tolerance": float(tolerance), "method": target.method,
      "fastest_us": _finite_or_none(target.fastest_us),
      "step_time_us": (None if target.method is None
                       else float(target.step_time_us)),
      "evaluations": int(target.evaluations),
      "candidates": target.candidates, "skipped": target.skipped,
      "reason": target.reason,
      "group_devices": (None if target.group_devices is None
                        else [int(d) for d in target.group_devices]),
      "placement": (None if target.placement is None
                    else [int(d) for d in target.placement]),
  }


def read_target(path: str, task, evaluations: int, seed: int,
                tolerance: float = 0.0):
  """(Target, None) from a cache file, or (None, why it cannot be used)."""
  try:
    with open(path, encoding="utf-8") as f:
      doc = json.load(f)
  except (OSError, ValueError) as e:
    return None, f"unreadable ({e})"
  if not isinstance(doc, dict):
    return None, "not a JSON object"
  wanted = {"format": FORMAT, "version": VERSION, "task": task.name,
            "topology": task.topology.name,
            "fingerprint": identity.graph_fingerprint(task.graph),
            "search_evaluations": int(evaluations), "seed": int(seed)}
  wanted["tolerance"] = float(tolerance)
  for key, value in wanted.items():
    # Files written before tolerances existed are tolerance 0.
    have = doc.get(key, 0.0 if key == "tolerance" else None)
    if have != value:
      return None, f"{key} is {have!r}, not {value!r}"
  try:
    if doc["method"] is None:
      return Target(task=task.name, method=None, step_time_us=math.nan,
                    evaluations=int(doc["evaluations"]), group_devices=None,
                    placement=None, candidates={}, skipped={},
                    reason=str(doc["reason"])), None
    placement = np.asarray(doc["placement"], np.int64)
    group_devices = np.asarray(doc["group_devices"], np.int64)
    step = float(doc["step_time_us"])
    fastest = doc.get("fastest_us")
    target = Target(task=task.name, method=str(doc["method"]),
                    step_time_us=step, evaluations=int(doc["evaluations"]),
                    group_devices=group_devices.astype(np.int32),
                    placement=placement.astype(np.int32),
                    candidates=dict(doc["candidates"]),
                    skipped=dict(doc["skipped"]),
                    fastest_us=step if fastest is None else float(fastest))
  except (KeyError, TypeError, ValueError) as e:
    return None, f"malformed ({type(e).__name__}: {e})"
  problem = _placement_problem(task, target)
  return (None, problem) if problem else (target, None)


def _finite_or_none(value: float) -> Optional[float]:
  return float(value) if math.isfinite(value) else None


def _placement_problem(task, target: Target) -> Optional[str]:
  """Why a cached target's placement is not what it says, or None."""
  graph, topology = task.graph, task.topology
  placement = target.placement
  if placement.shape != (graph.num_nodes,) or placement.size and (
      placement.min() < 0 or placement.max() >= topology.num_devices):
    return "its placement does not fit the graph and devices"
  broken = simulator.constraint_problems(graph, placement, topology)
  if broken:
    return f"its placement breaks a constraint ({broken[0]})"
  inputs = features.policy_inputs(graph, topology)
  if not np.array_equal(features.node_to_group_placement(inputs, placement),
                        target.group_devices):
    return "its group devices disagree with its placement"
  judged = simulator.simulate(graph, placement, topology)
  if not judged.valid:
    return f"its placement is invalid now ({judged.reason})"
  if abs(judged.step_time_us - target.step_time_us) > _SAME_TIME * max(
      target.step_time_us, 1.0):
    return (f"its placement simulates to {judged.step_time_us:.1f} us, not "
            f"the recorded {target.step_time_us:.1f} us")
  return None
