"""Fuzzed op-graph JSON and GraphDef bytes: typed one-line errors, no hangs.

Starting from valid inputs (an op-graph document from `json_io.to_document`
with every optional field, and a real serialized GraphDef), hypothesis
mutates values, keys, structure and bytes. Every loader call must either
succeed or raise an `InputError` subclass with a one-line message; anything
else (a KeyError, an OverflowError, a crash) is a bug. Each call runs under a
time guard, so a hang fails the test instead of stalling the suite.
"""

import json
import os
import tempfile
import threading

from hypothesis import given
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp.bench import reliability_case
from tf_gdp.bench import reliability_input_cases
from tf_gdp.graph import json_io

_CALL_LIMIT_S = 30.0
_SETTINGS = dict(deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow,
                                        HealthCheck.data_too_large])


def _guarded(function, *args):
  """function(*args) in a thread; fails the test if it runs over the limit."""
  outcome = {}

  def call():
    try:
      outcome["value"] = function(*args)
    except BaseException as e:  # pylint: disable=broad-except
      outcome["error"] = e

  thread = threading.Thread(target=call, daemon=True)
  thread.start()
  thread.join(_CALL_LIMIT_S)
  if thread.is_alive():
    pytest.fail(f"{function.__name__} hung for {_CALL_LIMIT_S} s")
  return outcome


def _assert_clean(outcome):
  error = outcome.get("error")
  if error is None:
    return
  if not isinstance(error, errors.InputError):
    raise AssertionError(
        f"untyped {type(error).__name__}: {error}") from error
  assert str(error).strip() and "\n" not in str(error).strip(), repr(error)


def _rich_document() -> dict:
  """A valid document that uses every optional field."""
  document = reliability_case.tiny_document()
  a, b, c = document["nodes"]
  a.update(colocation_group="g", temp_bytes=64,
           output_shapes=[[4, 4], None])
  b.update(colocation_group="g", device_kinds=["GPU"])
  c.update(device="/device:GPU:0", output_shapes=[[-1, 8]])
  document["edges"].append({"src": 0, "dst": 2, "bytes": 0, "output": -1})
  document.update(fetches=["c"], back_edges=[{"src": 2, "dst": 0}],
                  metadata={"producer": "fuzz", "knobs": {"batch": 8}})
  return json_io.to_document(json_io.from_document(document))


_BASE_DOCUMENT = _rich_document()
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) |
    st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8) |
    st.sampled_from([0, -1, 1 << 62, 1 << 63, 10 ** 30, "", "a", "GPU"]),
    lambda inner: st.lists(inner, max_size=3) |
    st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)
_KEYS = st.sampled_from(["name", "op", "cost", "GPU", "output_bytes",
                         "memory_bytes", "temp_bytes", "src", "dst", "bytes",
                         "output", "nodes", "edges", "format", "version",
                         "fetches", "back_edges", "metadata", "device",
                         "device_kinds", "output_shapes", "colocation_group",
                         "extra"])


def _containers(value, path=()):
  """(path, container) for every dict and list inside `value`."""
  if isinstance(value, (dict, list)):
    yield path, value
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, child in items:
      yield from _containers(child, path + (key,))


@st.composite
def mutated_documents(draw):
  document = json.loads(json.dumps(_BASE_DOCUMENT))  # a deep copy
  for _ in range(draw(st.integers(1, 4))):
    containers = list(_containers(document))
    _, container = draw(st.sampled_from(containers))
    action = draw(st.sampled_from(["replace", "delete", "insert",
                                   "duplicate"]))
    if isinstance(container, dict):
      keys = sorted(container)
      if action == "insert" or not keys:
        container[draw(_KEYS)] = draw(_JSON_VALUES)
        continue
      key = draw(st.sampled_from(keys))
      if action == "delete":
        del container[key]
      elif action == "duplicate":
        container[draw(_KEYS)] = json.loads(json.dumps(container[key]))
      else:
        container[key] = draw(_JSON_VALUES)
    else:
      if action == "insert" or not container:
        container.insert(draw(st.integers(0, len(container))),
                         draw(_JSON_VALUES))
        continue
      index = draw(st.integers(0, len(container) - 1))
      if action == "delete":
        del container[index]
      elif action == "duplicate":
        container.append(json.loads(json.dumps(container[index])))
      else:
        container[index] = draw(_JSON_VALUES)
  return document


@settings(max_examples=200, **_SETTINGS)
@given(mutated_documents())
def test_mutated_documents_load_or_raise_typed_errors(document):
  _assert_clean(_guarded(json_io.from_document, document))


