"""One graph, one topology, one method: a placement and its report.

The shared core of `tf-gdp place`, `gdp.place()` and the examples:

    result = placing.place(graph, topology, "gdp", budget_seconds=60)
    result.placement            # int32 device index per op
    result.report()             # JSON-able: step time, baselines, bound, memory
    placing.save(result, graph, "placement.json")
    placement_file.load(graph, topology, "placement.json")  # by op name

Methods: "gdp" (the learned policy: zero-shot, i.e. one forward pass then
greedy plus a handful of samples judged by the simulator; with a budget it
is then fine-tuned on this graph for that many seconds and the better of the
two is kept; both are the policy's own placements) and every baseline of
`tf_gdp.baselines`. Every result, searched here or re-applied from a
placement file by `gdp.place`, is judged by `judge`: the same simulator,
bound and baselines. A list scheduler (m_etf, m_sct, heft) plans the order
each device runs its ops in; it is judged with the simulator's default
order (`step_time_us`) and with its own (`step_time_planned_us`), as the
method itself and among the compared baselines.
"""

import dataclasses
import json
import os
import time
from typing import Callable, Dict, Optional, Sequence

import numpy as np

from grappler_bridge import errors as grappler_errors

from tf_gdp import errors
from tf_gdp import placement_file
from tf_gdp.cost import ensemble
from tf_gdp.cost import lower_bound as lower_bound_lib
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

GDP = "gdp"
# The policy that ships with the package (`make pretrain` reproduces it).
PRETRAINED_POLICY = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 "pretrained", "policy")
# Cheap baselines every report lists next to the chosen method.
DEFAULT_COMPARE = ("single_device", "human_expert", "metis", "m_etf")
# Perturbed cost models a preset's report judges placements under (0: none).
ROBUST_MEMBERS = ensemble.DEFAULT_MEMBERS


@dataclasses.dataclass
class PlaceResult:
  """A placement of one graph on one topology, judged by the simulator.

  Attributes:
    graph_name, topology_name, method: what was placed where, and how.
    device_names: the topology's devices (placement indexes into them).
    placement: int32[num_nodes] device index per op (graph node order).
    step_time_us: simulated step time.
    valid: memory fits and constraints hold; `reason` says why not.
    search_seconds: time the method took (fine-tuning included).
    evaluations: simulator calls the search made.
    peak_memory_bytes, busy_us: per device.
    transfer_bytes: bytes moved between devices per step.
    lower_bound_us: the communication-free bound for this graph+topology.
    compared: method -> {step_time_us, valid, search_seconds} of baselines
      (and their "robustness", when judged; plus step_time_planned_us and
      planned_valid for list schedulers).
    details: method specifics (gdp: mode, zero-shot figures, iterations).
    robustness: on a preset, the summary of the placement under perturbed
      cost models (`robust_judge`); None elsewhere or when switched off.
    step_time_planned_us, planned_valid: simulated with the method's own
      planned per-device order (list schedulers; None otherwise).
  """
  graph_name: str
  topology_name: str
  method: str
  device_names: list
  placement: np.ndarray
  step_time_us: float
  valid: bool
  reason: Optional[str]
  search_seconds: float
  evaluations: int
  peak_memory_bytes: list
  busy_us: list
  transfer_bytes: int
  lower_bound_us: float
  compared: Dict[str, dict] = dataclasses.field(default_factory=dict)
  details: dict = dataclasses.field(default_factory=dict)
  robustness: Optional[dict] = None
  step_time_planned_us: Optional[float] = None
  planned_valid: Optional[bool] = None

  def device_map(self, graph: op_graph.OpGraph) -> Dict[str, str]:
    """op name -> device name."""
    return {op: self.device_names[int(d)]
            for op, d in zip(graph.node_names, self.placement)}

  def report(self) -> dict:
    """Everything but the per-op placement, JSON-able."""
    return {
        "graph": self.graph_name, "topology": self.topology_name,
        "method": self.method, "devices": list(self.device_names),
        "step_time_us": self.step_time_us, "valid": self.valid,
        "step_time_planned_us": self.step_time_planned_us,
        "planned_valid": self.planned_valid, "reason": self.reason,
        "search_seconds": self.search_seconds, "evaluations": self.evaluations,
        "peak_memory_bytes": [int(b) for b in self.peak_memory_bytes],
        "busy_us": [float(b) for b in self.busy_us],
        "transfer_bytes": int(self.transfer_bytes),
        "lower_bound_us": self.lower_bound_us,
        "compared": self.compared, "details": self.details,
        "robustness": self.robustness,
    }


