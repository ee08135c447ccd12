"""Generalization: the pre-trained policy on unseen graphs, beside its controls.

Whether pre-training generalizes is measured on graphs and topologies the
policy was not trained on (by default the corpus's evaluation families, on
`p100x4` and on `p100x3`, three GPUs, a topology no policy trains on), at
equal simulator evaluations. For each graph and topology:

1. the best classic one-shot baseline (every classic method but
   local_search, a list scheduler's planned order included:
   `harness.best_row`) and its step time;
2. per policy (`--policies`: the pre-trained one and its controls, a
   randomly initialised policy and uniform logits, `policy_controls`):
   zero-shot, the greedy placement and `--samples` samples (1 + samples
   evaluations, the repair's simulations aside), its step time, validity and
   ratio to the best baseline;
3. `local_search` given the zero-shot budget (1 + samples evaluations) and
   `--budget` evaluations;
4. per policy: zero-shot then fine-tuning within `--budget` evaluations, the
   reward reference's included (`budget_check.gdp_row`), over local_search
   at the same budget;
5. per policy: the evaluations GDP needed to reach local_search's result at
   `--budget` (the first point of its best-so-far curve at or below it;
   null if it never did), local_search's own (from its curve), and their
   ratio.

Every policy goes through the same zero-shot and fine-tuning code, with the
same pipeline pushes, self-imitation and budget. The summary, per topology
and policy, sets the figures beside their targets: zero-shot valid on every
graph, within 5% of the best baseline, better than local_search at the
zero-shot budget; fine-tuned at or below local_search at `--budget` on at
least 75% of the graphs (and the geometric-mean ratio); the median ratio of
evaluations to reach local_search's result at most 1/5 (a graph where GDP
never reached it counts as infinitely many). Deterministic for a given seed
(wall-clock times aside).

Example:
  python -m tf_gdp.bench.generalization_check --graphs=corpus:eval \
      --devices=p100x4,p100x3 --budget=2000 --json_out=generalization.json
"""

import math
import statistics
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from absl import app
from absl import flags

from tf_gdp import errors
from tf_gdp import gdp_method
from tf_gdp.bench import bench_graphs
from tf_gdp.bench import budget_check
from tf_gdp.bench import flag_checks
from tf_gdp.bench import harness
from tf_gdp.bench import policy_controls
from tf_gdp.cost import topology as topology_lib

DEFAULT_DEVICES = ("p100x4", "p100x3")
DEFAULT_BUDGET = 2000
# The targets the summary sets its figures beside.
ZEROSHOT_OVER_BEST_BASELINE = 1.05
FINETUNED_AT_MOST_LOCAL_SEARCH = 0.75  # fraction of graphs
REACH_OVER_LOCAL_SEARCH = 0.2  # median, evaluations to reach its result
_TIE = 1e-9  # relative: equal step times compare as equal


def parse_devices(values: Sequence[str]) -> List[str]:
  """Distinct topologies, each one `topology.get` knows; InputError if not."""
  names = [v.strip() for v in values if v.strip()]
  if not names or len(set(names)) != len(names):
    raise errors.InputError(f"devices must be distinct topologies; got "
                            f"{','.join(values) or 'none'}")
  for name in names:
    topology_lib.get(name)
  return names


def evaluations_to_reach(curve, target: Optional[float]) -> Optional[int]:
  """The evaluations of the first best-so-far point at or below `target`."""
  if target is None:
    return None
  return next((int(count) for count, step in curve
               if step <= target * (1 + _TIE)), None)


