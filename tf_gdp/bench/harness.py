"""The benchmark harness: every method on every graph, side by side.

For each topology, each graph is costed for that topology's hardware, every
method places it, and every placement is judged by the same simulator (and,
optionally, measured for real on a `cpu-workers:K` cluster). Rows carry the
ratios the paper's claims are about: speedup over one device, ratio to the
human expert, to the best baseline and to the lower bound. A list scheduler
(m_etf, m_sct, heft) is also simulated with its own planned per-device order
(`step_time_planned_us`, the table's "planned ms"); the best baseline is the
best of either order, so that no baseline is handicapped by the judge.
Each row also counts the simulator evaluations the method made to choose its
placement (`evaluations`; judging the placement it returns is not counted,
for any method).
"""

import contextlib
import dataclasses
import json
import math
import sys
import time
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from grappler_bridge import errors as grappler_errors

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp import graph_specs
from tf_gdp import placing
from tf_gdp.baselines import valid_result
from tf_gdp.cost import feasibility
from tf_gdp.cost import lower_bound as lower_bound_lib
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib

# Methods `--methods=all` runs (local_search at its default evaluation
# budget); learned ones are named explicitly (budget).
CLASSIC_METHODS = ("single_device", "human_expert", "random", "round_robin",
                   "m_topo", "m_etf", "m_sct", "heft", "metis",
                   "stage_pipeline", "contiguous_dp", "side_offload",
                   "local_search")
REFERENCE_METHOD = "single_device"
EXPERT_METHOD = "human_expert"


@dataclasses.dataclass
class Row:
  """One method on one graph and topology."""
  graph: str
  devices: str
  method: str
  nodes: int
  step_time_us: float = math.nan
  valid: bool = False
  reason: Optional[str] = None
  peak_memory_gib: List[float] = dataclasses.field(default_factory=list)
  search_seconds: float = math.nan
  speedup_vs_single: float = math.nan
  ratio_to_expert: float = math.nan
  ratio_to_best_baseline: float = math.nan
  ratio_to_lower_bound: float = math.nan
  lower_bound_us: float = math.nan
  measured_us: Optional[float] = None
  measured_reason: Optional[str] = None
  step_time_planned_us: float = math.nan  # with the method's planned order
  planned_valid: Optional[bool] = None
  # The method's own placement, when it was invalid and the row shows the
  # repaired one (`baselines.valid_result`): its validity, time and reason.
  own_valid: bool = True
  own_step_time_us: Optional[float] = None
  own_reason: Optional[str] = None
  repaired_by: Optional[str] = None  # the fallback baseline the gate used
  evaluations: Optional[int] = None  # the method's own simulator calls


def parse_methods(spec: str) -> List[str]:
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  names = []
  for item in [s.strip() for s in spec.split(",") if s.strip()]:
    names += list(CLASSIC_METHODS) if item == "all" else [item]
  unknown = [n for n in names if n not in baselines.METHODS]
  if unknown:
    raise errors.InputError(
        f"unknown method(s) {unknown} (known: {', '.join(sorted(baselines.METHODS))})")
  return list(dict.fromkeys(names))