def method_names() -> list:
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  return [GDP] + baselines.method_names()


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology,
          method: str = GDP, *, budget_seconds: float = 0.0,
          policy: Optional[str] = None, samples: int = 16, seed: int = 0,
          compare: Sequence[str] = DEFAULT_COMPARE,
          extracted=None, log: Optional[Callable[[str], None]] = None,
          robust_members: int = ROBUST_MEMBERS,
          robust_objective: bool = False) -> PlaceResult:
  """Places `graph` on `topology` with `method`; InputError on bad input.

  Args:
    graph, topology: what to place where.
    method: "gdp" or a baseline name (`method_names()`).
    budget_seconds: gdp: fine-tuning time after zero-shot (0: zero-shot
      only); hdp: its search budget is its own option, not this.
    policy: gdp: a saved policy directory (default: the shipped one).
    samples: gdp: sampled placements per forward pass / PPO iteration.
    seed: seeds sampling and randomized baselines.
    compare: baselines to evaluate beside the method for the report.
    extracted: the graph's MetaGraphDef, when it came from TensorFlow.
    log: progress line sink for fine-tuning.
    robust_members: on a preset, judge the placements also under this many
      perturbed cost models (`robust_judge`; 0: not).
    robust_objective: gdp with a budget: fine-tune on the median step time
      over `robust_members` perturbed cost models, not the nominal one.
  """
  if method not in method_names():
    raise errors.InputError(
        f"unknown method {method!r}; choose from {', '.join(method_names())}")
  if budget_seconds < 0:
    raise errors.InputError("budget_seconds must be >= 0")
  check_compare(compare)
  if robust_objective:
    check_robust_objective(method, budget_seconds, robust_members)
  from tf_gdp.cost import feasibility  # pylint: disable=g-import-not-at-top
  feasibility.check_feasible(graph, topology)  # InfeasibleError with numbers
  priority = None
  if method == GDP:
    placement, seconds, evaluations, details = _place_gdp(
        graph, topology, budget_seconds=budget_seconds, policy=policy,
        samples=samples, seed=seed, extracted=extracted, log=log,
        robust_members=robust_members if robust_objective else 0)
  else:
    from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
    found = baselines.run(method, graph, topology, seed=seed)
    placement, seconds = found.placement, found.search_seconds
    evaluations, details = found.evaluations, _jsonable(found.info)
    priority = found.priority
  return judge(graph, topology, method, placement, search_seconds=seconds,
               evaluations=evaluations, details=details, compare=compare,
               seed=seed, robust_members=robust_members,
               priority=priority)


def check_compare(compare: Sequence[str]) -> None:
  """InputError naming the baselines when `compare` holds anything else."""
  baselines = [name for name in method_names() if name != GDP]
  for name in compare:
    if name not in baselines:
      raise errors.InputError(f"cannot compare with {name!r}: not a baseline; "
                              f"choose from {', '.join(baselines)}")


def check_robust_objective(method: str, budget_seconds: float,
                           robust_members: int) -> None:
  """InputError unless the robust objective has something to steer."""
  if method != GDP or budget_seconds <= 0 or robust_members <= 0:
    raise errors.InputError(
        "the robust objective steers gdp's fine-tuning: it needs method gdp, "
        "budget_seconds > 0 and robust_members > 0")


