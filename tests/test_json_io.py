"""The op-graph JSON format: exact round-trip and one-line rejections."""

import copy
import json

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from tf_gdp import errors
from tf_gdp import graph as gdp_graph

_KINDS = ("CPU", "GPU")


@st.composite
def canonical_documents(draw):
  """Random valid documents in canonical form (optional fields only when set)."""
  n = draw(st.integers(1, 12))
  kinds = draw(st.sampled_from([("GPU",), ("CPU", "GPU")]))
  costs = st.floats(0, 1e7, allow_nan=False, allow_infinity=False)
  nodes = []
  for i in range(n):
    node = {"name": f"scope/op_{i}", "op": draw(st.sampled_from(["MatMul", "Relu", "Const"])),
            "cost": {k: draw(costs) for k in kinds},
            "output_bytes": draw(st.integers(0, 2**40)),
            "memory_bytes": draw(st.integers(0, 2**34))}
    if draw(st.booleans()):
      node["temp_bytes"] = draw(st.integers(1, 2**30))
    if draw(st.booleans()):
      node["colocation_group"] = f"group_{draw(st.integers(0, 2))}"
    if draw(st.booleans()):
      node["device_kinds"] = list(draw(st.sets(st.sampled_from(kinds), min_size=1)))
    if draw(st.booleans()):
      node["device"] = "/job:localhost/replica:0/task:0/device:CPU:0"
    if draw(st.booleans()):
      node["output_shapes"] = draw(st.lists(
          st.one_of(st.none(), st.lists(st.integers(-1, 4096), max_size=4)), max_size=3))
    nodes.append(node)
  edges = []
  # Edges only go from lower to higher index, so the graph is a DAG.
  for _ in range(draw(st.integers(0, 3 * n))):
    src = draw(st.integers(0, n - 1))
    dst = draw(st.integers(0, n - 1))
    if src == dst:
      continue
    src, dst = min(src, dst), max(src, dst)
    edge = {"src": src, "dst": dst, "bytes": draw(st.integers(0, 2**32))}
    output = draw(st.integers(-1, 3))
    if output != 0:
      edge["output"] = output
    edges.append(edge)
  document = {"format": "tf-gdp-opgraph", "version": 1, "name": draw(st.text(max_size=8)),
              "nodes": nodes, "edges": edges}
  if draw(st.booleans()):
    document["fetches"] = [nodes[-1]["name"]]
  if n > 1 and draw(st.booleans()):
    document["back_edges"] = [{"src": n - 1, "dst": 0}]
  if draw(st.booleans()):
    document["metadata"] = {"cost_source": {k: "roofline:test" for k in kinds}}
  return document


@settings(max_examples=150, deadline=None)
@given(canonical_documents())
def test_document_round_trips_exactly(document):
  graph = gdp_graph.from_document(document)
  assert gdp_graph.to_document(graph) == document


@settings(max_examples=25, deadline=None)
@given(canonical_documents())
def test_file_round_trip_is_byte_identical(tmp_path_factory, document):
  path = str(tmp_path_factory.mktemp("rt") / "g.json")
  gdp_graph.save_json(gdp_graph.from_document(document), path)
  with open(path, "rb") as f:
    first = f.read()
  gdp_graph.save_json(gdp_graph.load_json(path), path)
  with open(path, "rb") as f:
    assert f.read() == first
  assert json.loads(first) == document


def _doc():
  return {"format": "tf-gdp-opgraph", "version": 1, "name": "g",
          "nodes": [{"name": "a", "op": "Const", "cost": {"GPU": 0.0},
                     "output_bytes": 4, "memory_bytes": 0},
                    {"name": "b", "op": "Relu", "cost": {"GPU": 3.5},
                     "output_bytes": 4, "memory_bytes": 0},
                    {"name": "c", "op": "Relu", "cost": {"GPU": 1.0},
                     "output_bytes": 4, "memory_bytes": 0}],
          "edges": [{"src": 0, "dst": 1, "bytes": 4}, {"src": 1, "dst": 2, "bytes": 4}]}


def _mutated(path, value):
  document = _doc()
  target = document
  for key in path[:-1]:
    target = target[key]
  if value is _DELETE:
    del target[path[-1]]
  else:
    target[path[-1]] = value
  return document


_DELETE = object()


