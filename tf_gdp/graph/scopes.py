"""Scope coordinates: where an op sits among its numbered sibling scopes.

Model code names its repeated blocks: `encoder/layer_3/...`,
`stack_1/layer_4/...`, `lstm/layer_0/t12/...`. A practitioner splitting a
model by hand reads exactly these numbers (LSTM layer i on GPU i), and
structure alone cannot give them: every layer of an unrolled RNN is built from
the same cells, so a few rounds of message passing see the same neighbourhood
in layer 0 and in layer 7. Each op therefore gets, for its first `NUM_SLOTS`
numbered scope components (outermost first, the op's own name excluded):

* the component's stem (`layer_`, `t`, `stack_`), hashed into `SCOPE_VOCAB`
  ids for the encoder to embed (0: no such component), so the policy can
  learn which kind of number means "layer";
* the rank of its number among the numbers that the same scope template
  carries anywhere in the graph, scaled to [0, 1] (layer 3 of layers 0-7 is
  3/7), so a policy trained with 4 layers reads 8 layers on the same scale;
* how many distinct numbers that template has (log-scaled).

Backward ops (`gradient_tape/...`, TF1's `gradients/...`) take the
coordinates of the forward scope they differentiate. Nothing here knows any
model family: it is the names' own numbering, so a graph with meaningless
names simply gets uninformative coordinates.
"""

import functools
import math
import re
import zlib
from typing import Sequence

import numpy as np

NUM_SLOTS = 2
SCOPE_VOCAB = 256
_COUNT_SCALE = 5.0
# The scopes TF puts gradients in: a GradientTape's or `tf.gradients`'s, and
# the uniquified ones of a second tape or call (`gradient_tape_1/`), as in a
# GAN step with one tape per network.
_BACKWARD_PREFIX = re.compile(r"^(?:gradient_tape|gradients)(?:_\d+)?/")
# A scope component that ends in a number after a letter or underscore:
# `layer_3`, `t12`, `mixed10`, `conv2d_22` (not `conv2d`, not `3`).
_NUMBERED = re.compile(r"^(.*[A-Za-z_])(\d+)$")


def forward_name(name: str):
  """The forward name a backward op's name differentiates, else None.

  `gradient_tape/layer_3/MatMul_1` -> `layer_3/MatMul_1` (also under
  `gradient_tape_1/`, `gradients/`, `gradients_2/` ...); a name outside the
  backward scopes gives None.
  """
  match = _BACKWARD_PREFIX.match(name)
  return name[match.end():] if match else None


def _forward_scopes(name: str) -> list:
  """The scope components of an op's name, a backward op's forward ones."""
  forward = forward_name(name)
  return (name if forward is None else forward).split("/")[:-1]


def numbered_scopes(name: str) -> list:
  """Every scope prefix of the name that ends in a numbered component.

  `lstm/layer_0/t12/add` -> [`lstm/layer_0`, `lstm/layer_0/t12`]; a
  backward op gets its forward op's (a layer's gradients are the layer's).
  What a practitioner moves as one block: a layer, a cell, a segment.
  """
  found, parts = [], _forward_scopes(name)
  for i, part in enumerate(parts):
    if _NUMBERED.match(part):
      found.append("/".join(parts[:i + 1]))
  return found


def stem_id(stem: str) -> int:
  """Stable hashed id of a scope stem, in [1, SCOPE_VOCAB).

  Case and trailing separators do not matter: `layer_`, `layer` and
  `Layer-` are one stem, as different model code spells the same idea.
  """
  key = stem.lower().rstrip("_-.")
  return 1 + zlib.crc32(key.encode("utf-8")) % (SCOPE_VOCAB - 1)


def _numbered_components(names: Sequence[str]):
  """The numbered components of the names' scopes, once per distinct scope.

  Returns (per distinct scope: ((template key, stem, number), ...) of its
  first NUM_SLOTS numbered components; int64[n] each op's scope in that
  list; per distinct scope: how many ops it has). Graphs have many ops per
  scope, so the callers work per scope and spread the result over its ops.
  The last few name lists' answers are kept: the scope coordinates and
  every stage rule of one graph read the same.
  """
  return _components_of_names(tuple(names))


