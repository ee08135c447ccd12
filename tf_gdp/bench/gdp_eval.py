"""GDP on graphs it never saw, against every baseline.

For each graph: the classic baselines, the HDP-style baseline with an
evaluation budget (its best-so-far curve kept), GDP zero-shot (one forward
pass of the pre-trained policy, greedy + samples judged by the simulator),
GDP fine-tuned for a fixed time or number of evaluations (its best-so-far
curve kept; the reported placement is the better of zero-shot and
fine-tuning, both the policy's own; `gdp_search`), and optionally zero-shot
ablation policies (no attention, no superposition).
The classic baselines include `stage_pipeline`, the stage rules' own
placements that pipeline exploration leans towards: the summary counts the
graphs where GDP is at or below it, among those where a rule applies.
Every row has the method's simulator evaluations and wall-clock seconds.
Search cost: the reward evaluations GDP needed to reach HDP's final step time
against the evaluations HDP used to get there. The same evaluation budget for
GDP, HDP and a local search: `budget_check`.

Example (the held-out graphs of the shipped policy):
  python -m tf_gdp.bench.gdp_eval --graphs=gnmt8,transformer_xl4,wavenet4 \
      --devices=p100x4 --finetune_seconds=300 --hdp_budget=1000 \
      --json_out=gdp_eval.json
"""

import math
import time
from typing import Dict, Optional

from absl import app
from absl import flags

from tf_gdp import gdp_method
from tf_gdp.baselines import stage_pipeline
from tf_gdp.bench import bench_graphs
from tf_gdp.bench import harness
from tf_gdp.cost import topology as topology_lib


def evaluate_graph(loaded, label: str, devices: str, *, policy: str,
                   finetune_seconds: Optional[float], hdp_budget: int,
                   samples: int, seed: int,
                   ablations: Optional[Dict[str, str]] = None,
                   finetune_evaluations: Optional[int] = None,
                   log=harness.stderr_progress) -> dict:
  """All methods on one graph; rows plus the two search curves.

  GDP fine-tunes for `finetune_seconds` or for `finetune_evaluations`
  (`gdp_search.finetune_budget`; InputError if both are given).
  """
  from tf_gdp.baselines import hdp  # pylint: disable=g-import-not-at-top
  from tf_gdp.bench import gdp_search  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import placement_task  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import zero_shot  # pylint: disable=g-import-not-at-top
  graph = loaded.graph
  topology = topology_lib.get(devices)
  gdp_search.finetune_budget(gdp_search.train_settings(samples, seed),
                             seconds=finetune_seconds,
                             evaluations=finetune_evaluations)  # fail fast
  rows = []
  for r in harness.bench_graph(loaded, label, devices,
                               harness.CLASSIC_METHODS, seed=seed,
                               progress=log):
    rows.append(_row(r.method, r.step_time_us, r.valid, r.search_seconds,
                     r.evaluations))
    if r.planned_valid is not None:  # a list scheduler, judged as planned too
      rows.append(_row(f"{r.method}:planned", r.step_time_planned_us,
                       r.planned_valid, r.search_seconds, r.evaluations))
  found = hdp.search(graph, topology, seed=seed, budget=hdp_budget)
  rows.append(_row("hdp", *harness.judge(graph, found.placement, topology),
                   found.seconds, found.evaluations))
  hdp_curve = harness.finite_curve(found.history)
  log(f"  {label} / hdp: {rows[-1]['step_time_us'] / 1e3:,.1f} ms "
      f"({found.evaluations} evaluations, {found.seconds:.0f} s)")

  task = placement_task.PlacementTask(graph, topology,
                                      extracted=loaded.extracted, name=label)
  shot = zero_shot.zeroshot(policy, task, samples=samples, seed=seed)
  shot_evaluations = 1 + samples
  rows.append(_row("gdp_zeroshot", *harness.judge(graph, shot.placement,
                                                  topology),
                   shot.seconds, shot_evaluations))
  log(f"  {label} / gdp zero-shot: {shot.step_time_us / 1e3:,.1f} ms "
      f"({shot.seconds:.1f} s)")
  for name, path in (ablations or {}).items():
    ablated = zero_shot.zeroshot(path, task, samples=samples, seed=seed)
    rows.append(_row(f"gdp_zeroshot[{name}]",
                     *harness.judge(graph, ablated.placement, topology),
                     ablated.seconds, shot_evaluations))

  tuned = gdp_search.run(policy, task, samples=samples, seed=seed,
                         finetune_seconds=finetune_seconds,
                         finetune_evaluations=finetune_evaluations, shot=shot,
                         log=log)
  gdp_curve = tuned.curve
  rows.append(_row("gdp", *harness.judge(graph, tuned.placement, topology),
                   shot.seconds + tuned.finetune_seconds, tuned.evaluations))
  log(f"  {label} / gdp fine-tuned: {rows[-1]['step_time_us'] / 1e3:,.1f} ms "
      f"({tuned.finetune_evaluations} evaluations, "
      f"{tuned.finetune_seconds:.0f} s)")
  _add_ratios(rows)
  hdp_final = next(r["step_time_us"] for r in rows if r["method"] == "hdp")
  return {
      "graph": label, "nodes": graph.num_nodes, "devices": devices,
      "stage_rules": sorted(stage_pipeline.rule_placements(graph, topology)),
      "rows": rows, "hdp_curve": hdp_curve,
      "gdp_curve": [[e, t if math.isfinite(t) else None]
                    for e, t in gdp_curve],
      "search_cost": _search_cost(hdp_curve, gdp_curve, hdp_final),
  }


