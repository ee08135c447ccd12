"""Reads and writes the versioned op-graph JSON format (docs/OPGRAPH_FORMAT.md).

A document is the plain-dict form of an `OpGraph`. `from_document` is the one
place that checks a document, whether it came from a file or from the
Grappler bridge; `to_document` writes optional fields only when they differ
from their defaults, so import then export gives back the same document.
"""

import itertools
import json
import math
from typing import Any

import numpy as np

from grappler_bridge import limits

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.graph import op_graph

FORMAT = "tf-gdp-opgraph"
VERSION = 1
MAX_NODES = 5_000_000
MAX_EDGES = 50_000_000
# A cost above ~31 years per op is a unit or overflow bug, and sums of such
# values would turn step times into inf.
MAX_COST_US = 1e15
# Totals of bytes stay well inside int64 (the simulator adds them up).
MAX_TOTAL_BYTES = 1 << 62
# A loop that runs an op more often per step than this is a bad count.
MAX_EXECUTIONS = 1 << 40
# `metadata` is the one free-form field; deeper nesting than this is not data.
MAX_METADATA_DEPTH = 32

_NODE_FIELDS = frozenset({"name", "op", "cost", "output_bytes", "memory_bytes",
                          "temp_bytes", "colocation_group", "device_kinds",
                          "device", "output_shapes", "executions"})
_EDGE_FIELDS = frozenset({"src", "dst", "bytes", "output"})
_TOP_FIELDS = frozenset({"format", "version", "name", "nodes", "edges",
                         "fetches", "back_edges", "metadata"})
# Optional fields, where `null` means the same as leaving the field out (JSON
# writers in other languages often emit null for an unset field).
_OPTIONAL_TOP_FIELDS = frozenset({"fetches", "back_edges", "metadata"})
_OPTIONAL_NODE_FIELDS = frozenset({"temp_bytes", "colocation_group",
                                   "device_kinds", "device", "output_shapes",
                                   "executions"})
_OPTIONAL_EDGE_FIELDS = frozenset({"output"})


