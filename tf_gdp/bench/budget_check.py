"""GDP fine-tuning, local search and HDP at the same evaluation budgets.

A search buys its placement with simulator evaluations, so searches are
compared at equal numbers of them. For each graph and each budget N:

* `gdp`: the pre-trained policy zero-shot (greedy + `--samples`), then
  fine-tuned with what is left of N (`gdp_search`: whole iterations only, so
  it never passes N); the placement is the better of the two, the policy's
  own.
* `local_search`: hill climbing from the best cheap baseline with
  `evaluations=N` (its starts included; its last round is cut to fit).
* `hdp`: the HDP-style grouper + placer with `budget=N` (its last batch is
  cut to fit); also at its own default budget (`hdp.DEFAULT_BUDGET`; the
  same search, run once, when that is one of the budgets).
* `auto`: what the product's default returns with budget N, the fastest
  valid row of gdp, local_search and the one-shot baselines (the searches
  it runs, each with N); its evaluations are their sum. The summary counts
  the graphs where it is at or below every other row, HDP's included.

Evaluations are counted the same way for all three: every placement a
method simulates to choose its result counts one, starts, zero-shot samples
and greedy placements included; for GDP also the placements that chose its
reward's reference (single device and, where the graph has rules, the
expert's). Judging the returned placement, done alike for every row, is not
counted. Each row reports what was actually used and whether it stayed
within N, its wall-clock seconds, its step time over the best one-shot
baseline's (every classic method but local_search, a list scheduler's
planned order included) and its best-so-far curve. The key figure per graph
and budget is gdp / local_search. Deterministic for a given seed (wall-clock
times aside).

Example (a zoo graph and an off-zoo one):
  python -m tf_gdp.bench.budget_check --graphs=rnnlm2,keras_resnet50 \
      --devices=p100x4 --budgets=500,2000,10000 --json_out=budgets.json
"""

import math
import time
from typing import List, Optional, Sequence

from absl import app
from absl import flags

from tf_gdp import errors
from tf_gdp import gdp_method
from tf_gdp.bench import bench_graphs
from tf_gdp.bench import harness
from tf_gdp.cost import topology as topology_lib

ONE_SHOT_METHODS = tuple(m for m in harness.CLASSIC_METHODS
                         if m != "local_search")
SEARCHES = ("gdp", "local_search", "hdp")
DEFAULT_BUDGETS = (500, 2000, 10000)
# Where HDP runs: at every budget and its own default, only at its own
# default (it costs minutes per thousand evaluations), or nowhere.
HDP_MODES = ("all", "default", "none")


def parse_budgets(values: Sequence[str]) -> List[int]:
  """Sorted distinct positive budgets; InputError on anything else."""
  try:
    budgets = sorted({int(v) for v in values})
  except ValueError as e:
    raise errors.InputError(f"budgets must be integers: {e}") from e
  if not budgets or budgets[0] < 1:
    raise errors.InputError(f"budgets must be >= 1, got {list(values)}")
  return budgets


