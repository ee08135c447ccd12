"""How many times each op of a lowered while loop runs in one step.

A lowered `tf.while_loop` keeps each op of its body once in the graph, inside
a frame that `Enter` opens and `Exit` closes; the body runs once per
iteration. Pricing it once makes a loop, and above all a transfer inside
one, look far cheaper than it is. The trip count is in the graph only as
tensors: a counter loop variable that starts at a constant and adds one per
iteration, compared (`Less`, `LessEqual`) with a bound that is fixed for the
loop: a constant, a shape (`tf.shape(x)[0]`, as Keras's recurrent layers
take their sequence length) or another loop's final count (a gradient loop
runs as many times as its forward loop). This module reads those; a loop
whose count it cannot read counts once, as before.
"""

import dataclasses
from typing import Dict, List, Optional, Sequence

import numpy as np

_ROOT = 0
# A condition that compares a counter with a bound the graph does not fix.
_COUNTER = "counter"
_PASS_THROUGH = frozenset({"Identity", "Enter", "Switch", "RefIdentity",
                           "RefEnter", "RefSwitch", "StopGradient"})
_ARITHMETIC = {
    "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "Maximum": np.maximum, "Minimum": np.minimum, "FloorDiv": np.floor_divide,
}


@dataclasses.dataclass
class Loops:
  """Per node its executions per step, and per loop its trip count.

  Attributes:
    executions: int64[num_nodes], the product of the trip counts of the loops
      around a node (1 outside loops and inside loops of unknown count).
    trips: per loop frame (in order of first appearance), its iterations
      per run, or None when the graph does not say.
  """
  executions: np.ndarray
  trips: List[Optional[int]]


def analyze(nodes: Sequence, shapes: Sequence) -> Loops:
  """Frames, trip counts and executions of `nodes` (NodeDefs, graph order).

  `shapes[i]` are node i's output shapes (lists of dims, -1 or None where
  unknown), as `tensor_sizes.node_outputs` gives them.
  """
  if not any(node.op in ("Enter", "RefEnter") for node in nodes):
    return Loops(np.ones(len(nodes), np.int64), [])  # no loop: the common case
  index = {node.name: i for i, node in enumerate(nodes)}
  frame, parent = _frames(nodes, index)
  reader = _Reader(nodes, index, shapes, frame)
  trips = {}
  for i, node in enumerate(nodes):
    if node.op == "LoopCond" and frame[i] not in trips:
      trips[frame[i]] = reader.trips(_input(node, 0, index))
  per_frame = np.ones(len(parent), np.int64)
  for f in range(1, len(parent)):  # parents are numbered before children
    count = trips.get(f)
    per_frame[f] = per_frame[parent[f]] * (count if count else 1)
  executions = per_frame[frame] if len(nodes) else np.ones(0, np.int64)
  return Loops(executions.astype(np.int64),
               [trips.get(f) for f in range(1, len(parent))])


def _frames(nodes, index):
  """Frame id per node (0: none) and each frame's parent.

  Enter opens its frame (the Enter itself runs in it), Exit returns to the
  parent; any other op is in its inputs' frame. Merge's NextIteration input
  is a back edge and is not followed.
  """
  n = len(nodes)
  inputs = [[index[name.lstrip("^").split(":")[0]] for name in node.input
             if name.lstrip("^").split(":")[0] in index] for node in nodes]
  forward = []
  for v, node in enumerate(nodes):
    forward.append([u for u in inputs[v] if not (
        node.op in ("Merge", "RefMerge") and
        nodes[u].op in ("NextIteration", "RefNextIteration"))])
  frame = np.full(n, -1, np.int64)
  parent = [_ROOT]
  children: Dict[tuple, int] = {}
  for v in _topological(forward, n):
    node = nodes[v]
    outer = frame[forward[v][0]] if forward[v] else _ROOT
    if node.op in ("Enter", "RefEnter"):
      key = (int(outer), node.attr["frame_name"].s)
      if key not in children:
        children[key] = len(parent)
        parent.append(int(outer))
      frame[v] = children[key]
    elif node.op in ("Exit", "RefExit"):
      frame[v] = parent[outer]
    else:
      frame[v] = outer
  frame[frame < 0] = _ROOT  # nodes on a cycle the back edges do not explain
  return frame, parent