def bench_graph(loaded: graph_specs.LoadedGraph, label: str, devices: str,
                methods: Sequence[str], *, seed: int = 0,
                method_options: Optional[dict] = None,
                measurer: Optional[Callable] = None,
                progress: Callable[[str], None] = lambda line: None,
                placements: Optional[dict] = None) -> List[Row]:
  """Runs every method on one graph for one topology; returns its rows.

  `placements`, when given, receives method -> (the placement its row
  judges, its planned priority or None).
  """
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  graph = loaded.graph
  topo = topology_lib.get(devices)
  bound = lower_bound_lib.lower_bound(graph, topo)
  infeasible = feasibility.problem(graph, topo)  # no method can fit it
  rows = []
  for method in methods:
    row = Row(graph=label, devices=devices, method=method, nodes=graph.num_nodes,
              lower_bound_us=bound)
    if infeasible:
      row.reason = f"no placement: {infeasible}"
      rows.append(row)
      progress(f"  {label} / {method}: {row.reason}")
      continue
    started = time.perf_counter()
    found_none = None
    try:
      result = baselines.run(method, graph, topo, seed=seed,
                             **(method_options or {}).get(method, {}))
    except errors.InputError as e:
      found_none = grappler_errors.first_line(e)
      if not found_none.startswith(placing.MEMORY_ESTIMATE_ERRORS):
        row.reason = f"no placement: {e}"
        rows.append(row)
        progress(f"  {label} / {method}: {row.reason}")
        continue
    if found_none is None:
      row.search_seconds = result.search_seconds
      row.evaluations = result.evaluations
      sim = simulator.simulate(graph, result.placement, topo)
      placement, priority = result.placement, result.priority
    else:  # its memory estimate fits nowhere: the gate's fallbacks
      sim, placement, priority = None, None, None
      row.search_seconds, row.evaluations = 0.0, 0
    if sim is None or not sim.valid:  # never a result: the gate's is the row's
      row.own_valid = False
      row.own_reason = found_none or sim.reason
      row.own_step_time_us = None if sim is None else sim.step_time_us
      try:
        made = valid_result.valid_placement(graph, topo, placement,
                                            method=method, seed=seed,
                                            method_error=found_none)
        placement, row.evaluations = made.placement, (
            row.evaluations + made.evaluations)
        row.repaired_by = (made.repair or {}).get("fallback")
        sim, priority = simulator.simulate(graph, placement, topo), None
      except errors.NoValidPlacementError as e:
        row.reason = f"no valid placement: {e}"
        rows.append(row)
        progress(f"  {label} / {method}: {row.reason}")
        continue
    row.step_time_us = sim.step_time_us
    row.valid = bool(sim.valid)
    row.reason = sim.reason
    row.peak_memory_gib = [round(b / 2**30, 3) for b in sim.peak_memory_bytes]
    if placements is not None:
      placements[method] = (placement, priority)
    if priority is not None:
      planned = simulator.simulate(graph, placement, topo, priority=priority)
      row.step_time_planned_us = planned.step_time_us
      row.planned_valid = bool(planned.valid)
    if measurer is not None and loaded.extracted is not None:
      measured = measurer(loaded.extracted, placement, topo)
      row.measured_us = measured.step_time_us if measured.valid else None
      row.measured_reason = measured.reason
    rows.append(row)
    progress(f"  {label} / {method}: {sim.step_time_us / 1e3:,.1f} ms"
             f"{'' if row.own_valid else ' (repaired)'} "
             f"(search {row.search_seconds:.1f} s, total "
             f"{time.perf_counter() - started:.1f} s)")
  add_ratios(rows)
  return rows


def add_ratios(rows: List[Row]) -> None:
  """Fills the ratio columns of one graph's rows (valid rows only)."""
  def step_of(method):
    return next((r.step_time_us for r in rows if r.method == method and r.valid),
                math.nan)
  single = step_of(REFERENCE_METHOD)
  expert = step_of(EXPERT_METHOD)
  best = best_row(rows)[1]
  for row in rows:
    if not row.valid:
      continue
    row.speedup_vs_single = single / row.step_time_us
    row.ratio_to_expert = row.step_time_us / expert
    row.ratio_to_best_baseline = row.step_time_us / best
    row.ratio_to_lower_bound = row.step_time_us / row.lower_bound_us


def best_row(rows: List[Row]) -> Tuple[Optional[str], float]:
  """(method, step time) of the fastest valid row, a planned order counting
  as "<method>:planned"; (None, NaN) if no row is valid."""
  steps = ([(r.step_time_us, r.method) for r in rows if r.valid] +
           [(r.step_time_planned_us, f"{r.method}:planned") for r in rows
            if r.planned_valid])
  if not steps:
    return None, math.nan
  step, method = min(steps)
  return method, step


def judge(graph, placement, topology: topology_lib.Topology
          ) -> Tuple[float, bool]:
  """(simulated step time, valid) of a placement, as every row is judged."""
  sim = simulator.simulate(graph, placement, topology)
  return sim.step_time_us, bool(sim.valid)


def finite_curve(points) -> list:
  """[[evaluations, step time us]] of the finite points of a best-so-far
  history (a search has no best until its first valid placement)."""
  return [[int(e), float(t)] for e, t in points
          if t is not None and math.isfinite(t)]