def check_graph(loaded, label: str, devices: str, *,
                policies: Dict[str, str], budget: int, samples: int,
                seed: int,
                methods: Sequence[str] = budget_check.ONE_SHOT_METHODS,
                polish_share: Optional[float] = None,
                ppo_patience: Optional[int] = None,
                anchor_epochs: Optional[int] = None,
                log=harness.stderr_progress) -> dict:
  """Every policy and local_search on one graph and topology (module doc).

  `policies` maps a name to a saved policy (`policy_controls.prepare`);
  `methods` are the one-shot baselines the ratios are to; `polish_share`,
  `ppo_patience` and `anchor_epochs` are fine-tuning's (`gdp_search.run`).
  """
  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import placement_task
  from tf_gdp.rl import zero_shot
  # pylint: enable=g-import-not-at-top
  topology = topology_lib.get(devices)
  one_shot = harness.bench_graph(loaded, label, devices, methods, seed=seed,
                                 progress=log)
  best_method, best_us = harness.best_row(one_shot)
  reference = budget_check.reference_evaluations(one_shot)
  shot_budget = samples + 1
  local_shot = budget_check.local_search_row(loaded, topology, shot_budget,
                                             seed, best_us)
  local = (local_shot if budget == shot_budget else
           budget_check.local_search_row(loaded, topology, budget, seed,
                                         best_us))
  budget_check.log_row(log, label, local_shot)
  if local is not local_shot:
    budget_check.log_row(log, label, local)
  target = local["step_time_us"] if local["valid"] else None
  local_reach = evaluations_to_reach(local["curve"], target)
  task = placement_task.PlacementTask(loaded.graph, topology,
                                      extracted=loaded.extracted, name=label)
  per_policy = {}
  for name, path in policies.items():
    shot = zero_shot.zeroshot(path, task, samples=samples, seed=seed)
    def gdp(n, method, shot=shot, path=path, name=name):
      row = budget_check.gdp_row(
          loaded, task, shot, n, policy=path, samples=samples, seed=seed,
          reference_evaluations=reference, best_us=best_us, log=log,
          method=method, polish_share=polish_share,
          ppo_patience=ppo_patience, anchor_epochs=anchor_epochs)
      budget_check.log_row(log, f"{label} / {name}", row)
      return row

    zero = gdp(shot_budget, "zeroshot")
    # A budget of one zero-shot pass fine-tunes nothing: the same search.
    tuned = (dict(zero, method="gdp") if budget == shot_budget
             else gdp(budget, "gdp"))
    reach = evaluations_to_reach(tuned["curve"], target)
    per_policy[name] = {
        "zeroshot": zero, "finetuned": tuned,
        "zeroshot_over_local_search_at_zeroshot_budget":
            budget_check.step_ratio(zero, local_shot),
        "finetuned_over_local_search": budget_check.step_ratio(tuned, local),
        "evaluations_to_reach": reach,
        "reach_over_local_search": (reach / local_reach
                                    if reach is not None and local_reach
                                    else None)}
  return {
      "graph": label, "nodes": loaded.graph.num_nodes, "devices": devices,
      "best_baseline": {"method": best_method, "step_time_us": best_us},
      "reference_evaluations": reference,
      "baselines": harness.rows_as_dicts(one_shot),
      "zeroshot_budget": shot_budget, "budget": budget,
      "local_search": {"zeroshot_budget": local_shot, "budget": local},
      "local_search_evaluations_to_reach": local_reach,
      "policies": per_policy}


def summary(results) -> list:
  """Per topology and policy: the figures of the module doc and targets."""
  by_devices = {}
  for result in results:
    by_devices.setdefault(result["devices"], []).append(result)
  out = []
  for devices, entries in by_devices.items():
    names = list(dict.fromkeys(n for e in entries for n in e["policies"]))
    out.append({"devices": devices, "graphs": len(entries),
                "local_search_within_zeroshot_budget": sum(
                    e["local_search"]["zeroshot_budget"]["within_budget"]
                    for e in entries),
                "policies": {n: _policy_summary(
                    [e["policies"][n] for e in entries if n in e["policies"]])
                             for n in names}})
  return out


