"""The placement environment: a one-step tf-agents bandit over op graphs.

An episode is one decision, as in circuit_training's placement environment
turned into a bandit: `reset` picks a (graph, topology) task from the set
and shows it as the padded observation of `tf_gdp.policy.features`; the
action places every colocation group at once (int32[G_max], one device index
per group, padding ignored); `step` prices the placement and ends the episode.
The reward and its reference placement: `rewards`.

Backends price a placement:
  * `simulate` (default): `tf_gdp.cost.simulator.simulate_batch` (with
    `robust_members`: the median over perturbed cost models,
    `robust_objective`).
  * `measure`: the TF runtime (`tf_gdp.runtime.measure.measure`) on a target:
    "local", "cpu-workers:K" (a worker cluster started once and kept for the
    environment's life) or "grpc://host:port". Needs the task's
    `ExtractedGraph`. The reference is measured too.
  * `mix`: simulate every placement, then measure the batch's `measure_top_k`
    fastest valid ones whose simulated time is within `mix_slack` of the
    best simulated time so far; measured rows are rewarded by their measured
    ratio to the measured reference, the rest by the simulated ratio, and the
    best placement is judged by measurement.
Measurements are cached per placement (PPO resamples converged placements),
and `evaluations` counts the distinct placements priced per task: a sample
PPO drew before costs nothing again (simulated, the same time; measured, the
cached run), so a budget in evaluations is spent on new placements only.

`evaluate(task_index, group_devices[B, G])` prices a whole batch of
placements for one task (the trainer samples B placements per policy
forward pass); `step` is the same with B = 1. The environment keeps the best
valid placement seen per task (`best`).
"""

import math
from typing import Any, Optional, Sequence

import numpy as np

# pylint: disable=g-bad-import-order,unused-import
from tf_gdp.rl import tf_agents_import  # before any tf_agents module
# pylint: enable=g-bad-import-order,unused-import
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.baselines import repair
from tf_gdp.cost import simulator
from tf_gdp.policy import features
from tf_gdp.rl import measured_runs
from tf_gdp.rl import observations
from tf_gdp.rl import placement_task
from tf_gdp.rl import rewards
from tf_gdp.rl import robust_objective

BACKENDS = ("simulate", "measure", "mix")


