"""Places many graphs at once: one output folder per graph, one summary table.

For each graph of a `--graphs` spec (zoo names, files, globs, generated
graphs; see `tf_gdp.graph_specs`):

  <out>/<graph>/placement.json   op name -> device (`tf_gdp.placement_file`)
  <out>/<graph>/report.json      step time, baselines, bound, memory,
                                 robustness (on a preset)
  <out>/<graph>/gantt.png        simulated schedule (when pictures are on)
  <out>/<graph>/devices.png      per-device busy time and memory
  <out>/<graph>/placed_graph.pb  the MetaGraphDef with the devices written
                                 (graphs that came from TensorFlow, on request)
  <out>/<graph>/placed_saved_model/
                                 for a SavedModel input: a SavedModel whose
                                 signature runs the placed graph (on request)

A graph that fails (a malformed file, an infeasible memory budget) is
reported with one line and skipped; the others' results are kept. Every
file is written atomically, so an interrupted run leaves no half file.
"""

import dataclasses
import json
import os
import re
import shutil
import time
from typing import Callable, List, Optional

from grappler_bridge import errors as grappler_errors

from tf_gdp import confirm_placement
from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp import graph_specs
from tf_gdp import gdp_method
from tf_gdp import placing
from tf_gdp.cost import loop_caveat
from tf_gdp.cost import shape_caveat
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import identity


@dataclasses.dataclass
class Outcome:
  """One graph's result: the PlaceResult, or the error that stopped it."""
  label: str
  folder: Optional[str] = None
  result: Optional[placing.PlaceResult] = None
  error: Optional[str] = None
  nodes: int = 0
  seconds: float = 0.0


def place_many(spec: str, devices: str, out_dir: str, *,
               method: str = placing.AUTO, budget_seconds: float = 0.0,
               policy: Optional[str] = None, samples: int = 16,
               seed: int = 0, compare=placing.DEFAULT_COMPARE,
               pictures: bool = True, write_graph: bool = False,
               signature: Optional[str] = None,
               input_shapes: Optional[str] = None, profile: bool = True,
               calibrate: bool = True, confirm: bool = True,
               allow_side_effects: bool = False,
               log: Callable[[str], None] = lambda line: None,
               robust_members: int = placing.ROBUST_MEMBERS,
               robust_objective: bool = False) -> List[Outcome]:
  """Places every graph of `spec` on `devices`; writes under `out_dir`.

  `signature` names the signature of the SavedModels in `spec` and
  `input_shapes` fixes their inputs' unknown shapes (`graph_specs.parse`);
  `robust_members` and `robust_objective` are `placing.place`'s. With
  `profile`, a TensorFlow graph whose devices are here (`local-cpus:K`,
  `cpu-workers:K`) is priced by a profile on them (`runtime.profiled_costs`);
  with `calibrate`, a cpu-workers:K topology never measured here, or measured
  by an older version (`calibrate.stale_reason`), is calibrated first
  (`tf-gdp calibrate`, saved for the next run). With
  `confirm`, a placement for devices that can be timed is measured against
  the best baselines and one device before it is written
  (`confirm_placement`). Neither runs a graph whose ops reach outside the
  step unless `allow_side_effects`.
  """
  if method not in placing.method_names():  # fail before loading any graph
    raise errors.InputError(f"unknown method {method!r}; choose from "
                            f"{', '.join(placing.method_names())}")
  placing.check_compare(compare)
  if robust_objective:
    placing.check_robust_objective(method, budget_seconds, robust_members)
  if method in (placing.GDP, placing.AUTO):
    gdp_method.check_policy(policy)
  topology = topology_lib.get(devices)
  items = graph_specs.parse(spec, signature=signature,
                            input_shapes=input_shapes)
  if calibrate and re.fullmatch(rf"{topology_lib.CPU_WORKERS}:\d+", devices):
    topology = _calibrated(devices, topology, log)
  os.makedirs(out_dir, exist_ok=True)
  outcomes = []
  started = time.perf_counter()
  for k, item in enumerate(items):
    elapsed = time.perf_counter() - started
    eta = (f", ETA {elapsed / k * (len(items) - k):.0f} s" if k else "")
    done = [o.result.step_time_us for o in outcomes if o.result]
    best = (f", last {done[-1] / 1e3:.1f} ms" if done else "")
    log(f"[{k + 1}/{len(items)}] {item.label}{best}{eta}")
    outcome = Outcome(label=item.label)
    clock = time.perf_counter()
    try:
      loaded = item.load(devices)
      if write_graph:
        _check_writable_graph(loaded)  # before the search writes anything
      if write_graph and loaded.saved_model_signature is not None:
        from grappler_bridge import export  # pylint: disable=g-import-not-at-top
        export.check_saved_model_source(loaded.extracted)  # before the search
      costs = {"source": "as loaded"}
      if profile:
        from tf_gdp.runtime import profiled_costs  # pylint: disable=g-import-not-at-top
        graph, costs = profiled_costs.profiled_graph(
            loaded.graph, loaded.extracted, topology,
            allow_side_effects=allow_side_effects, log=log)
        loaded = dataclasses.replace(loaded, graph=graph)
      loops = loop_caveat.caveat(loaded.graph, costs["source"])
      if loops:
        costs = {**costs, "loops": loops}
        log(f"  {item.label}: {loops}")
      shapes = shape_caveat.caveat(loaded.graph)
      if shapes:
        costs = {**costs, "inputs": shapes}
        log(f"  {item.label}: {shapes}")
      outcome.nodes = loaded.graph.num_nodes
      result = placing.place(
          loaded.graph, topology, method, budget_seconds=budget_seconds,
          policy=policy, samples=samples, seed=seed, compare=compare,
          extracted=loaded.extracted, log=log, robust_members=robust_members,
          robust_objective=robust_objective)
      if confirm:
        result = confirm_placement.confirm(
            result, loaded.graph, topology, loaded.extracted, seed=seed,
            allow_side_effects=allow_side_effects, log=log)
      outcome.result = result
      outcome.folder = os.path.join(out_dir, identity.safe_name(item.label))
      write_outputs(outcome.folder, loaded, topology, result,
                    pictures=pictures, write_graph=write_graph,
                    extra_report={"costs": costs})
    except errors.InputError as e:
      outcome.result = None  # its outputs could not all be written
      outcome.error = grappler_errors.first_line(e)
      log(f"  skipped {item.label}: {outcome.error}")
    outcome.seconds = time.perf_counter() - clock
    outcomes.append(outcome)
  return outcomes