def _policy_summary(rows: list) -> dict:
  """One policy's figures over the graphs of one topology."""
  def count(key, accept):
    return sum(r[key] is not None and accept(r[key]) for r in rows)
  zero = [r["zeroshot"] for r in rows]
  at_most = count("finetuned_over_local_search", lambda x: x <= 1 + _TIE)
  reach = [r["reach_over_local_search"] for r in rows]
  median = (statistics.median(math.inf if x is None else x for x in reach)
            if reach else math.inf)
  return {
      "graphs": len(rows),
      "zeroshot_valid": sum(r["valid"] for r in zero),
      "zeroshot_valid_on_every_graph": all(r["valid"] for r in zero),
      "zeroshot_within_budget": sum(r["within_budget"] for r in zero),
      "zeroshot_within_5pct_of_best_baseline": sum(
          r["over_best_baseline"] is not None and
          r["over_best_baseline"] <= ZEROSHOT_OVER_BEST_BASELINE for r in zero),
      "zeroshot_beats_local_search_at_zeroshot_budget": count(
          "zeroshot_over_local_search_at_zeroshot_budget",
          lambda x: x < 1 - _TIE),
      "finetuned_at_most_local_search": at_most,
      "finetuned_at_most_local_search_fraction": (at_most / len(rows)
                                                  if rows else None),
      "finetuned_meets_target": bool(rows) and (
          at_most >= FINETUNED_AT_MOST_LOCAL_SEARCH * len(rows)),
      "geomean_finetuned_over_local_search": budget_check.geomean(
          [r["finetuned_over_local_search"] for r in rows
           if r["finetuned_over_local_search"] is not None]),
      "reached_local_search": count("evaluations_to_reach", lambda x: True),
      "median_reach_over_local_search": (median if math.isfinite(median)
                                         else None),
      "reach_meets_target": median <= REACH_OVER_LOCAL_SEARCH}


def format_table(results) -> str:
  """Per topology: a block per graph (a line per policy), then the summary."""
  header = (f"{'graph / policy':<24} {'zs ms':>10} {'valid':>5} "
            f"{'zs evals':>8} {'zs/best':>7} {'zs/ls':>6} {'ft ms':>10} "
            f"{'ft/ls':>6} {'reach':>6} {'/ls':>6}")
  lines = []
  for devices in dict.fromkeys(r["devices"] for r in results):
    lines += [f"devices: {devices}", header, "-" * len(header)]
    for result in (r for r in results if r["devices"] == devices):
      lines.append(_graph_line(result))
      for name, entry in result["policies"].items():
        lines.append(_policy_line(name, entry))
  for block in summary(results):
    passed = block["graphs"] - block["local_search_within_zeroshot_budget"]
    if passed:
      lines.append(f"{block['devices']}: local_search passed the zero-shot "
                   f"budget on {passed} of {block['graphs']} graphs (!: its "
                   "starts cost more)")
    for name, s in block["policies"].items():
      lines.append(_summary_line(block["devices"], name, s))
  return "\n".join(lines)


def _graph_line(result: dict) -> str:
  best = result["best_baseline"]
  shot, local = (result["local_search"][k] for k in ("zeroshot_budget",
                                                     "budget"))
  reach = result["local_search_evaluations_to_reach"]
  def searched(row):
    over = "" if row["within_budget"] else "!"
    return (f"{row['budget']}: {_ms(row['step_time_us'])} ms "
            f"({row['evaluations']}{over} evaluations")
  return (f"{result['graph'][:40]}: best baseline {best['method']} "
          f"{_ms(best['step_time_us'])} ms; local_search {searched(shot)}), "
          f"{searched(local)}"
          f"{')' if reach is None else f', reached at {reach})'}")