@functools.lru_cache(maxsize=4)
def _components_of_names(names: tuple):
  of_scope, found, scope_of = {}, [], []
  for name in names:
    forward = forward_name(name)
    path = name if forward is None else forward
    scope = path[:path.rfind("/") + 1]  # "" for a name without scopes
    index = of_scope.get(scope)
    if index is None:
      index = of_scope[scope] = len(found)
      found.append(_scope_components(scope.split("/")[:-1]))
    scope_of.append(index)
  scope_of = np.asarray(scope_of, np.int64)
  scope_of.flags.writeable = False
  return (tuple(found), scope_of,
          tuple(np.bincount(scope_of, minlength=len(found)).tolist()))


def _scope_components(parts: list) -> tuple:
  """The first NUM_SLOTS numbered components of one op's scope `parts`."""
  found = []
  template = []
  for part in parts:
    match = _NUMBERED.match(part)
    if match is None:
      template.append(part)
      continue
    stem = match.group(1)
    template.append(stem + "#")
    found.append(("/".join(template), stem, int(match.group(2))))
    if len(found) == NUM_SLOTS:
      break
  return tuple(found)


def scope_coordinates(names: Sequence[str]):
  """Per op (in `names` order): stem ids, ranks and sibling counts.

  Returns:
    (int32[n, NUM_SLOTS] stem ids, 0 where the op has fewer numbered scopes;
     float64[n, NUM_SLOTS] rank of the number in [0, 1];
     float64[n, NUM_SLOTS] log1p(distinct numbers - 1) / 5).
  """
  per_scope, scope_of, _ = _numbered_components(names)
  ids = np.zeros((len(per_scope), NUM_SLOTS), np.int32)
  ranks = np.zeros((len(per_scope), NUM_SLOTS))
  counts = np.zeros((len(per_scope), NUM_SLOTS))
  numbers_of = {}
  for found in per_scope:
    for key, _, number in found:
      numbers_of.setdefault(key, set()).add(number)
  scale = {}
  for key, numbers in numbers_of.items():
    ordered = sorted(numbers)
    span = max(len(ordered) - 1, 1)
    scale[key] = ({v: i / span for i, v in enumerate(ordered)},
                  math.log1p(len(ordered) - 1) / _COUNT_SCALE)
  stem_ids = {}
  for i, found in enumerate(per_scope):
    for slot, (key, stem, number) in enumerate(found):
      if stem not in stem_ids:
        stem_ids[stem] = stem_id(stem)
      rank_of, log_count = scale[key]
      ids[i, slot] = stem_ids[stem]
      ranks[i, slot] = rank_of[number]
      counts[i, slot] = log_count
  return ids[scope_of], ranks[scope_of], counts[scope_of]


# How `stage_coordinates` numbers the blocks and how other ops inherit.
STAGE_RULES = ("latest_input", "neighbour_median", "inner_major")