def check_graph(loaded, label: str, devices: str, *, budgets: Sequence[int],
                policy: str, samples: int, seed: int,
                methods: Sequence[str] = ONE_SHOT_METHODS,
                hdp_default_budget: Optional[int] = None,
                hdp_mode: str = "all",
                log=harness.stderr_progress) -> dict:
  """The three searches at every budget on one graph (module doc).

  `methods` are the one-shot baselines the ratios are to;
  `hdp_default_budget` is HDP's own budget (None: `hdp.DEFAULT_BUDGET`);
  `hdp_mode` (`HDP_MODES`) where HDP runs.
  """
  if hdp_mode not in HDP_MODES:
    raise errors.InputError(f"hdp mode must be one of {HDP_MODES}, "
                            f"got {hdp_mode!r}")
  # pylint: disable=g-import-not-at-top
  from tf_gdp.baselines import hdp
  from tf_gdp.rl import placement_task
  from tf_gdp.rl import zero_shot
  # pylint: enable=g-import-not-at-top
  graph, topology = loaded.graph, topology_lib.get(devices)
  one_shot = harness.bench_graph(loaded, label, devices, methods, seed=seed,
                                 progress=log)
  best_method, best_us = harness.best_row(one_shot)
  reference = reference_evaluations(one_shot)
  task = placement_task.PlacementTask(graph, topology,
                                      extracted=loaded.extracted, name=label)
  shot = zero_shot.zeroshot(policy, task, samples=samples, seed=seed)
  hdp_rows = {}

  def hdp_row(budget):
    if budget not in hdp_rows:
      started = time.perf_counter()
      found = hdp.search(graph, topology, seed=seed, budget=budget)
      hdp_rows[budget] = search_row(
          "hdp", budget, loaded, topology, found.placement, found.evaluations,
          time.perf_counter() - started, found.history, best_us)
      log_row(log, label, hdp_rows[budget])
    return hdp_rows[budget]

  default_budget = hdp_default_budget or hdp.DEFAULT_BUDGET
  per_budget = []
  for budget in budgets:
    rows = [gdp_row(loaded, task, shot, budget, policy=policy,
                    samples=samples, seed=seed,
                    reference_evaluations=reference, best_us=best_us,
                    log=log),
            local_search_row(loaded, topology, budget, seed, best_us)]
    for row in rows:
      log_row(log, label, row)
    gdp, local = rows
    if hdp_mode == "all" or (hdp_mode == "default"
                             and budget == default_budget):
      rows.append(hdp_row(budget))
    rows.append(_auto_row(budget, rows[:2], one_shot, best_us))
    per_budget.append({
        "budget": budget, "rows": rows,
        "gdp_over_local_search": step_ratio(gdp, local),
        "hdp_over_local_search": (step_ratio(rows[2], local)
                                  if rows[2]["method"] == "hdp" else None),
        "auto_at_most_every_method": _auto_wins(rows, best_us)})
  return {
      "graph": label, "nodes": graph.num_nodes, "devices": devices,
      "best_baseline": {"method": best_method, "step_time_us": best_us},
      "reference_evaluations": reference,
      "baselines": harness.rows_as_dicts(one_shot),
      "budgets": per_budget,
      "hdp_default": (None if hdp_mode == "none"
                      else hdp_row(default_budget))}


def reference_evaluations(one_shot) -> int:
  """Evaluations that chose GDP's reward reference, from one-shot rows.

  Each reference method's own search plus the simulation that judged it
  (`rl.rewards.REFERENCE_METHODS`).
  """
  from tf_gdp.rl import rewards  # pylint: disable=g-import-not-at-top
  return sum(
      r.evaluations + 1 for r in one_shot
      if r.method in rewards.REFERENCE_METHODS and r.evaluations is not None)


def gdp_row(loaded, task, shot, budget: int, *, policy: str, samples: int,
            seed: int, reference_evaluations: int, best_us: float,
            log=lambda line: None, method: str = "gdp",
            polish_share: Optional[float] = None,
            ppo_patience: Optional[int] = None,
            anchor_epochs: Optional[int] = None) -> dict:
  """Zero-shot (`shot`, reused at every budget) + fine-tuning within N.

  A budget that leaves no whole fine-tuning iteration gives the zero-shot
  placement alone (no reference is charged then). `polish_share`,
  `ppo_patience` and `anchor_epochs`: as `gdp_search.run` (None: the
  defaults).
  """
  from tf_gdp.bench import gdp_search  # pylint: disable=g-import-not-at-top
  left = budget - shot.evaluations - reference_evaluations
  started = time.perf_counter()
  found = gdp_search.run(
      policy, task, samples=samples, seed=seed,
      finetune_evaluations=max(left, 0),
      reference_evaluations=reference_evaluations, shot=shot,
      polish_share=polish_share, ppo_patience=ppo_patience,
      anchor_epochs=anchor_epochs, log=log)
  seconds = shot.seconds + time.perf_counter() - started
  return search_row(
      method, budget, loaded, task.topology, found.placement,
      found.evaluations, seconds, found.curve, best_us, chosen=found.chosen,
      zeroshot_evaluations=found.zeroshot_evaluations,
      reference_evaluations=found.reference_evaluations,
      finetune_evaluations=found.finetune_evaluations,
      finetune_iterations=found.finetune_iterations)


def local_search_row(loaded, topology, budget: int, seed: int,
                     best_us: float) -> dict:
  """`local_search` with `evaluations=budget` (its starts included)."""
  from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
  started = time.perf_counter()
  result = baselines.run("local_search", loaded.graph, topology, seed=seed,
                         evaluations=budget)
  return search_row(
      "local_search", budget, loaded, topology, result.placement,
      result.evaluations, time.perf_counter() - started,
      result.info["best_so_far"], best_us, start=result.info["start"],
      start_evaluations=result.info["start_evaluations"],
      rounds=result.info["rounds"])