DEFAULT_FINETUNE_SECONDS = 300.0

# The stage rules' own placements (the best rule by the simulator) are what
# pipeline exploration leans towards: the summary shows what the policy adds
# to them on the graphs where a rule applies.
STAGE_RULES_ROW = "stage_pipeline"


def _row(method, step_time_us, valid, seconds, evaluations) -> dict:
  return {"method": method, "step_time_us": float(step_time_us),
          "valid": bool(valid), "search_seconds": float(seconds),
          "evaluations": evaluations}


def _add_ratios(rows) -> None:
  baselines = [r for r in rows if r["valid"] and
               not r["method"].startswith("gdp")]
  best = min((r["step_time_us"] for r in baselines), default=math.nan)
  expert = next((r["step_time_us"] for r in rows
                 if r["method"] == "human_expert"), math.nan)
  for r in rows:
    r["over_best_baseline"] = r["step_time_us"] / best
    r["over_expert"] = r["step_time_us"] / expert


def _first_reaching(curve, target: float) -> Optional[int]:
  for evaluations, step in curve:
    if step is not None and step <= target * (1 + 1e-9):
      return int(evaluations)
  return None


def _search_cost(hdp_curve, gdp_curve, hdp_final: float) -> dict:
  """Evaluations each method needed to reach HDP's final step time."""
  hdp_needed = _first_reaching(hdp_curve, hdp_final)
  gdp_needed = _first_reaching(gdp_curve, hdp_final)
  return {"hdp_final_us": hdp_final, "hdp_evaluations": hdp_needed,
          "gdp_evaluations": gdp_needed,
          "ratio": (hdp_needed / gdp_needed if hdp_needed and gdp_needed
                    else None)}


def quality_summary(results) -> dict:
  """The quality numbers over the graphs of one run.

  `gdp` is the policy's own placement (zero-shot or fine-tuned, never a
  baseline's). The mean improvement over the expert is the mean of
  1 - gdp / expert over graphs that have an expert placement.
  """
  per_graph = []
  over_rules = []
  for result in results:
    gdp = next(r for r in result["rows"] if r["method"] == "gdp")
    per_graph.append((result["graph"], gdp["over_best_baseline"],
                      gdp["over_expert"]))
    rules = next((r for r in result["rows"]
                  if r["method"] == STAGE_RULES_ROW and r["valid"]
                  and result.get("stage_rules")), None)
    if rules is not None:
      over_rules.append(gdp["step_time_us"] / rules["step_time_us"])
  with_expert = [e for _, _, e in per_graph if math.isfinite(e)]
  worst = max(per_graph, key=lambda g: g[1], default=None)
  return {
      "graphs": len(per_graph),
      "at_most_best_baseline": sum(b <= 1.0 + 1e-9 for _, b, _ in per_graph),
      "graphs_with_stage_rules": len(over_rules),
      "at_most_stage_rules": sum(r <= 1.0 + 1e-9 for r in over_rules),
      "worst_over_best_baseline": None if worst is None else
                                  {"graph": worst[0], "ratio": worst[1]},
      "mean_improvement_over_expert": (
          1.0 - sum(with_expert) / len(with_expert) if with_expert else None),
      "geomean_over_expert": (
          math.exp(sum(math.log(e) for e in with_expert) / len(with_expert))
          if with_expert else None),
  }