def write_outputs(folder, loaded, topology, result, *, pictures=True,
                  write_graph=False, extra_report: Optional[dict] = None
                  ) -> None:
  """One graph's folder: placement, report, pictures, placed graph.

  The report also says where the link figures came from (`links`) and,
  from `extra_report`, what priced the ops.
  """
  os.makedirs(folder, exist_ok=True)
  _remove_previous_outputs(folder)
  graph = loaded.graph
  placing.save(result, graph, os.path.join(folder, "placement.json"))
  report = {**result.report(), "links": topology_lib.link_source(topology),
            **(extra_report or {})}
  fileio.write_atomically(os.path.join(folder, "report.json"),
                          json.dumps(report, indent=1))
  if pictures:
    from tf_gdp.viz import gantt  # pylint: disable=g-import-not-at-top
    from tf_gdp.viz import summary_chart  # pylint: disable=g-import-not-at-top
    gantt.write_gantt_png(graph, topology, result.placement,
                          os.path.join(folder, "gantt.png"),
                          title=f"{graph.name} on {topology.name}: "
                          f"{result.method}")
    summary_chart.write_device_summary_png(
        graph, topology, result.placement, os.path.join(folder, "devices.png"))
  if write_graph:
    _check_writable_graph(loaded)
    write_placed_meta_graph(loaded.extracted, result.device_map(graph),
                            os.path.join(folder, "placed_graph.pb"))
    if loaded.saved_model_signature is not None:
      write_placed_saved_model(loaded.extracted, result.device_map(graph),
                               os.path.join(folder, "placed_saved_model"),
                               loaded.saved_model_signature)


# Outputs written only on request: a folder placed again must not keep the
# previous placement's picture or graph beside the new placement.json.
OPTIONAL_OUTPUTS = ("gantt.png", "devices.png", "placed_graph.pb",
                    "placed_saved_model")


