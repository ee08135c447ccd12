"""Human-expert placements of the zoo's models: rules by name scope.

The device-placement papers compare against the placement a practitioner
would write by hand. Their conventions, as rules over the zoo's name scopes:

* GNMT and RNNLM: one LSTM layer per GPU. This is the model parallelism of
  Sutskever et al. (2014) and GNMT (Wu et al., 2016, sec. 3: one model
  replica "partitioned 8-ways", encoder layer i and decoder layer i on GPU
  i; the encoder finishes before the decoder starts, so the two share a GPU
  without waiting on each other). The expert baseline of Mirhoseini et al.
  (2017, sec. 4, "expert-designed" placements), reused by HDP (2018) and
  GDP (2019), adds: the embedding with the first LSTM layer, the attention
  and softmax layers with the final LSTM layer.
* Transformer-XL and WaveNet: GDP reports expert placements for them
  without spelling them out; we use the pipeline convention of layer-wise
  model parallelism (as in GPipe, Huang et al., 2019): the layers in order
  (for WaveNet the dilated layers of all stacks, so whole stacks per GPU
  when the stacks divide evenly) cut into as many contiguous, even blocks
  as there are GPUs; embedding / input convolution with the first block,
  softmax / output layers and loss with the last.
* Inception-v3 and AmoebaNet: the whole model on one GPU, as Mirhoseini et
  al. (2017) place Inception-v3 (batch 32); AmoebaNet is the same kind of
  conv net and at the zoo's default size its step fits one 16 GB GPU, so
  splitting its chain of cells would only add transfers.

A rule maps an op's name to a *unit* (a layer index; 0 for single-GPU
models); units map to GPUs one to one while there are at least as many GPUs
as units (GPU k holds layer k; extra GPUs stay idle, as an expert's would),
else in contiguous even blocks (unit k of U on GPU floor(k * G / U)); with
no GPU in the topology, all its devices stand in for the GPUs. Backward ops
(`gradient_tape/<scope>/...`) follow their forward scope, and each
variable's clipping and update ops sit under the variable's scope, so they
follow its layer. Ops no rule names (the tape's top-level `AddN_<n>`
gradient sums, global-norm clipping, the Adam step counter, inputs) take the
majority device of their data producers, else of their consumers, else the
first GPU. Then the graph's hard constraints are enforced: every colocation
group goes to the device most of its members chose, among the devices all
its members may use (allowed device kinds, pins), so e.g. CPU-only ops go
to the CPU. Names, not node ids, drive the rules, so a re-traced graph gets
the same placement.
"""

import dataclasses
import re
from typing import Callable, Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

_GRADIENT_PREFIX = "gradient_tape/"


@dataclasses.dataclass(frozen=True)
class _Rule:
  """How one model family's names map to units.

  `unit_of(name, counts)` returns a unit or None; `counts` holds what the
  graph's names say about its size (see `_count`), so rules never need the
  builder's defaults.
  """
  description: str
  unit_of: Callable[[str, dict], Optional[int]]
  num_units: Callable[[dict], int]


_LAYER = re.compile(r"^(?:encoder|decoder|lstm)/layer_(\d+)/")
_TXL_LAYER = re.compile(r"^layer_(\d+)/")
_WAVENET_LAYER = re.compile(r"^stack_(\d+)/layer_(\d+)/")


def _prefix_rule(layer_pattern, first: tuple, last: tuple):
  """Layer scopes by number; `first` / `last` top scopes with the end layers."""

  def unit_of(name, counts):
    match = layer_pattern.match(name)
    if match:
      return int(match.group(1))
    top = name.split("/", 1)[0]
    if "/" in name and top in first:
      return 0
    if "/" in name and top in last:
      return counts["layers"] - 1
    return None

  return unit_of