@pytest.mark.parametrize("path,value,message", [
    (("version",), 2, "unsupported version 2"),
    (("version",), "1", "unsupported version"),
    (("format",), "onnx", "format must be"),
    (("edges", 1, "dst"), 0, "cycle"),
    (("edges", 0, "dst"), 7, "edge 0: dst is 7: not a node index"),
    (("edges", 0, "dst"), 0, "self-loop"),
    (("nodes", 1, "cost", "GPU"), -1.0, "must be finite and >= 0"),
    (("nodes", 1, "name"), "a", "duplicate node name 'a'"),
    (("nodes", 0, "output_bytes"), 1.5, "output_bytes must be an integer"),
    (("nodes", 0, "output_bytes"), -4, "output_bytes must be an integer >= 0"),
    (("nodes", 0, "cost"), {"GPU": 1.0, "CPU": 2.0}, "cost kinds"),
    (("nodes", 0, "device_kinds"), ["TPU"], "device_kinds"),
    (("nodes", 0, "extra"), 1, "unknown field"),
    (("nodes",), [], "graph has no nodes"),
    (("nodes", 2, "op"), _DELETE, "op must be a non-empty string"),
    (("fetches",), ["zz"], "fetch 'zz' is not a node"),
    (("nodes", 0, "memory_bytes"), None, "memory_bytes must be an integer"),
    (("edges", 0, "bytes"), None, "bytes must be an integer"),
    (("name",), None, "name must be a string"),
    (("nodes", 1, "executions"), 0, "executions must be an integer >= 1"),
    (("nodes", 1, "executions"), 2.5, "executions must be an integer >= 1"),
    (("nodes", 1, "executions"), "12", "executions must be an integer >= 1"),
])
def test_bad_documents_raise_one_line(path, value, message):
  with pytest.raises(errors.GraphFormatError, match=message) as info:
    gdp_graph.from_document(_mutated(path, value))
  assert "\n" not in str(info.value)


@pytest.mark.parametrize("text,message", [
    ('{"format": "tf-gdp-opgraph", "version": 1, "nodes": [', "invalid JSON"),
    ("", "file is empty"),
    ("[" * 100000 + "]" * 100000, "nested too deeply|invalid JSON"),
    ('{"a": NaN}', "NaN"),
])
def test_bad_json_files_raise(tmp_path, text, message):
  path = tmp_path / "bad.json"
  path.write_text(text)
  with pytest.raises(errors.InputError, match=message):
    gdp_graph.load_json(str(path))


def test_missing_file_raises(tmp_path):
  with pytest.raises(errors.InputError, match="no such file"):
    gdp_graph.load_json(str(tmp_path / "nope.json"))


def test_cycle_error_names_a_node_on_the_cycle():
  document = copy.deepcopy(_doc())
  document["edges"].append({"src": 2, "dst": 1, "bytes": 0, "output": -1})
  with pytest.raises(errors.GraphFormatError, match="through 'b'|through 'c'"):
    gdp_graph.from_document(document)


_OPTIONAL = {"top": ("fetches", "back_edges", "metadata"),
             "node": ("temp_bytes", "colocation_group", "device_kinds", "device",
                      "output_shapes"),
             "edge": ("output",)}


@settings(max_examples=60, deadline=None)
@given(canonical_documents(), st.data())
def test_null_optional_fields_read_as_absent(document, data):
  with_nulls = copy.deepcopy(document)
  for key in _OPTIONAL["top"]:
    if key not in with_nulls and data.draw(st.booleans()):
      with_nulls[key] = None
  for kind, items in (("node", with_nulls["nodes"]), ("edge", with_nulls["edges"])):
    for item in items:
      for key in _OPTIONAL[kind]:
        if key not in item and data.draw(st.booleans()):
          item[key] = None
  graph = gdp_graph.from_document(with_nulls)
  assert gdp_graph.to_document(graph) == document


_ODD_VALUES = (None, -1, True, 0, 1.5, "x", "", [], {}, 2**63, 2**62, 10**400,
               float("nan"), float("inf"), 1e300, [[1, "a"]], [None], [[-2]],
               [[True]], ["GPU", 3], ["GPU"], "GPU")


@settings(max_examples=300, deadline=None)
@given(canonical_documents(), st.data())
def test_bulk_reading_agrees_with_item_by_item_reading(document, data):
  """The fast reader refuses (None) whatever the checking one refuses, and
  otherwise reads the same columns, value types included."""
  # pylint: disable=protected-access
  from tf_gdp.graph import json_io  # pylint: disable=g-import-not-at-top
  document = copy.deepcopy(document)
  for _ in range(data.draw(st.integers(0, 3))):
    items = document["nodes"] + document["edges"]
    item = data.draw(st.sampled_from(items))
    if isinstance(item.get("cost"), dict) and data.draw(st.booleans()):
      item = item["cost"]
    key = data.draw(st.sampled_from(sorted(
        set(item) | {"extra", "temp_bytes", "output", "device_kinds"})))
    if data.draw(st.integers(0, 9)) == 0:
      item.pop(key, None)
    else:
      item[key] = copy.deepcopy(data.draw(st.sampled_from(_ODD_VALUES)))
  nodes, edges = document["nodes"], document["edges"]
  try:
    checked = json_io._read_one_by_one(nodes, edges)
  except errors.GraphFormatError:
    checked = None
  bulk = json_io._read_in_bulk(nodes, edges)
  if checked is None:
    assert bulk is None
  elif bulk is not None:
    assert bulk == checked
    assert repr(bulk) == repr(checked)  # ints stay ints, floats floats


def test_executions_round_trip_and_default_to_one():
  document = _mutated(("nodes", 1, "executions"), 12)
  graph = gdp_graph.from_document(document)
  assert graph.executions.tolist()[:3] == [1, 12, 1]
  again = gdp_graph.to_document(graph)
  assert again["nodes"][1]["executions"] == 12
  assert "executions" not in again["nodes"][0]