def load_json(path: str) -> op_graph.OpGraph:
  """Reads an op-graph JSON file; raises GraphFormatError / GraphLoadError.

  The file is refused by size before it is parsed (`grappler_bridge.limits`,
  env TF_GDP_MAX_INPUT_BYTES); nesting deeper than the interpreter's
  recursion limit is refused by the parser.
  """
  data = limits.read_input_file(path, error=errors.GraphLoadError)
  try:
    document = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
  except UnicodeDecodeError as e:
    raise errors.GraphLoadError(f"{path}: not UTF-8 text") from e
  except json.JSONDecodeError as e:
    raise errors.GraphLoadError(
        f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
  except RecursionError as e:
    raise errors.GraphLoadError(f"{path}: JSON nested too deeply") from e
  except ValueError as e:  # from _reject_constant
    raise errors.GraphLoadError(f"{path}: {e}") from e
  try:
    return from_document(document)
  except errors.GraphFormatError as e:
    raise errors.GraphFormatError(f"{path}: {e}") from e


def save_json(graph: op_graph.OpGraph, path: str) -> None:
  """Writes atomically (temp file + rename): a crash never leaves half a file."""
  fileio.write_atomically(path, json.dumps(to_document(graph), allow_nan=False,
                                         separators=(",", ":")))


def from_document(document: Any) -> op_graph.OpGraph:
  """Validates an op-graph document (dict) and builds the OpGraph."""
  _expect(isinstance(document, dict), "document must be a JSON object")
  document = _without_nulls(document, _OPTIONAL_TOP_FIELDS)
  _expect(document.get("format") == FORMAT,
          f"format must be {FORMAT!r}, got {document.get('format')!r}")
  version = document.get("version")
  _expect(version == VERSION and type(version) is int,  # pylint: disable=unidiomatic-typecheck
          f"unsupported version {version!r} (this reader knows version {VERSION})")
  unknown = set(document) - _TOP_FIELDS
  _expect(not unknown, f"unknown top-level field(s) {sorted(unknown)}")
  name = document.get("name")
  _expect(isinstance(name, str), "name must be a string")
  nodes = document.get("nodes")
  edges = document.get("edges")
  _expect(isinstance(nodes, list), "nodes must be a list")
  _expect(isinstance(edges, list), "edges must be a list")
  _expect(bool(nodes), "graph has no nodes")
  _expect(len(nodes) <= MAX_NODES, f"{len(nodes)} nodes is over the limit {MAX_NODES}")
  _expect(len(edges) <= MAX_EDGES, f"{len(edges)} edges is over the limit {MAX_EDGES}")

  read = _read_in_bulk(nodes, edges) or _read_one_by_one(nodes, edges)
  columns, costs, (src, dst, nbytes, outputs) = read

  back_edges = []
  _expect(isinstance(document.get("back_edges", []), list),
          "back_edges must be a list")
  for j, edge in enumerate(document.get("back_edges", [])):
    _expect(isinstance(edge, dict) and set(edge) == {"src", "dst"},
            f"back_edge {j} must be an object with src and dst")
    back_edges.append((_index(edge["src"], len(nodes), f"back_edge {j}: src"),
                       _index(edge["dst"], len(nodes), f"back_edge {j}: dst")))

  fetches = document.get("fetches", [])
  _expect(isinstance(fetches, list) and all(isinstance(f, str) for f in fetches),
          "fetches must be a list of node names")
  metadata = document.get("metadata", {})
  _expect(isinstance(metadata, dict), "metadata must be an object")
  _check_depth(metadata, "metadata", MAX_METADATA_DEPTH)
  _check_totals(columns, nbytes)

  return op_graph.OpGraph.build(
      name=name, node_names=columns["names"], op_types=columns["ops"],
      costs=costs, output_bytes=columns["output_bytes"],
      memory_bytes=columns["memory_bytes"], temp_bytes=columns["temp_bytes"],
      edge_src=src, edge_dst=dst, edge_bytes=nbytes, edge_output=outputs,
      colocation_groups=columns["groups"], device_kinds=columns["kinds"],
      pinned_devices=columns["devices"], output_shapes=columns["shapes"],
      back_edges=back_edges, fetches=fetches, metadata=metadata,
      executions=columns["executions"])


def _read_one_by_one(nodes: list, edges: list):
  """(node columns, costs per kind, edge columns), checked item by item.

  Raises GraphFormatError naming the first bad node or edge, in document
  order.
  """
  kinds = None
  columns = {key: [] for key in ("names", "ops", "output_bytes", "memory_bytes",
                                 "temp_bytes", "groups", "kinds", "devices",
                                 "shapes", "executions")}
  costs = {}
  for i, node in enumerate(nodes):
    where = f"node {i}"
    _expect(isinstance(node, dict), f"{where} must be an object")
    node = _without_nulls(node, _OPTIONAL_NODE_FIELDS)
    unknown = set(node) - _NODE_FIELDS
    _expect(not unknown, f"{where}: unknown field(s) {sorted(unknown)}")
    columns["names"].append(_string(node, "name", where))
    where = f"node {i} ({node['name']!r})"
    columns["ops"].append(_string(node, "op", where))
    cost = node.get("cost")
    _expect(isinstance(cost, dict) and cost, f"{where}: cost must be a non-empty object")
    if kinds is None:
      kinds = sorted(cost)
      costs = {kind: [] for kind in kinds}
    _expect(sorted(cost) == kinds,
            f"{where}: cost kinds {sorted(cost)} differ from node 0's {kinds}")
    for kind in kinds:
      costs[kind].append(_number(cost[kind], f"{where}: cost[{kind}]"))
    for key in ("output_bytes", "memory_bytes"):
      columns[key].append(_count(node.get(key), f"{where}: {key}"))
    columns["temp_bytes"].append(_count(node.get("temp_bytes", 0), f"{where}: temp_bytes"))
    executions = node.get("executions", 1)
    _expect(_is_int(executions) and 1 <= executions < MAX_EXECUTIONS,
            f"{where}: executions must be an integer >= 1")
    columns["executions"].append(executions)
    columns["groups"].append(_optional_string(node, "colocation_group", where))
    columns["devices"].append(_optional_string(node, "device", where))
    allowed = node.get("device_kinds")
    if allowed is not None:
      _expect(isinstance(allowed, list) and all(isinstance(k, str) for k in allowed),
              f"{where}: device_kinds must be a list of strings")
      allowed = tuple(allowed)
    columns["kinds"].append(allowed)
    columns["shapes"].append(_shapes(node.get("output_shapes"), where))

  src, dst, nbytes, outputs = [], [], [], []
  for j, edge in enumerate(edges):
    where = f"edge {j}"
    _expect(isinstance(edge, dict), f"{where} must be an object")
    edge = _without_nulls(edge, _OPTIONAL_EDGE_FIELDS)
    unknown = set(edge) - _EDGE_FIELDS
    _expect(not unknown, f"{where}: unknown field(s) {sorted(unknown)}")
    src.append(_index(edge.get("src"), len(nodes), f"{where}: src"))
    dst.append(_index(edge.get("dst"), len(nodes), f"{where}: dst"))
    nbytes.append(_count(edge.get("bytes"), f"{where}: bytes"))
    output = edge.get("output", 0)
    _expect(_is_int(output) and output >= op_graph.CONTROL_OUTPUT,
            f"{where}: output must be an integer >= -1")
    outputs.append(output)
  return columns, costs, (src, dst, nbytes, outputs)


def _read_in_bulk(nodes: list, edges: list):
  """What `_read_one_by_one` reads, read field by field over all items.

  The common case, a well-formed document, costs a few passes over each
  field instead of a dozen checks per node. Returns None when anything is
  off (a bad value, a null where a value belongs, an unusual type): the
  item-by-item reader then reads the document and names the problem. It
  accepts nothing that reader refuses, and reads the same columns.
  """
  try:
    return _bulk_columns(nodes, edges)
  except (TypeError, ValueError, OverflowError):
    return None


def _bulk_columns(nodes: list, edges: list):
  if not (_types(nodes) == {dict} and _types(edges) <= {dict}):
    return None
  if not (set(itertools.chain.from_iterable(nodes)) <= _NODE_FIELDS and
          set(itertools.chain.from_iterable(edges)) <= _EDGE_FIELDS):
    return None
  columns = {key: [node.get(field) for node in nodes] for key, field in (
      ("names", "name"), ("ops", "op"), ("output_bytes", "output_bytes"),
      ("memory_bytes", "memory_bytes"), ("temp_bytes", "temp_bytes"),
      ("groups", "colocation_group"), ("kinds", "device_kinds"),
      ("devices", "device"), ("shapes", "output_shapes"),
      ("executions", "executions"))}
  columns["temp_bytes"] = [0 if t is None else t
                           for t in columns["temp_bytes"]]
  columns["executions"] = [1 if e is None else e
                           for e in columns["executions"]]
  if not (all(_types(columns[key]) == {str} and "" not in columns[key]
              for key in ("names", "ops")) and
          all(_types(columns[key]) <= {str, type(None)} and
              "" not in columns[key] for key in ("groups", "devices")) and
          all(_ints_in(columns[key], 0, 1 << 62)
              for key in ("output_bytes", "memory_bytes", "temp_bytes")) and
          _ints_in(columns["executions"], 1, MAX_EXECUTIONS)):
    return None
  costs = _bulk_costs([node.get("cost") for node in nodes])
  allowed = [kinds for kinds in columns["kinds"] if kinds is not None]
  if costs is None or not (
      _types(allowed) <= {list} and
      _types(itertools.chain.from_iterable(allowed)) <= {str}):
    return None
  columns["kinds"] = [None if kinds is None else tuple(kinds)
                      for kinds in columns["kinds"]]
  shapes = [value for value in columns["shapes"] if value is not None]
  if not _types(shapes) <= {list}:
    return None
  shapes = list(itertools.chain.from_iterable(shapes))
  if not (_types(shapes) <= {list, type(None)} and _ints_in(
      list(itertools.chain.from_iterable(s for s in shapes if s is not None)),
      -1, MAX_TOTAL_BYTES)):
    return None
  columns["shapes"] = [
      None if value is None else
      tuple(None if shape is None else tuple(shape) for shape in value)
      for value in columns["shapes"]]
  src, dst, nbytes, outputs = ([edge.get(field) for edge in edges]
                               for field in ("src", "dst", "bytes", "output"))
  outputs = [0 if output is None else output for output in outputs]
  if not (_ints_in(src, 0, len(nodes)) and _ints_in(dst, 0, len(nodes)) and
          _ints_in(nbytes, 0, 1 << 62) and
          _ints_in(outputs, op_graph.CONTROL_OUTPUT, math.inf)):
    return None
  return columns, costs, (src, dst, nbytes, outputs)


def _bulk_costs(costs: list):
  """Cost columns per kind, as `_number` reads them; None if any is off."""
  if not (_types(costs) == {dict} and costs[0]):
    return None
  keys = costs[0].keys()
  if any(cost.keys() != keys for cost in costs):
    return None
  columns = {}
  for kind in sorted(keys):
    values = [cost[kind] for cost in costs]
    if not _types(values) <= {int, float}:
      return None
    values = [float(value) for value in values]
    array = np.asarray(values)
    if not (np.isfinite(array).all() and array.min() >= 0 and
            array.max() <= MAX_COST_US):
      return None
    columns[kind] = values
  return columns


def _types(values) -> set:
  return set(map(type, values))


def _ints_in(values: list, low, high) -> bool:
  """Whether every value is an int (not a bool) in [low, high)."""
  return _types(values) <= {int} and (
      not values or (min(values) >= low and max(values) < high))


def to_document(graph: op_graph.OpGraph) -> dict:
  """The canonical document of `graph` (optional fields only when set)."""
  nodes = []
  kinds = graph.kinds
  cost_columns = [graph.costs[k].tolist() for k in kinds]
  output_bytes = graph.output_bytes.tolist()
  memory_bytes = graph.memory_bytes.tolist()
  temp_bytes = graph.temp_bytes.tolist()
  executions = graph.executions.tolist()
  for i, name in enumerate(graph.node_names):
    node = {"name": name, "op": graph.op_types[i],
            "cost": {k: cost_columns[c][i] for c, k in enumerate(kinds)},
            "output_bytes": output_bytes[i], "memory_bytes": memory_bytes[i]}
    if temp_bytes[i]:
      node["temp_bytes"] = temp_bytes[i]
    if executions[i] > 1:
      node["executions"] = executions[i]
    if graph.colocation_groups[i] is not None:
      node["colocation_group"] = graph.colocation_groups[i]
    if graph.device_kinds[i] is not None:
      node["device_kinds"] = list(graph.device_kinds[i])
    if graph.pinned_devices[i] is not None:
      node["device"] = graph.pinned_devices[i]
    if graph.output_shapes[i] is not None:
      node["output_shapes"] = [None if s is None else list(s)
                               for s in graph.output_shapes[i]]
    nodes.append(node)
  edges = []
  for s, d, b, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(),
                        graph.edge_bytes.tolist(), graph.edge_output.tolist()):
    edge = {"src": s, "dst": d, "bytes": b}
    if o != 0:
      edge["output"] = o
    edges.append(edge)
  document = {"format": FORMAT, "version": VERSION, "name": graph.name,
              "nodes": nodes, "edges": edges}
  if graph.fetches:
    document["fetches"] = list(graph.fetches)
  if graph.back_edges.shape[0]:
    document["back_edges"] = [{"src": s, "dst": d}
                              for s, d in graph.back_edges.tolist()]
  if graph.metadata:
    document["metadata"] = graph.metadata
  return document