def _policy_line(name: str, entry: dict) -> str:
  zero, tuned = entry["zeroshot"], entry["finetuned"]
  evaluations = f"{zero['evaluations']}{'' if zero['within_budget'] else '!'}"
  return (f"  {name:<22} {_ms(zero['step_time_us']):>10} "
          f"{'yes' if zero['valid'] else 'NO':>5} {evaluations:>8} "
          f"{_ratio(zero['over_best_baseline']):>7} "
          f"{_ratio(entry['zeroshot_over_local_search_at_zeroshot_budget']):>6}"
          f" {_ms(tuned['step_time_us']):>10} "
          f"{_ratio(entry['finetuned_over_local_search']):>6} "
          f"{_count(entry['evaluations_to_reach']):>6} "
          f"{_ratio(entry['reach_over_local_search']):>6}")


def _summary_line(devices: str, name: str, s: dict) -> str:
  graphs = s["graphs"]
  geomean, median = (s["geomean_finetuned_over_local_search"],
                     s["median_reach_over_local_search"])
  return (
      f"{devices} {name}: zero-shot valid on {s['zeroshot_valid']} of "
      f"{graphs}, within 5% of the best baseline on "
      f"{s['zeroshot_within_5pct_of_best_baseline']}, beats local_search at "
      f"its budget on {s['zeroshot_beats_local_search_at_zeroshot_budget']}; "
      f"fine-tuned <= local_search on {s['finetuned_at_most_local_search']} "
      f"({_percent(s['finetuned_at_most_local_search_fraction'])}, target "
      f"{FINETUNED_AT_MOST_LOCAL_SEARCH:.0%}), geometric mean "
      f"{_ratio(geomean)}; evaluations to reach local_search's result: "
      f"median {_ratio(median)} of its own (target "
      f"{REACH_OVER_LOCAL_SEARCH:.2f}), reached on "
      f"{s['reached_local_search']} of {graphs}")


def _ms(us: Optional[float]) -> str:
  return "-" if us is None or not math.isfinite(us) else f"{us / 1e3:,.3f}"


def _count(value: Optional[int]) -> str:
  return "-" if value is None else str(value)


def _ratio(value: Optional[float]) -> str:
  return "-" if value is None else f"{value:.3f}"


def _percent(value: Optional[float]) -> str:
  return "-" if value is None else f"{value:.0%}"


def write_results(results, settings: dict, started: float,
                  json_out: Optional[str]) -> None:
  """The run's JSON (`harness.finish_run`: written atomically)."""
  harness.finish_run("generalization_check", {
      "settings": settings,
      "targets": {
          "zeroshot_over_best_baseline": ZEROSHOT_OVER_BEST_BASELINE,
          "finetuned_at_most_local_search_fraction":
              FINETUNED_AT_MOST_LOCAL_SEARCH,
          "median_reach_over_local_search": REACH_OVER_LOCAL_SEARCH},
      "graphs": results, "summary": summary(results)}, started, json_out)


def run(sources, device_list: Sequence[str], names: Sequence[str], *,
        pretrained: str, budget: int, samples: int, seed: int,
        methods: Sequence[str] = budget_check.ONE_SHOT_METHODS,
        polish_share: Optional[float] = None,
        ppo_patience: Optional[int] = None,
        anchor_epochs: Optional[int] = None,
        log=harness.stderr_progress) -> list:
  """Every graph of `sources` on every topology (module doc); its results.

  The control policies are saved in a temporary directory for the run.
  """
  from tf_gdp.rl import placement_task  # pylint: disable=g-import-not-at-top
  started = time.time()
  results = []
  with tempfile.TemporaryDirectory() as directory:
    policies = None
    for source in sources:
      for devices in device_list:
        log(f"{source.label} on {devices} (elapsed "
            f"{time.time() - started:.0f} s)")
        loaded = source.load(devices)
        if policies is None:
          policies = policy_controls.prepare(
              names, pretrained, directory, seed=seed,
              task=placement_task.PlacementTask(loaded.graph,
                                                topology_lib.get(devices)))
        results.append(check_graph(
            loaded, source.label, devices, policies=policies, budget=budget,
            samples=samples, seed=seed, methods=methods,
            polish_share=polish_share, ppo_patience=ppo_patience,
            anchor_epochs=anchor_epochs, log=log))
  return results