def search_row(method: str, budget: int, loaded, topology, placement,
               evaluations: int, seconds: float, curve, best_us: float,
               **details) -> dict:
  """One search's row: its placement judged, its evaluations and curve."""
  step, valid = harness.judge(loaded.graph, placement, topology)
  return dict({
      "method": method, "budget": budget, "step_time_us": float(step),
      "valid": valid, "evaluations": int(evaluations),
      "within_budget": int(evaluations) <= budget,
      "search_seconds": float(seconds),
      "over_best_baseline": (step / best_us if valid and best_us > 0
                             else None),
      "curve": harness.finite_curve(curve)}, **details)


def _auto_row(budget: int, searches: list, one_shot: list,
              best_us: float) -> dict:
  """What `auto` returns at this budget, from the rows of what it runs.

  `auto` with an evaluation budget N runs the one-shot baselines, GDP
  (zero-shot, then fine-tuning) and `local_search`, each search with N, and
  keeps the fastest valid result: the rows here are those runs (same seed),
  so its row is their best, and its evaluations their sum.
  """
  candidates = [(r["step_time_us"], r["method"]) for r in searches
                if r["valid"]]
  candidates += [(r.step_time_us, r.method) for r in one_shot if r.valid]
  step, winner = min(candidates) if candidates else (math.inf, None)
  evaluations = sum(r["evaluations"] for r in searches) + sum(
      r.evaluations or 0 for r in one_shot)
  return {"method": "auto", "budget": budget, "step_time_us": step,
          "valid": winner is not None, "winner": winner, "derived": True,
          "over_best_baseline": step / best_us if winner and best_us > 0
                                else None,
          "evaluations": evaluations, "within_budget": True,
          "curve": [[evaluations, step]] if winner else [],
          "search_seconds": sum(r["search_seconds"] for r in searches) + sum(
              r.search_seconds for r in one_shot if r.valid)}


def _auto_wins(rows: list, best_us: float) -> bool:
  """Whether auto is at or below every other row and the best baseline."""
  auto = rows[-1]["step_time_us"]
  others = [r["step_time_us"] for r in rows[:-1] if r["valid"]] + [best_us]
  return all(auto <= other * (1 + 1e-9) for other in others)


def step_ratio(row: dict, other: dict) -> Optional[float]:
  """`row`'s step time over `other`'s; None unless both are valid."""
  if not (row["valid"] and other["valid"]):
    return None
  return row["step_time_us"] / other["step_time_us"]


def log_row(log, label: str, row: dict) -> None:
  """One progress line for a search's row."""
  log(f"  {label} / {row['method']} at {row['budget']}: "
      f"{row['step_time_us'] / 1e3:,.3f} ms{'' if row['valid'] else ' INVALID'}"
      f" ({row['evaluations']} evaluations, {row['search_seconds']:.1f} s)")


def summary(results) -> list:
  """Per budget, over graphs: how often and by how much GDP beats (or
  trails) the local search, and whether every method kept to the budget."""
  by_budget = {}
  for result in results:
    for entry in result["budgets"]:
      by_budget.setdefault(entry["budget"], []).append(entry)
  out = []
  for budget, entries in sorted(by_budget.items()):
    gdp = [e["gdp_over_local_search"] for e in entries
           if e["gdp_over_local_search"] is not None]
    hdp = [e["hdp_over_local_search"] for e in entries
           if e["hdp_over_local_search"] is not None]
    out.append({
        "budget": budget, "graphs": len(entries),
        "gdp_at_most_local_search": sum(r <= 1.0 + 1e-9 for r in gdp),
        "geomean_gdp_over_local_search": geomean(gdp),
        "geomean_hdp_over_local_search": geomean(hdp),
        "all_within_budget": all(r["within_budget"] for e in entries
                                 for r in e["rows"]),
        "auto_at_most_every_method": sum(
            bool(e.get("auto_at_most_every_method")) for e in entries)})
  return out


def geomean(values) -> Optional[float]:
  """The geometric mean of positive values; None for none."""
  if not values:
    return None
  return math.exp(sum(math.log(v) for v in values) / len(values))