def format_table(results) -> str:
  lines = [f"{'graph':<18} {'method':<28} {'step ms':>10} {'/best base':>10} "
           f"{'/expert':>8} {'evals':>7} {'search s':>9}"]
  for result in results:
    for r in result["rows"]:
      evaluations = "" if r["evaluations"] is None else r["evaluations"]
      lines.append(
          f"{result['graph'][:18]:<18} {r['method']:<28} "
          f"{r['step_time_us'] / 1e3:>10,.1f} {r['over_best_baseline']:>10.3f} "
          f"{r['over_expert']:>8.3f} {evaluations!s:>7} "
          f"{r['search_seconds']:>9.1f}" + ("" if r["valid"] else "  INVALID"))
    cost = result["search_cost"]
    lines.append(
        f"{'':<18} search cost to HDP's final "
        f"{cost['hdp_final_us'] / 1e3:,.1f} ms: HDP {cost['hdp_evaluations']} "
        f"evaluations, GDP {cost['gdp_evaluations']}" +
        (f" ({cost['ratio']:.1f}x fewer)" if cost["ratio"] else ""))
  summary = quality_summary(results)
  if summary["graphs"]:
    worst = summary["worst_over_best_baseline"]
    lines.append(
        f"gdp <= best baseline on {summary['at_most_best_baseline']} of "
        f"{summary['graphs']} graphs (worst {worst['ratio']:.3f}, "
        f"{worst['graph']})")
  if summary["graphs_with_stage_rules"]:
    lines.append(
        f"gdp <= the stage rules' own placements (stage_pipeline) on "
        f"{summary['at_most_stage_rules']} of "
        f"{summary['graphs_with_stage_rules']} graphs that have stages")
  if summary["mean_improvement_over_expert"] is not None:
    lines.append(
        f"gdp vs human expert: mean improvement "
        f"{100 * summary['mean_improvement_over_expert']:.1f}% "
        f"(geometric-mean ratio {summary['geomean_over_expert']:.3f})")
  return "\n".join(lines)


def main(argv):
  del argv
  from tf_gdp.rl import cli_lib  # pylint: disable=g-import-not-at-top
  cli_lib.quiet_tensorflow_logs()
  ablations = dict(item.split("=", 1) for item in _ABLATIONS.value if item)
  started = time.time()
  results = []
  finetune_seconds = _FINETUNE.value
  if finetune_seconds is None and _FINETUNE_EVALUATIONS.value is None:
    finetune_seconds = DEFAULT_FINETUNE_SECONDS
  for source in bench_graphs.parse(_GRAPHS.value):
    harness.stderr_progress(f"{source.label} (elapsed "
                            f"{time.time() - started:.0f} s)")
    loaded = source.load(_DEVICES.value)
    results.append(evaluate_graph(
        loaded, source.label, _DEVICES.value,
        policy=_POLICY.value or gdp_method.PRETRAINED_POLICY,
        finetune_seconds=finetune_seconds,
        finetune_evaluations=_FINETUNE_EVALUATIONS.value,
        hdp_budget=_HDP_BUDGET.value, samples=_SAMPLES.value, seed=_SEED.value,
        ablations=ablations))
  print(format_table(results))
  harness.finish_run("gdp_eval", {"graphs": results,
                                  "summary": quality_summary(results)},
                     started, _JSON_OUT.value)


if __name__ == "__main__":
  # Flags only here, so other modules may import this one's functions.
  _GRAPHS = flags.DEFINE_string("graphs", "gnmt8,transformer_xl4,wavenet4",
                                bench_graphs.GRAPHS_HELP)
  _DEVICES = flags.DEFINE_string("devices", "p100x4", "Topology.")
  _POLICY = flags.DEFINE_string("policy", None, "Pre-trained policy "
                                "(default: the shipped one).")
  _FINETUNE = flags.DEFINE_float(
      "finetune_seconds", None, "Fine-tuning time per graph (0: none; "
      f"default {DEFAULT_FINETUNE_SECONDS:g} unless --finetune_evaluations).",
      lower_bound=0.0)
  _FINETUNE_EVALUATIONS = flags.DEFINE_integer(
      "finetune_evaluations", None, "Instead of --finetune_seconds: "
      "fine-tuning's simulator evaluations per graph (whole iterations of "
      "--samples + 1 placements, never more than this).", lower_bound=0)
  flags.mark_flags_as_mutual_exclusive(
      ["finetune_seconds", "finetune_evaluations"])
  _HDP_BUDGET = flags.DEFINE_integer("hdp_budget", 1000, "HDP evaluations.",
                                     lower_bound=1)
  _SAMPLES = flags.DEFINE_integer("samples", 16, "GDP samples per pass.",
                                  lower_bound=2)
  _SEED = flags.DEFINE_integer("seed", 0, "Seed.")
  _ABLATIONS = flags.DEFINE_list(
      "ablations", [], "name=policy_dir pairs evaluated zero-shot, e.g. "
      "no_attention=ff/policy,no_superposition=nosp/policy.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Write results here.")
  app.run(main)