def _expect(condition: bool, message: str) -> None:
  if not condition:
    raise errors.GraphFormatError(message)


def _without_nulls(item: dict, optional: frozenset) -> dict:
  """`item` without the optional fields that are null (null = absent)."""
  if not any(item.get(key, 0) is None for key in optional):
    return item
  return {k: v for k, v in item.items() if not (v is None and k in optional)}


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _string(node: dict, key: str, where: str) -> str:
  value = node.get(key)
  _expect(isinstance(value, str) and value != "", f"{where}: {key} must be a non-empty string")
  return value


def _optional_string(node: dict, key: str, where: str):
  if key not in node:
    return None
  return _string(node, key, where)


def _number(value, where: str) -> float:
  _expect(isinstance(value, (int, float)) and not isinstance(value, bool),
          f"{where} must be a number")
  try:
    value = float(value)
  except OverflowError:  # an int with hundreds of digits
    value = math.inf
  _expect(math.isfinite(value) and value >= 0,
          f"{where} is {value!r}: must be finite and >= 0")
  _expect(value <= MAX_COST_US,
          f"{where} is {value!r} us: over the limit of {MAX_COST_US:g} us")
  return value


def _count(value, where: str) -> int:
  _expect(_is_int(value) and value >= 0, f"{where} must be an integer >= 0, got {value!r}")
  _expect(value < 1 << 62, f"{where} is {value}: too large")
  return value


