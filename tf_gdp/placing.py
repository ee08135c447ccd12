"""One graph, one topology, one method: a placement and its report.

The shared core of `tf-gdp place`, `gdp.place()` and the examples:

    result = placing.place(graph, topology, "gdp", budget_seconds=60)
    result.placement            # int32 device index per op
    result.report()             # JSON-able: step time, baselines, bound, memory
    placing.save(result, graph, "placement.json")
    placement_file.load(graph, topology, "placement.json")  # by op name

Methods: "auto", the default (the best valid placement of GDP, the cheap
baselines and a local search: `auto_method`), "gdp" (the learned policy
alone: `gdp_method`) and every baseline of `tf_gdp.baselines`. No method's
placement is returned invalid: each goes through `baselines.valid_result`
(repaired to fit memory, else the best repaired fallback, else
`NoValidPlacementError`), and the report's details say when it was
changed ("repair"). Every result, searched here or re-applied from a
placement file by `gdp.place`, is judged by `judge`: the same simulator,
bound and baselines. A list scheduler (m_etf, m_sct, heft) plans the order
each device runs its ops in; it is judged with the simulator's default
order (`step_time_us`) and with its own (`step_time_planned_us`), as the
method itself and among the compared baselines.
"""

import dataclasses
import json
from typing import Callable, Dict, Optional, Sequence

import numpy as np

from grappler_bridge import errors as grappler_errors

from tf_gdp import auto_method
from tf_gdp import errors
from tf_gdp import float32_keras
from tf_gdp import gdp_method
from tf_gdp import placement_file
from tf_gdp.baselines import repair
from tf_gdp.baselines import valid_result
from tf_gdp.cost import ensemble
from tf_gdp.cost import feasibility
from tf_gdp.cost import lower_bound as lower_bound_lib
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

GDP = "gdp"
AUTO = auto_method.AUTO
# Cheap baselines every report lists next to the chosen method.
DEFAULT_COMPARE = ("single_device", "human_expert", "metis", "m_etf")
# How a baseline says its own memory estimate fits no device (`baselines.
# common`, `single_device`): it found no placement, though one may exist.
MEMORY_ESTIMATE_ERRORS = ("infeasible:", "no single device holds")
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
  return [AUTO, GDP] + baselines.method_names()


@float32_keras.in_float32
def place(graph: op_graph.OpGraph, topology: topology_lib.Topology,
          method: str = AUTO, *, budget_seconds: float = 0.0,
          budget_evaluations: Optional[int] = None,
          policy: Optional[str] = None, samples: int = 16, seed: int = 0,
          compare: Sequence[str] = DEFAULT_COMPARE,
          extracted=None, log: Optional[Callable[[str], None]] = None,
          robust_members: int = ROBUST_MEMBERS,
          robust_objective: bool = False) -> PlaceResult:
  """Places `graph` on `topology` with `method`; InputError on bad input.

  Args:
    graph, topology: what to place where.
    method: "auto" (the best valid placement of GDP and the baselines,
      `auto_method`), "gdp" or a baseline name (`method_names()`).
    budget_seconds: gdp: fine-tuning time after zero-shot (0: zero-shot
      only); auto: the time its searches share; hdp: its search budget is
      its own option, not this.
    budget_evaluations: gdp and auto: the same as a number of simulator
      evaluations (None: none); with both, the first reached ends a search.
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
  if budget_evaluations is not None and budget_evaluations < 1:
    raise errors.InputError("budget_evaluations must be >= 1")
  check_compare(compare)
  if robust_objective:
    check_robust_objective(method, budget_seconds, robust_members)
  feasibility.check_feasible(graph, topology)  # InfeasibleError with numbers
  priority = found_none = None
  if method == AUTO:
    chosen = auto_method.place(
        graph, topology, budget_seconds=budget_seconds,
        budget_evaluations=budget_evaluations, policy=policy,
        samples=samples, seed=seed, extracted=extracted, log=log)
    placement, seconds = chosen.placement, chosen.seconds
    evaluations, details = chosen.evaluations, chosen.details
    priority = chosen.priority
  elif method == GDP:
    placement, seconds, evaluations, details = gdp_method.place(
        graph, topology, budget_seconds=budget_seconds,
        budget_evaluations=budget_evaluations, policy=policy,
        samples=samples, seed=seed, extracted=extracted, log=log,
        robust_members=robust_members if robust_objective else 0)
  else:
    placement, seconds, evaluations, details, priority, found_none = (
        _place_baseline(method, graph, topology, seed))
  made = valid_result.valid_placement(graph, topology, placement,
                                      method=method, seed=seed,
                                      method_error=found_none)
  if made.repair is not None:
    details = dict(details, repair=made.repair)
    if made.repair.get("fallback"):
      priority = None  # the method's own order is for its own placement
  return judge(graph, topology, method, made.placement,
               search_seconds=seconds,
               evaluations=evaluations + made.evaluations, details=details,
               compare=compare, seed=seed, robust_members=robust_members,
               priority=priority)


def _place_baseline(method, graph, topology, seed):
  """(placement, seconds, evaluations, details, priority, why none).

  A baseline whose own memory estimate fits nowhere finds no placement
  (placement None, and why); the validity gate then tries its fallbacks,
  since the estimate is not the simulator's exact peak.
  """
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  try:
    found = baselines.run(method, graph, topology, seed=seed)
  except errors.InputError as e:
    message = grappler_errors.first_line(e)
    if not message.startswith(MEMORY_ESTIMATE_ERRORS):
      raise
    return None, 0.0, 0, {"found_none": message}, None, message
  return (found.placement, found.search_seconds, found.evaluations,
          _jsonable(found.info), found.priority, None)


def check_compare(compare: Sequence[str]) -> None:
  """InputError naming the baselines when `compare` holds anything else."""
  baselines = [name for name in method_names() if name not in (GDP, AUTO)]
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
  if not sim.valid:  # what the same repair as the method's makes of it
    fixed = repair.repair(graph, topology, found.placement)
    summary["repaired"] = {"valid": fixed.valid,
                           "step_time_us": fixed.step_time_us,
                           "moved_groups": fixed.moved_groups}
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