def check_policy(policy: Optional[str] = None) -> str:
  """The policy directory `gdp` would use (None: the shipped one), checked.

  Raises InputError when it is missing or not a loadable saved policy, so
  that a batch fails once, before its first graph, not once per graph.
  """
  from tf_gdp.rl import policy_io  # pylint: disable=g-import-not-at-top
  policy_path = policy or PRETRAINED_POLICY
  if not os.path.isdir(policy_path):
    raise errors.InputError(
        f"no policy at {policy_path}: pass a saved policy directory, or run "
        "`make pretrain` to build the shipped one")
  policy_io.load_policy(policy_path)  # config and weights present, readable
  return policy_path


def _place_gdp(graph, topology, *, budget_seconds, policy, samples, seed,
               extracted, log, robust_members=0):
  """(placement, seconds, evaluations, details) from the learned policy.

  With `robust_members`, fine-tuning's objective is the median step time
  over that many perturbed cost models, and so is the choice between the
  zero-shot and the fine-tuned placement.
  """
  from tf_gdp.rl import environment  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import train_config  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import workflows  # pylint: disable=g-import-not-at-top
  policy_path = check_policy(policy)
  started = time.perf_counter()
  task = environment.PlacementTask(graph, topology, extracted=extracted,
                                   name=graph.name)
  shot = workflows.zeroshot(policy_path, task, samples=samples, seed=seed)
  placement = shot.placement
  details = {"mode": "zero-shot", "policy": policy_path,
             "zero_shot_step_time_us": shot.step_time_us,
             "zero_shot_chosen": shot.chosen,
             "greedy_step_time_us": shot.greedy_step_time_us,
             "zero_shot_seconds": shot.seconds}
  evaluations = 1 + samples
  if budget_seconds > 0:
    config = train_config.TrainConfig(
        graphs_per_iteration=1, samples_per_graph=max(samples, 2), seed=seed,
        log_every_seconds=30.0, checkpoint_every_seconds=1e9,
        robust_objective=robust_members > 0,
        robust_members=robust_members or ensemble.DEFAULT_MEMBERS)
    tuned = workflows.finetune(
        policy_path, task, budget=train_config.Budget(seconds=budget_seconds),
        config=config, log=log or (lambda line: None))
    best = tuned.best[task.name]
    evaluations += tuned.evaluations
    details.update(mode="fine-tune", finetune_iterations=tuned.iterations,
                   finetune_seconds=tuned.seconds,
                   finetune_step_time_us=(best.step_time_us if best else None))
    tuned_us, shot_us = (best.step_time_us if best else None,
                         shot.step_time_us)
    if best is not None and robust_members:
      details.update(finetune_objective="ensemble_median")
      objective = ensemble.Ensemble(graph, topology, members=robust_members,
                                    seed=ensemble.OBJECTIVE_SEED)
      tuned_us, shot_us = np.median(objective.step_times(
          np.stack([best.placement, shot.placement])), axis=0)
    if best is not None and (tuned_us < shot_us or not shot.valid):
      placement = best.placement
  return (np.asarray(placement, np.int32), time.perf_counter() - started,
          evaluations, details)