def main(argv):
  del argv
  from tf_gdp.rl import cli_lib  # pylint: disable=g-import-not-at-top
  cli_lib.quiet_tensorflow_logs()
  try:
    sources = bench_graphs.parse(_GRAPHS.value)
  except errors.InputError as e:
    raise app.UsageError(str(e)) from e
  started = time.time()
  device_list = parse_devices(_DEVICES.value)
  names = policy_controls.parse(_POLICIES.value)
  results = run(sources, device_list, names,
                pretrained=_POLICY.value or gdp_method.PRETRAINED_POLICY,
                budget=_BUDGET.value, samples=_SAMPLES.value, seed=_SEED.value,
                polish_share=_POLISH_SHARE.value,
                ppo_patience=_PPO_PATIENCE.value,
                anchor_epochs=_ANCHOR_EPOCHS.value)
  print(format_table(results))
  write_results(results, {
      "graphs": _GRAPHS.value, "devices": device_list, "policies": names,
      "budget": _BUDGET.value, "samples": _SAMPLES.value, "seed": _SEED.value,
      "polish_share": _POLISH_SHARE.value,
      "ppo_patience": _PPO_PATIENCE.value,
      "anchor_epochs": _ANCHOR_EPOCHS.value,
      "policy": _POLICY.value or "shipped"}, started, _JSON_OUT.value)


if __name__ == "__main__":
  # Flags only here, so other modules may import this one's functions.
  _GRAPHS = flags.DEFINE_string("graphs", "corpus:eval",
                                bench_graphs.GRAPHS_HELP)
  _DEVICES = flags.DEFINE_list(
      "devices", list(DEFAULT_DEVICES),
      "Topologies; by default one the policy trains on and one it does not.")
  _POLICIES = flags.DEFINE_list(
      "policies", list(policy_controls.POLICIES),
      f"Policies: {', '.join(policy_controls.POLICIES)} (the pre-trained "
      "one, a randomly initialised one with its config, uniform logits).")
  _POLICY = flags.DEFINE_string("policy", None, "Pre-trained policy "
                                "(default: the shipped one).")
  _BUDGET = flags.DEFINE_integer(
      "budget", DEFAULT_BUDGET, "Simulator evaluations of fine-tuning and of "
      "the long local search.", lower_bound=1)
  _SAMPLES = flags.DEFINE_integer(
      "samples", 16, "GDP samples per zero-shot pass and per fine-tuning "
      "iteration.", lower_bound=2)
  _SEED = flags.DEFINE_integer("seed", 0, "Seed of every search and of the "
                               "random policy's weights.")
  _POLISH_SHARE = flags.DEFINE_float(
      "polish_share", None, "Share of fine-tuning's budget spent on local "
      "moves after PPO (default: rl.polish.POLISH_SHARE); 0: PPO alone.",
      lower_bound=0.0, upper_bound=0.95)
  _PPO_PATIENCE = flags.DEFINE_integer(
      "ppo_patience", None, "Evaluations without a better placement after "
      "which PPO hands over to the polish (default: rl.polish.PPO_PATIENCE); "
      "0: never.", lower_bound=0)
  _ANCHOR_EPOCHS = flags.DEFINE_integer(
      "anchor_epochs", None, "Steps fitting the policy to the zero-shot "
      "placement before PPO (default: rl.anchor.EPOCHS); 0: no anchor.",
      lower_bound=0)
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Write results here.")
  flags.register_validator("policies",
                           flag_checks.from_parser(policy_controls.parse))
  flags.register_validator("devices",
                           flag_checks.from_parser(parse_devices))
  # A named policy is checked (loaded) here, before any graph is built.
  flags.register_validator("policy", flag_checks.from_parser(
      lambda path: path is None or gdp_method.check_policy(path)))
  app.run(main)
