"""A given placement judged on a graph and a topology (`tf-gdp evaluate`).

Users compare their own placements (from `place`, `finetune`, a script or by
hand) and benchmarks check placement files with the judge `place` uses
(`placing.judge`), so the step times agree: the simulated step time, the
lower bound, validity with its reason, and per device the busy time, peak
memory against capacity, ops placed and bytes sent and received; also the
step time were each device to run its ready ops longest remaining path first
(`baselines.critical_path_order`), an order TensorFlow's executor does not
follow, which shows how much of a comparison is the order. Nothing of the
graph runs: it is loaded and simulated.

    report = evaluation.evaluate("layered:200", "out/layered_200/placement.json")
    report["step_time_us"], report["devices"][0]["peak_memory_bytes"]
    print(evaluation.format_report(report))

`placement` is a placement file, or a baseline's name (`single_device`,
`metis`, ...) to evaluate the placement that baseline finds. The topology is
`devices` (a preset or a topology .json file), else the preset the placement
file was made for.
"""

from typing import Optional

import numpy as np

from tf_gdp import baselines as baselines_lib
from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp import placement_file
from tf_gdp import placing
from tf_gdp.baselines import critical_path_order
from tf_gdp.cost import shape_caveat
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import identity

_GIB = float(1 << 30)
_MB = 1e6


def evaluate(graph_spec: str, placement: str, *,
             devices: Optional[str] = None, signature: Optional[str] = None,
             input_shapes: Optional[str] = None, seed: int = 0) -> dict:
  """The JSON-able report of `placement` on the graph `graph_spec` names.

  Args:
    graph_spec: one graph (`graph_specs`: zoo model, file, generated graph).
    placement: a placement file's path, or a baseline name.
    devices: a preset or a topology .json file (default: the placement
      file's topology, when it is a preset).
    signature: the SavedModel signature to read.
    input_shapes: shapes of a TF graph's inputs it leaves unknown
      ('x:32x128'; `grappler_bridge.input_shapes`).
    seed: seeds a randomized baseline.

  Raises:
    InputError: a missing or malformed file, no topology to evaluate on, a
      graph spec naming several graphs; PlacementError: a placement file
      that does not place exactly the graph's ops, or names a device the
      topology lacks.
  """
  baselines = [m for m in placing.method_names() if m != placing.GDP]
  loaded_file = None
  if placement == placing.GDP:
    raise errors.InputError(
        "--placement=gdp: place the graph with `tf-gdp place --method=gdp` "
        "and evaluate its placement.json")
  if placement not in baselines:
    loaded_file = placement_file.read(placement)
  devices = devices or _file_topology(loaded_file)
  topology = topology_lib.get(devices)
  graph = graph_specs.load_graph(graph_spec, devices=devices,
                                 signature=signature,
                                 input_shapes=input_shapes).graph
  if loaded_file is None:
    indices = baselines_lib.run(placement, graph, topology,
                                seed=seed).placement
    found_by = placement
  else:
    indices = placement_file.apply(loaded_file, graph, topology)
    found_by = loaded_file.method
  result = placing.judge(graph, topology, found_by, indices, seed=seed)
  return _report(graph, topology, result, placement, loaded_file)


def _file_topology(loaded: Optional[placement_file.PlacementFile]) -> str:
  """The preset a placement file was made for; InputError if it has none."""
  if loaded is None:
    raise errors.InputError(
        "a baseline needs --devices (a preset such as p100x4, or a topology "
        ".json file)")
  name = loaded.topology_name
  if not _is_preset(name):
    raise errors.InputError(
        f"{loaded.path} was made for topology {name!r}, which is not a "
        "preset: pass --devices (its topology .json file, or a preset)")
  return name


def _is_preset(name: str) -> bool:
  if name in topology_lib.preset_names():
    return True
  prefix, _, count = name.partition(":")
  return prefix in (topology_lib.CPU_WORKERS, topology_lib.LOCAL_CPUS) and (
      count.isdigit())


