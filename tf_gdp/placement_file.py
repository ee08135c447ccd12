"""The placement file: one placement of one graph, as JSON, by op name.

`tf-gdp place`, `gdp.place(...).save()`, `tf-gdp finetune` and training's
best placements all write this one format, and everything that reads a
placement (`gdp.load_placement`, `tf-gdp measure --placement`, a resumed
training run) reads it here:

  {"format": "tf-gdp-placement", "version": 1, "method": str,
   "graph": name, "graph_fingerprint": sha256 hex, "topology": name,
   "devices": [device names], "step_time_us": float,
   "step_time_source": "simulate" | "measure",
   "command": str (optional: the command line that produced it),
   "placement": {op name: device name},
   ... fields of the writer (training adds "evaluation", "group_devices",
   "reference" and "speedup_vs_reference"; see `tf_gdp.rl.outputs`)}

A placement is applied by op name, so a file survives a rebuilt graph with
the same ops; the fingerprint says whether it is the very same graph. A
file's `command` is a record for people: nothing here runs it.
"""

import dataclasses
import json
from typing import Dict, Optional, Sequence

import numpy as np

from grappler_bridge import limits

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import identity
from tf_gdp.graph import op_graph

FORMAT = "tf-gdp-placement"
VERSION = 1
SIMULATE, MEASURE = "simulate", "measure"
# Optional top-level fields that must be strings when present.
_STRING_FIELDS = ("method", "graph", "graph_fingerprint", "topology",
                  "step_time_source", "command")


@dataclasses.dataclass(frozen=True)
class PlacementFile:
  """A placement file as read; hand it to `apply` (or `gdp.place`).

  Attributes:
    path: the file it was read from.
    method: the method that found the placement.
    graph_name, topology_name: what it was made for.
    graph_fingerprint: `identity.graph_fingerprint` of that graph, if given.
    devices: op name -> device name, as stored.
    step_time_us: the step time predicted (or measured) when it was written.
    document: the whole JSON object, writers' own fields included.
  """
  path: str
  method: str
  graph_name: str
  topology_name: str
  graph_fingerprint: Optional[str]
  devices: Dict[str, str]
  step_time_us: Optional[float]
  document: dict = dataclasses.field(repr=False)


def document(graph: op_graph.OpGraph, device_names: Sequence[str], placement,
             *, topology_name: str, method: str, step_time_us: float,
             step_time_source: str = SIMULATE, command: Optional[str] = None,
             fields: Optional[dict] = None) -> dict:
  """The JSON object of a placement file.

  Args:
    graph: the placed graph.
    device_names: the topology's devices; `placement` indexes into them.
    placement: int[num_nodes] device index per op.
    topology_name, method: where, and how it was found.
    step_time_us, step_time_source: its step time and who judged it.
    command: the command line that produced it (left out when None).
    fields: the writer's own extra fields.
  """
  names = [str(name) for name in device_names]
  doc = {
      "format": FORMAT, "version": VERSION, "method": method,
      "graph": graph.name,
      "graph_fingerprint": identity.graph_fingerprint(graph),
      "topology": topology_name, "devices": names,
      "step_time_us": float(step_time_us),
      "step_time_source": step_time_source,
  }
  doc.update(fields or {})
  if command is not None:
    doc["command"] = command
  doc["placement"] = {op: names[int(d)]
                      for op, d in zip(graph.node_names, placement)}
  return doc


def write(path: str, doc: dict) -> None:
  """Writes a `document` to `path` atomically (the old file or the new one)."""
  fileio.write_atomically(path, json.dumps(doc, indent=1))


def read(path: str) -> PlacementFile:
  """Reads and checks a placement file; InputError (one line) if it is not one."""
  data = limits.read_input_file(path, what="placement file",
                                error=errors.InputError)
  try:
    doc = json.loads(data.decode("utf-8"))
  except (ValueError, RecursionError) as e:
    raise errors.InputError(f"{path}: not a placement JSON file: {e}") from e
  problem = _problem(doc)
  if problem:
    raise errors.InputError(f"{path}: not a tf-gdp placement file: {problem}")
  step = doc.get("step_time_us")
  return PlacementFile(
      path=path, method=doc.get("method", ""), graph_name=doc.get("graph", ""),
      topology_name=doc.get("topology", ""),
      graph_fingerprint=doc.get("graph_fingerprint"),
      devices=dict(doc["placement"]),
      step_time_us=None if step is None else float(step), document=doc)


def _problem(doc) -> Optional[str]:
  """What makes `doc` not a placement file of this version, or None."""
  if not isinstance(doc, dict):
    return f"the JSON is a {type(doc).__name__}, not an object"
  if doc.get("format") != FORMAT:
    return f"its format is {doc.get('format')!r}, not {FORMAT!r}"
  version = doc.get("version", VERSION)
  if isinstance(version, bool) or not isinstance(version, int) or not (
      1 <= version <= VERSION):
    return (f"version {version!r} is not one this tf-gdp reads "
            f"(1 to {VERSION})")
  placement = doc.get("placement")
  if not isinstance(placement, dict) or not all(
      isinstance(device, str) for device in placement.values()):
    return "'placement' must map op names to device names"
  for key in _STRING_FIELDS:
    if key in doc and not isinstance(doc[key], str):
      return f"{key!r} must be a string, not {type(doc[key]).__name__}"
  step = doc.get("step_time_us")
  if step is not None and (isinstance(step, bool) or
                           not isinstance(step, (int, float))):
    return f"'step_time_us' must be a number, not {step!r}"
  return None


def apply(loaded: PlacementFile, graph: op_graph.OpGraph,
          topology: topology_lib.Topology) -> np.ndarray:
  """int32 device index per op of `graph` (node order), matched by op name.

  Raises:
    PlacementError: the file does not place exactly the graph's ops, or
      names a device the topology lacks.
  """
  devices = loaded.devices
  missing = [op for op in graph.node_names if op not in devices]
  extra = len(devices) - (len(graph.node_names) - len(missing))
  if missing or extra:
    sample = ", ".join(repr(op) for op in missing[:3])
    raise errors.PlacementError(
        f"{loaded.path} does not match graph {graph.name!r}: {len(missing)} of "
        f"its ops have no device" + (f" (e.g. {sample})" if missing else "") +
        (f", and the file places {extra} ops the graph lacks" if extra else ""))
  index = {name: i for i, name in enumerate(topology.device_names)}
  unknown = sorted({d for d in devices.values() if d not in index})
  if unknown:
    raise errors.PlacementError(
        f"{loaded.path} places ops on {unknown[0]!r}, which topology "
        f"{topology.name!r} does not have")
  return np.array([index[devices[op]] for op in graph.node_names], np.int32)


def load(graph: op_graph.OpGraph, topology: topology_lib.Topology,
         path: str) -> np.ndarray:
  """`apply(read(path), graph, topology)`: a file's placement for `graph`."""
  return apply(read(path), graph, topology)