class PlacementEnv(py_environment.PyEnvironment):
  """One-step placement bandit over a set of tasks (see the module doc)."""

  def __init__(self, tasks: Sequence[placement_task.PlacementTask], *,
               backend: str = "simulate",
               measure_target: Optional[Any] = None,
               measure_repeats: int = 3,
               measure_warmup: int = 1,
               measure_top_k: int = 1,
               mix_slack: float = 1.05,
               measure_confirm: int = 2,
               padding: Optional[dict] = None,
               reference_methods: Sequence[str] = rewards.REFERENCE_METHODS,
               seed: int = 0, allow_side_effects: bool = False,
               robust_members: int = 0, repair_invalid: bool = True):
    """Builds the environment; observations are built lazily per task.

    Args:
      tasks: the (graph, topology) pairs; `reset` draws one at random.
      backend: "simulate", "measure" or "mix".
      measure_target: "local", "cpu-workers:K", "grpc://..." or a started
        `workers.CpuWorkerCluster` (measure and mix backends).
      measure_repeats, measure_warmup: timed and warm-up steps per
        measurement.
      measure_top_k: mix backend: placements measured per batch at most.
      mix_slack: mix backend: measure a placement only if its simulated time
        is at most this factor times the best simulated time so far.
      measure_confirm: measure and mix backends: a placement about to become
        the task's best is first measured this many more times and judged
        by the median of all its measurements. The minimum over hundreds
        of noisy measurements is otherwise a lucky one: on cpu-workers:2 a
        "best" of 9.6 ms measured 10.8 ms again in the final sweeps.
      padding: max_nodes / max_edges / max_groups / max_devices (default:
        the largest task's sizes).
      reference_methods: baselines tried as the reward's reference.
      seed: seeds the task draws of `reset`.
      allow_side_effects: measure and mix backends: run graphs with ops that
        reach outside the step (`grappler_bridge.side_effects`).
      robust_members: simulate backend: reward the median step time over
        this many perturbed cost models (`robust_objective`); 0: nominal.
      repair_invalid: repair placements that break memory before judging
        them (`baselines.repair`, its simulations counted); the evaluation
        returns the executed action, which PPO trains on.

    Raises:
      InputError: no tasks, an unknown backend, a measure backend without a
        target, a task without its ExtractedGraph or (unless allowed) with
        ops that reach outside the step, robust members with a measure
        backend, or padding too small.
    """
    super().__init__()
    if not tasks:
      raise errors.InputError("the environment needs at least one task")
    if backend not in BACKENDS:
      raise errors.InputError(
          f"unknown reward backend {backend!r}; use one of {', '.join(BACKENDS)}")
    self._robust = robust_objective.for_environment(tasks, robust_members,
                                                    backend)
    if backend != "simulate":
      if measure_target is None:
        raise errors.InputError(f"backend {backend!r} needs a measure target")
      missing = [t.name for t in tasks if t.extracted is None]
      if missing:
        raise errors.InputError(
            f"backend {backend!r} measures real runs, but task {missing[0]!r} "
            "has no TensorFlow graph (load it from a model or a graph file, "
            "not from op-graph JSON)")
      from grappler_bridge import side_effects  # pylint: disable=g-import-not-at-top
      for task in tasks:
        side_effects.check(task.extracted.graph_def, what=task.name,
                           allow_side_effects=allow_side_effects)
    self._repair = bool(repair_invalid)
    names = [t.name for t in tasks]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
      raise errors.InputError(
          f"task names must be unique; given more than once: "
          f"{', '.join(repeated)} (the same graph named twice, e.g. a zoo "
          "model and the corpus variant that is that model)")
    self._tasks = list(tasks)
    self._backend = backend
    self._padding = dict(observations.padding_for(self._tasks),
                         **(padding or {}))
    self._reference_methods = tuple(reference_methods)
    self._rng = np.random.default_rng(seed)
    self._inputs = [None] * len(self._tasks)
    self._observations = [None] * len(self._tasks)
    self._references = [None] * len(self._tasks)
    self._measured_references = [None] * len(self._tasks)
    self._best = [None] * len(self._tasks)
    self._best_simulated = [math.inf] * len(self._tasks)
    self._priced = [set() for _ in self._tasks]  # placement keys per task
    self._runs = measured_runs.MeasuredRuns(
        self._tasks, measure_target, repeats=measure_repeats,
        warmup=measure_warmup, confirm=measure_confirm,
        allow_side_effects=allow_side_effects)
    self._measure_confirm = int(measure_confirm)
    self._measure_top_k = int(measure_top_k)
    self._mix_slack = float(mix_slack)
    self._current = 0
    self.evaluations = 0
    self._observation_spec = observations.observation_spec(self._padding,
                                                           len(self._tasks))
    self._action_spec = array_spec.BoundedArraySpec(
        (self._padding["max_groups"],), np.int32, minimum=0,
        maximum=self._padding["max_devices"] - 1, name="group_devices")

  # ---- specs and properties ------------------------------------------------

  def observation_spec(self):
    return self._observation_spec

  def action_spec(self):
    return self._action_spec

  @property
  def tasks(self) -> list:
    return list(self._tasks)

  @property
  def num_tasks(self) -> int:
    return len(self._tasks)

  @property
  def backend(self) -> str:
    return self._backend

  @property
  def padding(self) -> dict:
    return dict(self._padding)

  @property
  def current_task(self) -> int:
    return self._current

  # ---- per-task data -----------------------------------------------------

  def inputs(self, index: int) -> features.PolicyInputs:
    """The task's padded `PolicyInputs` (built once)."""
    if self._inputs[index] is None:
      task = self._tasks[index]
      self._inputs[index] = features.policy_inputs(
          task.graph, task.topology, **self._padding)
    return self._inputs[index]

  def observation(self, index: int) -> dict:
    """The task's observation dict (numpy, unbatched; built once)."""
    if self._observations[index] is None:
      obs = features.as_tensors(self.inputs(index))
      obs[observations.GRAPH_ID] = np.asarray(index, np.int32)
      self._observations[index] = obs
    return self._observations[index]

  def reference(self, index: int) -> rewards.Reference:
    """The task's reward reference (computed once; see the module doc)."""
    if self._references[index] is None:
      self._references[index] = rewards.compute_reference(
          self._tasks[index], self._reference_methods)
    return self._references[index]

  def reference_us(self, index: int, source: str = "simulate") -> float:
    """Reference step time as simulated, or as measured (measured once)."""
    if source == "simulate":
      return self.reference(index).step_time_us
    if self._measured_references[index] is None:
      ref = self.reference(index)
      if ref.placement is None:
        raise errors.InputError(
            f"task {self._tasks[index].name!r}: no single-device or expert "
            "placement is valid, so there is no reference to measure")
      measured = self._measure(index, ref.placement)
      if not measured.valid:
        raise errors.InputError(
            f"task {self._tasks[index].name!r}: the reference placement "
            f"({ref.method}) failed to run: {measured.reason}")
      self._measured_references[index] = measured.step_time_us
    return self._measured_references[index]

  def best_reward(self, index: int) -> float:
    """The reward of the task's best placement, as its samples are rewarded."""
    best = self._best[index]
    if self._robust is not None:
      return self._robust.best_reward(index, best, self.reference(index))
    return float(rewards.placement_reward(
        [best.step_time_us], [True], self.reference_us(index, best.source))[0])

  def measured_reference_us(self, index: int) -> Optional[float]:
    """The reference's measured step time if it was measured, else None."""
    return self._measured_references[index]

  def best(self, index: int) -> Optional[rewards.Best]:
    return self._best[index]

  def set_best(self, index: int, best: Optional[rewards.Best]) -> None:
    """Installs a best placement (restoring a checkpoint)."""
    self._best[index] = best
    if best is not None and best.source == "simulate":
      self._best_simulated[index] = min(self._best_simulated[index],
                                        best.step_time_us)

  def task_index(self, name: str) -> int:
    for i, task in enumerate(self._tasks):
      if task.name == name:
        return i
    raise KeyError(name)

  # ---- evaluation ----------------------------------------------------------

  def evaluate(self, index: int, group_devices) -> rewards.Evaluation:
    """Prices B placements of task `index` (int[B, G] device per group).

    Updates the evaluation counters and the task's best placement.
    """
    inputs = self.inputs(index)
    actions = np.asarray(group_devices)
    if actions.ndim != 2:
      raise errors.InputError(
          f"group devices must be [batch, groups], got shape {actions.shape}")
    batch = actions.shape[0]
    real = actions[:, :inputs.num_groups].astype(np.int64)
    in_range = np.all((real >= 0) & (real < inputs.num_devices), axis=1)
    safe = np.where(in_range[:, None], real, 0)
    placements = np.stack([features.group_to_node_placement(inputs, row)
                           for row in safe]) if batch else np.zeros(
                               (0, inputs.num_nodes), np.int32)
    task = self._tasks[index]
    new = self._first_pricing(index, real)
    fixed = repair.repair_batch(task.graph, task.topology, placements) if (
        self._repair and batch) else None
    if fixed is not None:
      placements = np.stack([f.placement for f in fixed])
      real = np.stack([features.node_to_group_placement(inputs, p)
                       for p in placements]).astype(np.int64)
    simulated = np.full(batch, np.nan)
    measured = np.zeros(batch, bool)
    step = np.full(batch, np.nan)
    valid = np.zeros(batch, bool)
    reward = np.zeros(batch, np.float32)
    objective = None  # what the best is chosen by, when not the step time
    if self._backend in ("simulate", "mix"):
      if fixed is None:
        result = simulator.simulate_batch(task.graph, placements,
                                          task.topology)
        simulated, valid = result.step_time_us.astype(np.float64), result.valid
      else:  # the repair simulated every row
        simulated = np.array([f.step_time_us for f in fixed], np.float64)
        valid = np.array([f.valid for f in fixed])
        self.evaluations += sum(f.evaluations - 1
                                for f, n in zip(fixed, new) if n)
      valid = valid & in_range
      step = simulated.copy()
      reward = rewards.placement_reward(step, valid, self.reference_us(index))
      if self._robust is not None:
        reward, objective = self._robust.rewards(
            index, placements, simulated, valid, self.reference(index))
      self.evaluations += int(new.sum())
    if self._backend == "measure":
      for b in range(batch):
        m = self._measure(index, placements[b]) if in_range[b] else None
        if m is not None:
          measured[b] = True
          valid[b] = m.valid
          step[b] = m.step_time_us
      reward = rewards.placement_reward(step, valid,
                                        self.reference_us(index, "measure"))
      self.evaluations += int(new.sum())
    elif self._backend == "mix":
      for b in self._mix_candidates(index, simulated, valid, placements):
        m = self._measure(index, placements[b])
        measured[b] = True
        valid[b] = m.valid
        step[b] = m.step_time_us
        reward[b] = rewards.placement_reward(
            step[b:b + 1], valid[b:b + 1],
            self.reference_us(index, "measure"))[0]
    self._update_best(index, real, placements, step, valid, measured, simulated,
                      objective)
    return rewards.Evaluation(
        reward=reward, step_time_us=step, simulated_us=simulated,
        measured=measured, valid=valid, placements=placements,
        group_devices=real.astype(np.int32))

  def _first_pricing(self, index: int, real: np.ndarray) -> np.ndarray:
    """bool[B]: rows that are placements this task has not priced before.

    Of equal rows in one batch only the first is new.
    """
    priced = self._priced[index]
    new = np.zeros(len(real), bool)
    for b, row in enumerate(real):
      key = common.placement_key(row)
      if key not in priced:
        priced.add(key)
        new[b] = True
    return new

  def _mix_candidates(self, index, simulated, valid, placements) -> list:
    """Rows to measure: fastest valid ones near the best simulated time."""
    order = [int(b) for b in np.argsort(simulated) if valid[b]]
    best_sim = min(self._best_simulated[index],
                   float(simulated[order[0]]) if order else math.inf)
    chosen, seen = [], set()
    for b in order:
      if len(chosen) >= self._measure_top_k:
        break
      if simulated[b] > self._mix_slack * best_sim:
        break
      key = common.placement_key(placements[b])
      if key in seen:
        continue
      seen.add(key)
      chosen.append(b)
    return chosen

  def _update_best(self, index, real, placements, step, valid, measured,
                   simulated, objective=None) -> None:
    judged_by_measure = self._backend != "simulate"
    if self._backend == "simulate":
      candidates = valid
    else:
      candidates = valid & measured
      ok = valid & np.isfinite(simulated)
      if ok.any():
        self._best_simulated[index] = min(self._best_simulated[index],
                                          float(simulated[ok].min()))
    if not candidates.any():
      return
    current = self._best[index]
    key = step if objective is None else objective
    current_key = None
    if current is not None:
      current_key = (current.step_time_us if objective is None
                     else self._robust.median_of(index, current))
    rows = np.flatnonzero(candidates)
    for b in rows[np.argsort(key[rows], kind="stable")]:
      if current is not None and not key[b] < current_key:
        break
      value = float(step[b])
      if judged_by_measure and self._measure_confirm:
        confirmed = self._confirm(index, placements[b])
        value = confirmed.step_time_us
        if not confirmed.valid or (current is not None and
                                   not value < current.step_time_us):
          continue
      self._best[index] = rewards.Best(
          group_devices=real[b].astype(np.int32),
          placement=placements[b].astype(np.int32),
          step_time_us=value,
          source="measure" if judged_by_measure else "simulate",
          evaluation=self.evaluations)
      if objective is not None:
        self._robust.remember(index, self._best[index], key[b])
      return

  def _confirm(self, index: int, placement: np.ndarray):
    return self._runs.confirm(index, placement)

  def _measure(self, index: int, placement: np.ndarray):
    return self._runs.measure(index, placement)

  @property
  def measurements(self) -> int:
    """Distinct placements measured."""
    return self._runs.measurements

  @property
  def confirmations(self) -> int:
    """Repeated measurements of would-be bests."""
    return self._runs.confirmations

  @property
  def measure_seconds(self) -> float:
    return self._runs.seconds

  def close(self) -> None:
    self._runs.close()

  # ---- tf-agents PyEnvironment ----------------------------------------------

  def _reset(self):
    self._current = int(self._rng.integers(len(self._tasks)))
    return ts.restart(self.observation(self._current))

  def _step(self, action):
    evaluation = self.evaluate(self._current, np.asarray(action)[None, :])
    return ts.termination(self.observation(self._current),
                          np.float32(evaluation.reward[0]))

  def get_state(self):
    return {"current": self._current,
            "rng": self._rng.bit_generator.state}

  def set_state(self, state) -> None:
    self._current = int(state["current"])
    self._rng.bit_generator.state = state["rng"]