def _mutate_bytes(draw, data: bytes) -> bytes:
  data = bytearray(data)
  for _ in range(draw(st.integers(1, 4))):
    action = draw(st.sampled_from(["flip", "truncate", "insert", "delete",
                                   "copy"]))
    if not data:
      data = bytearray(draw(st.binary(min_size=1, max_size=8)))
      continue
    at = draw(st.integers(0, len(data) - 1))
    if action == "flip":
      data[at] ^= 1 << draw(st.integers(0, 7))
    elif action == "truncate":
      del data[at:]
    elif action == "insert":
      data[at:at] = draw(st.binary(min_size=1, max_size=8))
    elif action == "delete":
      del data[at:at + draw(st.integers(1, 8))]
    else:  # repeat a slice: duplicated nodes and fields
      data[at:at] = data[at:at + draw(st.integers(1, 64))]
  return bytes(data)


@st.composite
def mutated_json_text(draw):
  text = json.dumps(_BASE_DOCUMENT).encode("utf-8")
  return _mutate_bytes(draw, text)


@settings(max_examples=150, **_SETTINGS)
@given(mutated_json_text())
def test_mutated_json_files_load_or_raise_typed_errors(data):
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "graph.json")
    with open(path, "wb") as f:
      f.write(data)
    _assert_clean(_guarded(json_io.load_json, path))


_BASE_GRAPH_DEF = reliability_input_cases.small_graph_def_bytes()


@st.composite
def mutated_graph_defs(draw):
  return _mutate_bytes(draw, _BASE_GRAPH_DEF)


def test_unmutated_graph_def_loads():
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "graph.pb")
    with open(path, "wb") as f:
      f.write(_BASE_GRAPH_DEF)
    assert graph_specs.load(path).graph.num_nodes >= 3


@settings(max_examples=200, **_SETTINGS)
@given(mutated_graph_defs())
def test_mutated_graph_defs_load_or_raise_typed_errors(data):
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "graph.pb")
    with open(path, "wb") as f:
      f.write(data)
    _assert_clean(_guarded(graph_specs.load, path))


_OP_TYPES = st.sampled_from(["Const", "Identity", "MatMul", "NoOp", "Relu",
                             "AddN", "Placeholder", "VarHandleOp", "While",
                             "PartitionedCall", "NextIteration", "Merge",
                             "Bonst", ""])
_NAMES = st.sampled_from(["x", "mm", "relu", "x:1", "^x", "mm:7", "zz", "",
                          "relu:0", "^relu"])


@st.composite
def restructured_graph_defs(draw):
  """Parseable GraphDefs with wrong ops, inputs, attrs, names and devices."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  graph_def = tf.compat.v1.GraphDef()
  graph_def.ParseFromString(_BASE_GRAPH_DEF)
  for _ in range(draw(st.integers(1, 4))):
    nodes = graph_def.node
    action = draw(st.sampled_from(["op", "input", "drop_attr", "dtype",
                                   "duplicate", "rename", "device", "shape",
                                   "clear_inputs"]))
    if not nodes:
      break
    node = nodes[draw(st.integers(0, len(nodes) - 1))]
    if action == "op":
      node.op = draw(_OP_TYPES)
    elif action == "input":
      node.input.append(draw(_NAMES))
    elif action == "drop_attr" and node.attr:
      del node.attr[draw(st.sampled_from(sorted(node.attr)))]
    elif action == "dtype":
      node.attr[draw(st.sampled_from(["T", "dtype"]))].type = draw(
          st.integers(0, 30))
    elif action == "duplicate":
      nodes.add().CopyFrom(node)
    elif action == "rename":
      node.name = draw(_NAMES)
    elif action == "device":
      node.device = draw(st.sampled_from(
          ["/device:GPU:9", "/job:nowhere/task:3", "garbage", "/cpu:0"]))
    elif action == "shape" and "value" in node.attr:
      dims = node.attr["value"].tensor.tensor_shape.dim
      if dims:
        dims[0].size = draw(st.sampled_from([-7, 0, 1 << 40, 3]))
    elif action == "clear_inputs":
      del node.input[:]
  return graph_def.SerializeToString()


@settings(max_examples=100, **_SETTINGS)
@given(restructured_graph_defs())
def test_restructured_graph_defs_load_or_raise_typed_errors(data):
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "graph.pb")
    with open(path, "wb") as f:
      f.write(data)
    _assert_clean(_guarded(graph_specs.load, path))