def _remove_previous_outputs(folder: str) -> None:
  """Deletes the optional outputs of an earlier run into `folder`."""
  for name in OPTIONAL_OUTPUTS:
    path = os.path.join(folder, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    elif os.path.lexists(path):
      os.remove(path)


def _calibrated(devices: str, topology, log) -> topology_lib.Topology:
  """cpu-workers:K with measured links and runtime costs: calibrates when
  they were never measured here or by an older version, else the file."""
  from tf_gdp.runtime import calibrate  # pylint: disable=g-import-not-at-top
  count = int(devices.partition(":")[2])
  reason = calibrate.stale_reason(count)
  if reason is None:
    return topology
  log(f"{devices}: {reason}; calibrating (once, saved to "
      f"{topology_lib.calibrated_path(count)}; `tf-gdp calibrate` redoes it)")
  calibrate.calibrate(count, log=lambda line: log(f"  {line}"))
  return topology_lib.get(devices)


def _check_writable_graph(loaded) -> None:
  """InputError unless `loaded` has a TensorFlow graph to write back."""
  if loaded.extracted is None:
    raise errors.InputError(
        f"{loaded.graph.name}: an op-graph JSON file has no TensorFlow graph "
        "to write (--write_graph needs a zoo model, GraphDef or SavedModel)")


def write_placed_meta_graph(extracted, device_map: dict, path: str) -> None:
  """The flat MetaGraphDef with every placed op's device field set."""
  from grappler_bridge import export  # pylint: disable=g-import-not-at-top
  from grappler_bridge import graph_io  # pylint: disable=g-import-not-at-top
  meta = export.placed_meta_graph(extracted, device_map)
  fileio.write_atomically(path, graph_io.serialize_meta_graph(meta, path))


def write_placed_saved_model(extracted, device_map: dict, path: str,
                             signature: str = "serving_default") -> None:
  """A SavedModel whose `signature` runs the placed flat graph.

  See `grappler_bridge.export.save_placed_saved_model`. Written to a temp
  directory beside `path`, then renamed: never half a SavedModel.
  """
  from grappler_bridge import export  # pylint: disable=g-import-not-at-top
  fileio.write_directory_atomically(
      path, lambda staging: export.save_placed_saved_model(
          extracted, device_map, staging, signature))


def format_summary(outcomes: List[Outcome], devices: str, method: str) -> str:
  """The table printed at the end: one row per graph."""
  compared = sorted({name for o in outcomes if o.result
                     for name in o.result.compared})
  header = (f"{'graph':<24} {'nodes':>7} {method + ' ms':>10} "
            f"{'valid':>5} {'/LB':>5} " +
            " ".join(f"{name[:12] + ' ms':>15}" for name in compared) +
            f" {'seconds':>8}  output")
  lines = [f"placed with {method} on {devices}", header, "-" * len(header)]
  for o in outcomes:
    if o.result is None:
      lines.append(f"{o.label[:24]:<24} {'':>7} {'-':>10} {'':>5} {'':>5} " +
                   " ".join(f"{'':>15}" for _ in compared) +
                   f" {o.seconds:>8.1f}  FAILED: {o.error}")
      continue
    r = o.result
    cells = []
    for name in compared:
      entry = r.compared.get(name, {})
      step = entry.get("step_time_us")
      cells.append(f"{step / 1e3:>15,.1f}" if step is not None
                   else f"{'n/a':>15}")
    ratio = r.step_time_us / r.lower_bound_us if r.lower_bound_us else 0.0
    lines.append(f"{o.label[:24]:<24} {o.nodes:>7,} {r.step_time_us / 1e3:>10,.1f} "
                 f"{'yes' if r.valid else 'NO':>5} {ratio:>5.2f} " +
                 " ".join(cells) + f" {o.seconds:>8.1f}  {o.folder}")
    lines += _confirmation_lines(r)
  failed = sum(o.result is None for o in outcomes)
  lines.append(f"{len(outcomes) - failed} placed, {failed} failed")
  return "\n".join(lines)


def _confirmation_lines(result: placing.PlaceResult) -> List[str]:
  """Under a graph's row: measured next to predicted, and what was kept."""
  confirmed = result.details.get("confirmation")
  if not confirmed:
    return []
  if not confirmed["measured"]:
    return [f"  {confirmed['note']}"]
  cells = ", ".join(
      f"{row['name']} {row['measured_us'] / 1e3:,.2f}" if row["valid"]
      else f"{row['name']} failed" for row in confirmed["rows"])
  kept = confirmed["chosen"]
  asked = confirmed["requested_method"]
  return [f"  measured ms on {confirmed['target']}: {cells}; kept {kept}"
          + ("" if kept == asked else f" (faster than {asked}; the step "
             "time above is its prediction)")]