def _index(value, n: int, where: str) -> int:
  _expect(_is_int(value) and 0 <= value < n,
          f"{where} is {value!r}: not a node index (graph has {n} nodes)")
  return value


def _shapes(value, where: str):
  if value is None:
    return None
  _expect(isinstance(value, list), f"{where}: output_shapes must be a list")
  shapes = []
  for shape in value:
    if shape is None:
      shapes.append(None)
      continue
    _expect(isinstance(shape, list) and all(
        _is_int(d) and -1 <= d < MAX_TOTAL_BYTES for d in shape),
            f"{where}: each output shape must be a list of integers in "
            "[-1, 2**62) or null")
    shapes.append(tuple(shape))
  return tuple(shapes)


def _check_depth(value, where: str, limit: int) -> None:
  """GraphFormatError if `value` nests containers deeper than `limit`."""
  stack = [(value, 1)]
  while stack:
    item, depth = stack.pop()
    if isinstance(item, (dict, list)):
      _expect(depth <= limit, f"{where} is nested deeper than {limit} levels")
      children = item.values() if isinstance(item, dict) else item
      stack.extend((child, depth + 1) for child in children)


def _check_totals(columns: dict, edge_bytes: list) -> None:
  """Sums of byte counts must fit comfortably in the simulator's int64."""
  for key in ("output_bytes", "memory_bytes", "temp_bytes"):
    total = sum(columns[key])
    _expect(total < MAX_TOTAL_BYTES,
            f"{key} add up to {total} bytes: over the limit of 2**62")
  total = sum(edge_bytes)
  _expect(total < MAX_TOTAL_BYTES,
          f"edge bytes add up to {total} bytes: over the limit of 2**62")


def _reject_constant(name: str):
  raise ValueError(f"JSON contains {name}, which is not a valid number here")