def format_table(results) -> str:
  """One line per graph, budget and search; gdp / local_search on gdp's."""
  header = (f"{'graph':<20} {'budget':>7} {'method':<13} {'step ms':>10} "
            f"{'valid':>5} {'evals':>7} {'search s':>9} {'/best base':>10} "
            f"{'gdp/ls':>7}")
  lines = [header, "-" * len(header)]

  def line(graph, row, ratio=None):
    over = row["over_best_baseline"]
    evaluations = f"{row['evaluations']}{'' if row['within_budget'] else '!'}"
    return (f"{graph[:20]:<20} {row['budget']:>7} {row['method']:<13} "
            f"{row['step_time_us'] / 1e3:>10,.3f} "
            f"{'yes' if row['valid'] else 'NO':>5} {evaluations:>7} "
            f"{row['search_seconds']:>9.1f} "
            f"{'-' if over is None else f'{over:.3f}':>10} "
            f"{'' if ratio is None else f'{ratio:.3f}':>7}").rstrip()

  for result in results:
    for entry in result["budgets"]:
      for row in entry["rows"]:
        lines.append(line(result["graph"], row,
                          entry["gdp_over_local_search"]
                          if row["method"] == "gdp" else None))
    if result["hdp_default"] is not None:
      lines.append(line(result["graph"], dict(result["hdp_default"],
                                              method="hdp(default)")))
    best = result["best_baseline"]
    lines.append(f"{'':<20} best one-shot baseline: {best['method']} "
                 f"{best['step_time_us'] / 1e3:,.3f} ms")
  for s in summary(results):
    gdp = s["geomean_gdp_over_local_search"]
    lines.append(
        f"budget {s['budget']}: gdp <= local_search on "
        f"{s['gdp_at_most_local_search']} of {s['graphs']} graphs"
        + ("" if gdp is None else f", geometric-mean gdp/local_search "
           f"{gdp:.3f}") + f"; auto <= every method on "
        f"{s['auto_at_most_every_method']} of {s['graphs']}" + (
            "" if s["all_within_budget"] else
                            "; some method passed the budget (!)"))
  return "\n".join(lines)


def write_results(results, settings: dict, started: float,
                  json_out: Optional[str]) -> None:
  """The run's JSON (`harness.finish_run`: written atomically)."""
  harness.finish_run("budget_check", {
      "settings": settings, "graphs": results, "summary": summary(results)},
                     started, json_out)


def main(argv):
  del argv
  from tf_gdp.rl import cli_lib  # pylint: disable=g-import-not-at-top
  cli_lib.quiet_tensorflow_logs()
  try:
    budgets = parse_budgets(_BUDGETS.value)
    sources = bench_graphs.parse(_GRAPHS.value)
  except errors.InputError as e:
    raise app.UsageError(str(e)) from e
  started = time.time()
  results = []
  for source in sources:
    harness.stderr_progress(f"{source.label} (elapsed "
                            f"{time.time() - started:.0f} s)")
    results.append(check_graph(
        source.load(_DEVICES.value), source.label, _DEVICES.value,
        budgets=budgets, policy=_POLICY.value or gdp_method.PRETRAINED_POLICY,
        samples=_SAMPLES.value, seed=_SEED.value, hdp_mode=_HDP.value))
  print(format_table(results))
  write_results(results, {
      "graphs": _GRAPHS.value, "devices": _DEVICES.value, "budgets": budgets,
      "hdp": _HDP.value,
      "samples": _SAMPLES.value, "seed": _SEED.value,
      "policy": _POLICY.value or "shipped"}, started, _JSON_OUT.value)


if __name__ == "__main__":
  # Flags only here, so other modules may import this one's functions.
  _GRAPHS = flags.DEFINE_string("graphs", "zoo",
                                bench_graphs.GRAPHS_HELP)
  _DEVICES = flags.DEFINE_string("devices", "p100x4", "Topology.")
  _BUDGETS = flags.DEFINE_list(
      "budgets", [str(b) for b in DEFAULT_BUDGETS],
      "Simulator evaluations per search and graph.")
  _POLICY = flags.DEFINE_string("policy", None, "Pre-trained policy "
                                "(default: the shipped one).")
  _SAMPLES = flags.DEFINE_integer(
      "samples", 16, "GDP samples per zero-shot pass and per fine-tuning "
      "iteration.", lower_bound=2)
  _SEED = flags.DEFINE_integer("seed", 0, "Seed of every search.")
  _HDP = flags.DEFINE_enum(
      "hdp", "all", HDP_MODES, "Where HDP runs: at every budget and its own "
      "default, only at its own default, or nowhere.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Write results here.")
  app.run(main)