def judge(graph: op_graph.OpGraph, topology: topology_lib.Topology,
          method: str, placement, *, search_seconds: float = 0.0,
          evaluations: int = 0, details: Optional[dict] = None,
          compare: Sequence[str] = (), seed: int = 0,
          robust_members: int = ROBUST_MEMBERS,
          priority=None) -> PlaceResult:
  """A placement's `PlaceResult`: simulated, bounded, beside baselines.

  Every result is judged here, whether `place` searched for it or it was
  re-applied from a placement file, so that their reports compare.

  Args:
    graph, topology: what is placed where.
    method: what found the placement (a method name, or e.g. "loaded").
    placement: int[num_nodes] device index per op.
    search_seconds, evaluations: what finding it cost.
    details: method specifics for the report.
    compare: baselines run and simulated beside it (`method` itself is
      skipped); one that cannot run reports its error.
    seed: seeds the randomized baselines.
    robust_members: on a preset, perturbed cost models the placement and
      the baselines are judged under too (`robust_judge`; 0: none).
    priority: the method's own planned per-op order, if it has one: the
      placement is then also simulated with it (`step_time_planned_us`).
  """
  sim = simulator.simulate(graph, placement, topology)
  result = PlaceResult(
      graph_name=graph.name, topology_name=topology.name, method=method,
      device_names=topology.device_names,
      placement=np.asarray(placement, np.int32),
      step_time_us=sim.step_time_us, valid=sim.valid, reason=sim.reason,
      search_seconds=float(search_seconds), evaluations=int(evaluations),
      peak_memory_bytes=sim.peak_memory_bytes.tolist(),
      busy_us=sim.device_busy_us.tolist(), transfer_bytes=sim.transfer_bytes,
      lower_bound_us=float(lower_bound_lib.lower_bound(graph, topology)),
      details=dict(details or {}))
  robust = robust_judge(graph, topology, robust_members)
  if priority is not None:
    planned = simulator.simulate(graph, placement, topology, priority=priority)
    result.step_time_planned_us = planned.step_time_us
    result.planned_valid = planned.valid
  for name in compare:
    if name != method:
      result.compared[name] = _baseline_summary(name, graph, topology, seed,
                                                robust)
  if robust is not None:
    result.robustness = robust(result.placement)
  return result


def robust_judge(graph: op_graph.OpGraph, topology: topology_lib.Topology,
                 members: int = ROBUST_MEMBERS
                 ) -> Optional[Callable[[np.ndarray], dict]]:
  """On a preset, placement -> its robustness summary; else None.

  A preset has no hardware attached, so every step time is the cost
  model's guess: a placement is also judged under `members` perturbed cost
  models (`tf_gdp.cost.ensemble`, seeded by `ensemble.REPORT_SEED`, so
  reports compare), against the single-device placement under the same
  member. The summary (`ensemble.Robustness.summary`) gives the median and
  worst-case ratio to one device; when no single device holds the graph
  it gives the error instead.
  """
  if members <= 0 or topology.name not in topology_lib.preset_names():
    return None
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  try:
    single = baselines.run("single_device", graph, topology).placement
  except errors.InputError as e:
    error = {"members": members, "error": grappler_errors.first_line(e)}
    return lambda placement: dict(error)
  judged = ensemble.Ensemble(graph, topology, members=members,
                             seed=ensemble.REPORT_SEED)
  return lambda placement: judged.judge(placement, single).summary()


def _baseline_summary(name, graph, topology, seed, robust=None) -> dict:
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  try:
    found = baselines.run(name, graph, topology, seed=seed)
  except errors.InputError as e:  # e.g. no expert rules for this graph
    return {"error": grappler_errors.first_line(e)}
  sim = simulator.simulate(graph, found.placement, topology)
  summary = {"step_time_us": sim.step_time_us, "valid": sim.valid,
             "search_seconds": found.search_seconds}
  if robust is not None:
    summary["robustness"] = robust(found.placement)
  if found.priority is not None:
    planned = simulator.simulate(graph, found.placement, topology,
                                 priority=found.priority)
    summary.update(step_time_planned_us=planned.step_time_us,
                   planned_valid=planned.valid)
  return summary


def _jsonable(info: dict) -> dict:
  return json.loads(json.dumps(info, default=lambda o: (
      o.tolist() if isinstance(o, np.ndarray) else str(o))))


# ---- placement files ----------------------------------------------------------


def save(result: PlaceResult, graph: op_graph.OpGraph, path: str) -> None:
  """Writes `result`'s placement file (`tf_gdp.placement_file`) atomically."""
  placement_file.write(path, placement_file.document(
      graph, result.device_names, result.placement,
      topology_name=result.topology_name, method=result.method,
      step_time_us=result.step_time_us))