def _report(graph, topology, result: placing.PlaceResult, placement: str,
            loaded: Optional[placement_file.PlacementFile]) -> dict:
  num_devices = topology.num_devices
  schedule = simulator.simulate(graph, result.placement, topology,
                                record_schedule=True).schedule
  sent = np.zeros(num_devices, np.int64)
  received = np.zeros(num_devices, np.int64)
  moved = schedule.transfer_bytes.astype(np.int64)
  np.add.at(sent, schedule.transfer_src_device, moved)
  np.add.at(received, schedule.transfer_dst_device, moved)
  ops = np.bincount(result.placement, minlength=num_devices)
  rows = []
  for d, device in enumerate(topology.devices):
    peak = int(result.peak_memory_bytes[d])
    rows.append({
        "name": device.name, "kind": device.kind,
        "busy_us": float(result.busy_us[d]), "peak_memory_bytes": peak,
        "memory_bytes": int(device.memory_bytes),
        "fits_memory": peak <= int(device.memory_bytes), "ops": int(ops[d]),
        "bytes_sent": int(sent[d]), "bytes_received": int(received[d])})
  bound = result.lower_bound_us
  ordered = critical_path_order.simulate(graph, topology, result.placement)
  report = {
      "graph": graph.name, "nodes": graph.num_nodes,
      "topology": topology.name,
      "placement": placement if loaded is None else loaded.path,
      "method": result.method, "step_time_us": result.step_time_us,
      "valid": bool(result.valid), "reason": result.reason,
      "lower_bound_us": bound,
      "ratio_to_lower_bound": result.step_time_us / bound if bound > 0
                              else None,
      "transfer_bytes": int(result.transfer_bytes), "devices": rows,
      "critical_path_step_time_us": float(ordered.step_time_us),
      "critical_path_valid": not simulator.memory_problems(
          ordered.peak_memory_bytes, topology),
      "recorded_step_time_us": None, "same_graph": None,
      "inputs_caveat": shape_caveat.caveat(graph),
  }
  if loaded is not None:
    report["recorded_step_time_us"] = loaded.step_time_us
    if loaded.graph_fingerprint:
      report["same_graph"] = (loaded.graph_fingerprint ==
                              identity.graph_fingerprint(graph))
  return report


def format_report(report: dict) -> str:
  """The report as the lines `tf-gdp evaluate` prints."""
  step = report["step_time_us"]
  ratio = report["ratio_to_lower_bound"]
  lines = [
      f"{report['graph']} ({report['nodes']:,} ops) on {report['topology']}: "
      f"{report['placement']} (found by {report['method'] or 'unknown'})",
      f"step time {step / 1e3:,.3f} ms simulated; lower bound "
      f"{report['lower_bound_us'] / 1e3:,.3f} ms"
      + (f" ({ratio:.2f}x)" if ratio else ""),
      "valid" if report["valid"] else f"INVALID: {report['reason']}",
      f"in critical-path order {report['critical_path_step_time_us'] / 1e3:,.3f}"
      " ms (an order TensorFlow's executor does not follow)"
      + ("" if report["critical_path_valid"] else "; over memory in it"),
  ]
  if report.get("inputs_caveat"):
    lines.append(report["inputs_caveat"])
  recorded = report["recorded_step_time_us"]
  if recorded is not None and not np.isclose(recorded, step, rtol=1e-9):
    lines.append(f"the placement file recorded {recorded / 1e3:,.3f} ms")
  if report["same_graph"] is False:
    lines.append("the placement file was made for another version of this "
                 "graph (applied by op name)")
  width = max(len(d["name"]) for d in report["devices"])
  lines.append(f"{'device':<{width}}  {'busy ms':>10}  {'peak GiB':>9} "
               f"{'/ capacity':>10}  {'ops':>7}  {'sent MB':>9}  "
               f"{'received MB':>11}")
  for d in report["devices"]:
    lines.append(
        f"{d['name']:<{width}}  {d['busy_us'] / 1e3:>10,.3f}  "
        f"{d['peak_memory_bytes'] / _GIB:>9.3f} "
        f"{'/ ' + format(d['memory_bytes'] / _GIB, '.1f'):>10}  "
        f"{d['ops']:>7,}  {d['bytes_sent'] / _MB:>9,.2f}  "
        f"{d['bytes_received'] / _MB:>11,.2f}"
        + ("" if d["fits_memory"] else "  over its memory"))
  lines.append(f"moved between devices: {report['transfer_bytes'] / _MB:,.2f} "
               "MB per step")
  return "\n".join(lines)