def format_table(rows: List[Row], devices: str) -> str:
  """One table for one topology."""
  measured = any(r.measured_us is not None or r.measured_reason for r in rows)
  planned = any(r.planned_valid is not None for r in rows)
  header = (f"{'graph':<22}{'method':<15}{'step ms':>11}"
            + (f"{'planned ms':>12}" if planned else "") +
            f"{'x single':>9}"
            f"{'/expert':>8}{'/best':>7}{'/LB':>7}  {'peak GiB per device':<24}"
            f"{'evals':>7}{'search s':>10}" + (f"{'measured ms':>13}" if measured else "") +
            "  note")
  lines = [f"devices: {devices}", header, "-" * len(header)]
  for r in rows:
    def ratio(x):
      return "   -" if math.isnan(x) else f"{x:.2f}"
    note = "" if r.valid else (r.reason or "invalid")
    if not r.own_valid and r.valid:
      note = (f"repaired{f' (by {r.repaired_by})' if r.repaired_by else ''}"
              f": {r.own_reason}")
    line = (f"{r.graph[:21]:<22}{r.method:<15}{_ms(r.step_time_us):>11}"
            + (f"{_planned_ms(r):>12}" if planned else "") +
            f"{ratio(r.speedup_vs_single):>9}"
            f"{ratio(r.ratio_to_expert):>8}{ratio(r.ratio_to_best_baseline):>7}"
            f"{ratio(r.ratio_to_lower_bound):>7}"
            f"  {'/'.join(f'{g:.1f}' for g in r.peak_memory_gib) or '-':<24}"
            f"{'-' if r.evaluations is None else r.evaluations:>7}"
            f"{r.search_seconds:>10.1f}")
    if measured:
      line += f"{_ms(r.measured_us) if r.measured_us else 'failed':>13}"
      if r.measured_reason:
        note = (note + "; " if note else "") + f"measure: {r.measured_reason}"
    lines.append(line + ("  " + note[:80] if note else ""))
  return "\n".join(lines)


def _ms(us) -> str:
  return "-" if us is None or math.isnan(us) else f"{us / 1e3:,.1f}"


def _planned_ms(row: Row) -> str:
  """The planned-order step time; "!" marks a planned order that overflows."""
  if row.planned_valid is None:
    return "-"
  return _ms(row.step_time_planned_us) + ("" if row.planned_valid else "!")


@contextlib.contextmanager
def measurer_for(target: Optional[str], *, repeats: int = 5,
                 allow_side_effects: bool = False):
  """A `measure(extracted, placement, topology)` callable, or None.

  A `cpu-workers:K` cluster is started once for the whole benchmark and shut
  down when the benchmark ends, whatever happens. A graph with ops that reach
  outside the step is refused (InputError) at its first measurement unless
  `allow_side_effects`.
  """
  if not target:
    yield None
    return
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  name, _, count = target.partition(":")
  if name == topology_lib.CPU_WORKERS:
    if not count.isdigit() or int(count) < 1:
      raise errors.InputError(f"--measure={target}: use cpu-workers:K")
    with workers.CpuWorkerCluster(int(count)) as cluster:
      yield lambda extracted, placement, topo: measure.measure(
          extracted, placement, cluster, topology=topo, repeats=repeats,
          allow_side_effects=allow_side_effects)
    return
  yield lambda extracted, placement, topo: measure.measure(
      extracted, placement, target, topology=topo, repeats=repeats,
      allow_side_effects=allow_side_effects)


def stderr_progress(line: str) -> None:
  sys.stderr.write(line + "\n")
  sys.stderr.flush()


def rows_as_dicts(rows: List[Row]) -> list:
  """Rows as JSON-able dicts (NaN, which JSON lacks, becomes null)."""
  def clean(value):
    return None if isinstance(value, float) and math.isnan(value) else value
  return [{k: clean(v) for k, v in dataclasses.asdict(r).items()} for r in rows]


def geomean_speedups(rows: List[Row]) -> dict:
  """Per method: geometric-mean speedup over single device, over graphs.

  A list scheduler's planned order counts as its own entry, "<method>:planned".
  """
  by_method = {}
  for r in rows:
    if r.valid and not math.isnan(r.speedup_vs_single):
      by_method.setdefault(r.method, []).append(r.speedup_vs_single)
    if r.planned_valid and not math.isnan(r.speedup_vs_single):
      by_method.setdefault(f"{r.method}:planned", []).append(
          r.speedup_vs_single * r.step_time_us / r.step_time_planned_us)
  return {m: float(np.exp(np.mean(np.log(v)))) for m, v in by_method.items()}


def finish_run(benchmark: str, results, started: float,
               json_out: Optional[str]) -> None:
  """Prints the total time; writes the run's JSON (command, date, results)."""
  print(f"total time {time.time() - started:.0f} s")
  if json_out:
    fileio.write_atomically(json_out, json.dumps({
        "benchmark": benchmark,
        "command": " ".join([f"python -m tf_gdp.bench.{benchmark}"] +
                            sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M"), "results": results,
        "seconds": time.time() - started}, indent=1))