def _topological(forward, n) -> List[int]:
  pending = np.array([len(f) for f in forward], np.int64)
  users: List[List[int]] = [[] for _ in range(n)]
  for v, sources in enumerate(forward):
    for u in sources:
      users[u].append(v)
  ready = [v for v in range(n) if pending[v] == 0]
  order = []
  while ready:
    u = ready.pop()
    order.append(u)
    for v in users[u]:
      pending[v] -= 1
      if pending[v] == 0:
        ready.append(v)
  return order


def _input(node, k: int, index) -> Optional[int]:
  data = [name for name in node.input if not name.startswith("^")]
  if k >= len(data):
    return None
  return index.get(data[k].split(":")[0])


class _Reader:
  """Reads the integer values and loop counts the graph fixes statically."""

  def __init__(self, nodes, index, shapes, frame):
    self._nodes, self._index, self._shapes = nodes, index, shapes
    self._frame = frame
    self._trips_memo: Dict[int, Optional[int]] = {}

  def trips(self, predicate: Optional[int], depth: int = 0) -> Optional[int]:
    """Iterations of the loop whose LoopCond reads `predicate`."""
    found = self._condition(predicate, depth)
    return found if isinstance(found, int) else None

  def _condition(self, predicate: Optional[int], depth: int):
    """A loop condition's iterations: an int, `_COUNTER` (a counter against
    a bound the graph does not fix: no tighter than the other conditions)
    or None (anything else, e.g. a condition on data)."""
    if predicate is None or depth > 16:
      return None
    node = self._nodes[predicate]
    if node.op in _PASS_THROUGH:
      return self._condition(_input(node, 0, self._index), depth + 1)
    if node.op == "LogicalAnd":
      # A condition on data makes the count unknown, even beside a
      # `maximum_iterations` counter: the loop may stop earlier.
      found = [self._condition(_input(node, k, self._index), depth + 1)
               for k in (0, 1)]
      if None in found:
        return None
      counts = [f for f in found if isinstance(f, int)]
      return min(counts) if counts else _COUNTER
    if node.op in ("Less", "LessEqual"):
      counter = self._counter_start(_input(node, 0, self._index))
      if counter is None:
        return None
      bound = self._invariant(_input(node, 1, self._index))
      if bound is None:
        return _COUNTER
      count = int(bound) - int(counter) + (node.op == "LessEqual")
      return max(count, 0)
    return None

  def value(self, i: Optional[int], depth: int = 0) -> Optional[np.ndarray]:
    """The integer value of node i's first output, if the graph fixes it."""
    if i is None or depth > 32:
      return None
    node = self._nodes[i]
    op = node.op
    if op == "Const":
      from tensorflow.python.framework import tensor_util  # pylint: disable=g-import-not-at-top
      array = tensor_util.MakeNdarray(node.attr["value"].tensor)
      return array if np.issubdtype(array.dtype, np.integer) else None
    if op in _PASS_THROUGH or op == "Cast":
      return self.value(_input(node, 0, self._index), depth + 1)
    if op in ("Shape", "Size", "Rank"):
      source = _input(node, 0, self._index)
      shape = self._shape_of(source, node.input[0])
      if shape is None:
        return None
      if op == "Shape":
        return np.array(shape, np.int64)
      return np.array(int(np.prod(shape)) if op == "Size" else len(shape))
    if op in _ARITHMETIC:
      a = self.value(_input(node, 0, self._index), depth + 1)
      b = self.value(_input(node, 1, self._index), depth + 1)
      return None if a is None or b is None else _ARITHMETIC[op](a, b)
    if op == "StridedSlice":
      return self._strided_slice(node, depth)
    if op == "Exit":
      return self._final_count(_input(node, 0, self._index), depth)
    return None

  def _shape_of(self, source: Optional[int], name: str):
    if source is None:
      return None
    slot = int(name.split(":")[1]) if ":" in name else 0
    outputs = self._shapes[source]
    if slot >= len(outputs) or outputs[slot] is None:
      return None
    dims = list(outputs[slot])
    return None if any(d is None or d < 0 for d in dims) else dims

  def _strided_slice(self, node, depth) -> Optional[np.ndarray]:
    values = [self.value(_input(node, k, self._index), depth + 1)
              for k in range(4)]
    if any(v is None for v in values) or values[0].ndim != 1:
      return None
    array, begin, end, strides = values
    if begin.shape != (1,) or any(
        node.attr[mask].i for mask in ("ellipsis_mask", "new_axis_mask")):
      return None
    start = None if node.attr["begin_mask"].i & 1 else int(begin[0])
    stop = None if node.attr["end_mask"].i & 1 else int(end[0])
    step = int(strides[0])
    if node.attr["shrink_axis_mask"].i & 1:
      return np.array(array[int(begin[0])])
    return array[start:stop:step]

  def _merge_of(self, i: Optional[int]) -> Optional[int]:
    """The loop variable's Merge that `i` reads, through Identity/Switch."""
    for _ in range(16):
      if i is None:
        return None
      node = self._nodes[i]
      if node.op in ("Merge", "RefMerge"):
        return i
      if node.op not in _PASS_THROUGH or node.op in ("Enter", "RefEnter"):
        return None
      i = _input(node, 0, self._index)
    return None

  def _merge_inputs(self, merge: int):
    """(initial value's node, next iteration's value node) of a loop Merge."""
    node = self._nodes[merge]
    entered, updated = None, None
    for k in range(2):
      source = _input(node, k, self._index)
      if source is None:
        return None, None
      if self._nodes[source].op in ("NextIteration", "RefNextIteration"):
        updated = _input(self._nodes[source], 0, self._index)
      else:
        entered = source
    return entered, updated

  def _counter_start(self, i: Optional[int]) -> Optional[int]:
    """The start of a counter that adds 1 per iteration, else None."""
    merge = self._merge_of(i)
    if merge is None:
      return None
    entered, updated = self._merge_inputs(merge)
    if entered is None or updated is None:
      return None
    node = self._nodes[updated]
    while node.op == "Identity":
      updated = _input(node, 0, self._index)
      if updated is None:
        return None
      node = self._nodes[updated]
    if node.op not in ("Add", "AddV2"):
      return None
    operands = [_input(node, k, self._index) for k in (0, 1)]
    for k in (0, 1):
      if (self._merge_of(operands[k]) == merge and
          self._invariant(operands[1 - k]) == 1):
        start = self.value(entered)
        return None if start is None or start.size != 1 else int(start)
    return None

  def _invariant(self, i: Optional[int]) -> Optional[int]:
    """The value of a bound fixed for the loop (outside it, or a loop
    variable passed on unchanged)."""
    merge = self._merge_of(i)
    if merge is None:
      found = self.value(i)
    else:
      entered, updated = self._merge_inputs(merge)
      if updated is None or self._merge_of(updated) != merge:
        return None
      found = self.value(entered)
    return None if found is None or found.size != 1 else int(found)

  def _final_count(self, i: Optional[int], depth: int) -> Optional[np.ndarray]:
    """A counter's value when its loop exits: start + iterations."""
    merge = self._merge_of(i)
    if merge is None or depth > 24:
      return None
    start = self._counter_start(merge)
    if start is None:
      return None
    frame = int(self._frame[merge])
    if frame not in self._trips_memo:
      self._trips_memo[frame] = None  # guards a cycle of loop bounds
      for j, node in enumerate(self._nodes):
        if node.op == "LoopCond" and self._frame[j] == frame:
          self._trips_memo[frame] = self.trips(_input(node, 0, self._index))
          break
    count = self._trips_memo[frame]
    return None if count is None else np.array(start + count)