def stage_coordinates(names: Sequence[str], edge_src, edge_dst, order,
                      refine_rounds: int = 2, rule: str = "latest_input"):
  """Per op: its stage along the graph's main stack of blocks, in [0, 1].

  The stage stem is the outermost numbered stem (`layer_` in
  `lstm/layer_3/t5/...`) that the most ops carry among templates with at
  least two numbers; an op with that stem outermost gets the rank of its
  number (as `scope_coordinates`). The other ops inherit a stage the way a
  pipeline would run them: in topological order, an op takes the latest
  stage among its inputs (the softmax after the last layer joins it); then,
  in reverse order, an op still without one (a variable, a constant, an
  input) takes the earliest stage among its consumers. Last,
  `refine_rounds` sweeps give every inheriting op the (lower) median stage
  of its neighbours, inputs and consumers: a backward gradient sum fed by
  layers i and i+1 and consumed by layer i joins layer i, and a variable
  read by the softmax joins the softmax. Ops no pass reaches have none.
  Placing each stage on its own device this way is within 1% of the human
  expert's layer-per-GPU rules on RNNLM-2/4 and GNMT-2/4/8 (simulated),
  without knowing any model family.

  `rule="neighbour_median"` replaces the first pass: an op takes the (lower)
  median stage of its staged neighbours, inputs and numbered consumers,
  instead of the latest input's. Attention and other glue between two stacks
  then sit with the stack they feed rather than the last layer they read:
  stage-per-device by this rule is 3-9% faster than by the first on GNMT-2/4/8
  and 31% slower on RNNLM-4 (simulated).

  `rule="inner_major"` numbers blocks on two levels, the main stem and the
  numbered stem most often nested in it (`segment_` in
  `layer_1/segment_0/...`), with the inner level major: every layer of
  segment 0, then every layer of segment 1, and so on; inheritance as by
  `neighbour_median`. On Transformer-XL this is a wavefront over (segment,
  layer) blocks: stage-per-device is 28-36% faster than the best baseline on
  Transformer-XL 2/4/8 (simulated), where the one-level rules are no better
  than one device; on the RNNs its inner level is time and it is poor.
  Pipeline exploration tries every rule.

  Args:
    names: op names.
    edge_src, edge_dst: int[m] the graph's edges (data and control).
    order: int[n] a topological order of the ops.
    refine_rounds: median sweeps.
    rule: one of `STAGE_RULES`.

  Returns:
    (float64[n] stage in [0, 1], 0 where none; bool[n] has a stage).
  """
  return stage_coordinates_of_rules(names, edge_src, edge_dst, order,
                                    refine_rounds, rules=(rule,))[0]


def stage_coordinates_of_rules(names: Sequence[str], edge_src, edge_dst,
                               order, refine_rounds: int = 2,
                               rules: Sequence[str] = STAGE_RULES) -> list:
  """[(stage, known) of `stage_coordinates` for each of `rules`].

  One pass for several rules: they share the names' numbered components,
  the adjacency and (the one-level rules) the main stem's stages.
  """
  for rule in rules:
    if rule not in STAGE_RULES:
      raise ValueError(f"unknown stage rule {rule!r}; one of {STAGE_RULES}")
  components = _numbered_components(names)
  named, graph, results = {}, None, []
  for rule in rules:
    levels = 2 if rule == "inner_major" else 1
    if levels not in named:
      named[levels] = (_inner_major_stages(*components) if levels == 2
                       else _main_stem_stages(*components))
    stage, known = (array.copy() for array in named[levels])
    if not known.any():
      results.append((stage, known))
      continue
    if graph is None:
      n = len(names)
      edge_src = np.asarray(edge_src, np.int64)
      edge_dst = np.asarray(edge_dst, np.int64)
      graph = (_adjacency(edge_dst, edge_src, n),
               _adjacency(edge_src, edge_dst, n),
               np.asarray(order, np.int64).tolist())
    results.append(_inherited(stage, known, *graph, refine_rounds, rule))
  return results