def _wavenet_unit(name, counts):
  match = _WAVENET_LAYER.match(name)
  if match:
    return int(match.group(1)) * counts["layers_per_stack"] + int(
        match.group(2))
  top = name.split("/", 1)[0]
  if "/" in name and top == "input":
    return 0
  if "/" in name and top in ("output", "loss"):
    return counts["stacks"] * counts["layers_per_stack"] - 1
  return None


def _single(name, counts):
  del name, counts
  return 0


RULES = {
    "gnmt": _Rule(
        "encoder and decoder layer i on GPU i; embeddings with layer 0; "
        "attention, softmax and loss with the last layer",
        _prefix_rule(_LAYER, ("embedding",), ("attention", "softmax", "loss")),
        lambda c: c["layers"]),
    "rnnlm": _Rule(
        "LSTM layer i on GPU i; embedding with layer 0; softmax and loss "
        "with the last layer",
        _prefix_rule(_LAYER, ("embedding",), ("softmax", "loss")),
        lambda c: c["layers"]),
    "transformer_xl": _Rule(
        "layers in contiguous even blocks over the GPUs; embedding and "
        "positions with the first, softmax and loss with the last",
        _prefix_rule(_TXL_LAYER, ("embedding", "positions"),
                     ("softmax", "loss")),
        lambda c: c["layers"]),
    "wavenet": _Rule(
        "dilated layers of all stacks, in order, in contiguous even blocks "
        "over the GPUs; input conv with the first, output layers and loss "
        "with the last",
        _wavenet_unit,
        lambda c: c["stacks"] * c["layers_per_stack"]),
    "inception_v3": _Rule("everything on one GPU", _single, lambda c: 1),
    "amoebanet": _Rule("everything on one GPU", _single, lambda c: 1),
}


def describe(model: str) -> str:
  """One line: the expert rule of zoo model `model`."""
  return RULES[_family(model)].description


def expert_units(graph: op_graph.OpGraph):
  """(int32[num_nodes] unit per node, -1 where no rule applies; #units)."""
  model = _model_of(graph)
  family = _family(model)
  rule = RULES[family]
  names = [_forward_name(n) for n in graph.node_names]
  counts = _count(family, names, graph)
  units = np.array([_unit_or_none(rule.unit_of(n, counts)) for n in names],
                   np.int32)
  return units, rule.num_units(counts)


def expert_placement(graph: op_graph.OpGraph,
                     topology: topology_lib.Topology) -> np.ndarray:
  """int32[num_nodes] device index per node, satisfying the constraints.

  Raises InputError for graphs that are not zoo models (no
  `metadata["model"]`, or names that do not fit the model's scopes), and
  PlacementError if a colocation group has no device all members may use.
  """
  units, num_units = expert_units(graph)
  targets = topology.devices_of_kind("GPU") or list(
      range(topology.num_devices))
  placement = np.full(graph.num_nodes, -1, np.int32)
  scoped = units >= 0
  placement[scoped] = np.asarray(targets, np.int32)[
      _spread(units[scoped], num_units, len(targets))]
  _fill_unscoped(graph, placement, targets[0])
  return _enforce_constraints(graph, placement, topology)


def _spread(units: np.ndarray, num_units: int, num_targets: int):
  """Unit k -> target k if they fit, else contiguous even blocks."""
  if num_units <= num_targets:
    return units
  return (units.astype(np.int64) * num_targets) // num_units


def _fill_unscoped(graph, placement, default: int):
  """Unplaced ops: majority of data producers, else of consumers, else default."""
  data = graph.edge_output >= 0
  src, dst = graph.edge_src[data], graph.edge_dst[data]
  inputs = _adjacency(dst, src, graph.num_nodes)
  outputs = _adjacency(src, dst, graph.num_nodes)
  order = graph.topo_order
  unresolved = []
  for node in order[placement[order] < 0]:  # producers come first
    placement[node] = _majority(placement[inputs[node]])
    if placement[node] < 0:
      unresolved.append(node)
  for node in reversed(unresolved):
    placement[node] = _majority(placement[outputs[node]])
  placement[placement < 0] = default


def _adjacency(keys, values, n):
  order = np.argsort(keys, kind="stable")
  starts = np.searchsorted(keys[order], np.arange(n + 1))
  sorted_values = values[order]
  return [sorted_values[starts[i]:starts[i + 1]] for i in range(n)]


def _majority(devices: np.ndarray) -> int:
  """Most common device among `devices` >= 0 (lowest on ties), else -1."""
  devices = devices[devices >= 0]
  if devices.size == 0:
    return -1
  return int(np.argmax(np.bincount(devices)))


def _enforce_constraints(graph, placement, topology):
  """Each colocation group on the allowed device most of its members chose."""
  tables = simulator.device_tables(graph, topology)
  node_ok = tables.kind_ok & tables.pin_ok  # [n, d]
  groups = graph.group_ids
  num_groups = int(groups.max(initial=-1)) + 1
  d = topology.num_devices
  allowed = np.ones((num_groups, d), bool)
  np.logical_and.at(allowed, groups, node_ok)
  votes = np.zeros((num_groups, d), np.int64)
  np.add.at(votes, (groups, placement), 1)
  votes[~allowed] = -1
  stuck = np.flatnonzero(~allowed.any(axis=1))
  if stuck.size:
    member = int(np.flatnonzero(groups == stuck[0])[0])
    raise errors.PlacementError(
        f"no device of topology {topology.name!r} may run every op of the "
        f"colocation group of {graph.node_names[member]!r} (allowed kinds "
        "or pins disagree)")
  choice = np.argmax(votes, axis=1).astype(np.int32)
  return choice[groups]


def _model_of(graph) -> str:
  model = graph.metadata.get("model")
  if not model:
    raise errors.InputError(
        f"graph {graph.name!r} is not a zoo model (no metadata 'model'); "
        f"human-expert placements exist for: {', '.join(sorted(RULES))}")
  return str(model)


def _family(model: str) -> str:
  from tf_gdp.zoo import registry  # pylint: disable=g-import-not-at-top
  spec = registry.MODELS.get(model)
  family = (spec.family or spec.name) if spec is not None else None
  if family not in RULES:
    raise errors.InputError(
        f"no human-expert placement for model {model!r}; known: "
        f"{', '.join(sorted(RULES))} and their sizes")
  return family


def _forward_name(name: str) -> str:
  while name.startswith(_GRADIENT_PREFIX):
    name = name[len(_GRADIENT_PREFIX):]
  return name


def _count(family: str, names, graph) -> dict:
  """Layers (and stacks) the names show; checked against the knobs."""
  knobs = graph.metadata.get("knobs") or {}
  if family in ("gnmt", "rnnlm", "transformer_xl"):
    pattern = _TXL_LAYER if family == "transformer_xl" else _LAYER
    layers = _max_plus_one(pattern, names, 1)
    _check(graph, "num_layers", layers, knobs)
    return {"layers": layers}
  if family == "wavenet":
    stacks = _max_plus_one(_WAVENET_LAYER, names, 1)
    per_stack = _max_plus_one(_WAVENET_LAYER, names, 2)
    _check(graph, "num_stacks", stacks, knobs)
    _check(graph, "layers_per_stack", per_stack, knobs)
    return {"stacks": stacks, "layers_per_stack": per_stack}
  return {}


def _max_plus_one(pattern, names, group: int) -> int:
  found = [int(m.group(group)) for m in map(pattern.match, names) if m]
  return max(found) + 1 if found else 0


def _check(graph, knob: str, seen: int, knobs: dict):
  model = graph.metadata.get("model")
  if seen == 0:
    raise errors.InputError(
        f"graph {graph.name!r} claims to be zoo model {model!r} but has no "
        f"op in that model's layer scopes")
  if knob in knobs and int(knobs[knob]) != seen:
    raise errors.InputError(
        f"graph {graph.name!r}: knobs say {knob}={knobs[knob]} but its op "
        f"names show {seen}")


def _unit_or_none(unit) -> int:
  return -1 if unit is None else unit