def _inherited(stage, known, inputs, consumers, order, refine_rounds, rule):
  """(stage, known) once the unnumbered ops inherit (`stage_coordinates`).

  Runs over Python lists: every pass visits every edge.
  """
  named = known.tolist()
  known = list(named)
  stage = stage.tolist()
  for v in order:
    if named[v]:
      continue
    if rule == "latest_input":
      before = [stage[u] for u in inputs[v] if known[u]]
      if before:
        stage[v] = max(before)
        known[v] = True
    else:
      around = sorted(stage[u] for u in inputs[v] + consumers[v] if known[u])
      if around:
        stage[v] = around[(len(around) - 1) // 2]
        known[v] = True
  for v in order[::-1]:
    if not known[v]:
      after = [w for w in consumers[v] if known[w]]
      if after:
        stage[v] = min(stage[w] for w in after)
        known[v] = True
  for _ in range(refine_rounds):
    for v in order:
      if known[v] and not named[v]:
        around = sorted(stage[u] for u in inputs[v] + consumers[v]
                        if known[u])
        stage[v] = around[(len(around) - 1) // 2]
  return np.asarray(stage, np.float64), np.asarray(known, bool)


@functools.lru_cache(maxsize=4096)
def _normal_stem(stem: str) -> str:
  return stem.lower().rstrip("_-.")


def _counted(found):
  """The numbered components, each with its template's distinct numbers."""
  numbers_of = {}
  for components in found:
    for key, _, number in components:
      numbers_of.setdefault(key, set()).add(number)
  index_of = {key: {v: r for r, v in enumerate(sorted(numbers))}
              for key, numbers in numbers_of.items()}
  return numbers_of, index_of


def _most_common_stem(items, weights, numbers_of):
  """The normalized stem most ops carry, among templates with 2+ numbers
  (`weights`: how many ops carry each item)."""
  ops_of_stem = {}
  for (key, stem, _), weight in zip(items, weights):
    if len(numbers_of[key]) > 1:
      stem = _normal_stem(stem)
      ops_of_stem[stem] = ops_of_stem.get(stem, 0) + weight
  if not ops_of_stem:
    return None
  return max(sorted(ops_of_stem), key=ops_of_stem.get)


def _numbered_levels(per_scope, weights, levels: int):
  """Each scope's first `levels` numbered components (of
  `_numbered_components`), their templates' numbers and indices, and the
  main (outermost, most common) stem."""
  found = [c[:levels] for c in per_scope]
  numbers_of, index_of = _counted(found)
  main = _most_common_stem([f[0] for f in found if f],
                           [w for f, w in zip(found, weights) if f], numbers_of)
  return found, numbers_of, index_of, main


def _main_stem_stages(per_scope, scope_of, weights):
  """(stage, known) of the ops whose outermost numbered stem is the main one."""
  stage, known = np.zeros(len(per_scope)), np.zeros(len(per_scope), bool)
  found, numbers_of, index_of, main = _numbered_levels(per_scope, weights, 1)
  for i, components in enumerate(found):
    if not components:
      continue
    key, stem, number = components[0]
    if len(numbers_of[key]) > 1 and _normal_stem(stem) == main:
      stage[i] = index_of[key][number] / (len(numbers_of[key]) - 1)
      known[i] = True
  return stage[scope_of], known[scope_of]


def _inner_major_stages(per_scope, scope_of, weights):
  """(stage, known) of ops numbered on the main stem and the stem inside it."""
  stage, known = np.zeros(len(per_scope)), np.zeros(len(per_scope), bool)
  found, numbers_of, index_of, main = _numbered_levels(per_scope, weights, 2)
  nested = [(f, w) for f, w in zip(found, weights)
            if len(f) == 2 and len(numbers_of[f[0][0]]) > 1
            and _normal_stem(f[0][1]) == main]
  inner = _most_common_stem([f[1] for f, _ in nested],
                            [w for _, w in nested], numbers_of)
  for i, components in enumerate(found):
    if len(components) < 2:
      continue
    (outer_key, outer_stem, outer), (inner_key, inner_stem, number) = components
    outer_count = len(numbers_of[outer_key])
    inner_count = len(numbers_of[inner_key])
    if (outer_count > 1 and inner_count > 1 and
        _normal_stem(outer_stem) == main and _normal_stem(inner_stem) == inner):
      flat = (index_of[inner_key][number] * outer_count +
              index_of[outer_key][outer])
      stage[i] = flat / (outer_count * inner_count - 1)
      known[i] = True
  return stage[scope_of], known[scope_of]


def _adjacency(keys, values, n):
  """[list of values per key] for key in range(n)."""
  lists = [[] for _ in range(n)]
  for key, value in zip(keys.tolist(), values.tolist()):
    lists[key].append(value)
  return lists
