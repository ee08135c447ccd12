"""Short names for chart labels: graphs, devices, links and op name scopes.

Full TF device strings (`/job:localhost/replica:0/task:0/device:GPU:0`) and
op names are too long for lane labels and legends; these helpers keep only
the parts that tell items apart.
"""

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import device_names as device_names_lib

# Scopes that wrap a whole phase of a step rather than naming a part of the
# model; their ops are grouped by the wrapper plus the next component
# (`gradient_tape/encoder`), so the backward
# pass of each model part gets its own colour.
WRAPPER_SCOPES = frozenset({
    "gradient_tape", "gradients", "training", "PartitionedCall",
    "StatefulPartitionedCall"})
NO_SCOPE = "(no scope)"


def graph_label(graph) -> str:
  """The graph's name plus its zoo knobs (`gnmt (num_layers=2)`), if any."""
  knobs = graph.metadata.get("knobs")
  if not isinstance(knobs, dict) or not knobs:
    return graph.name
  return f"{graph.name} ({', '.join(f'{k}={v}' for k, v in knobs.items())})"


def short_device_names(device_names) -> list:
  """`GPU:0`, or `task:1/CPU:0` when devices differ in job/replica/task.

  Falls back to the full names when a name does not parse or two short
  names would collide.
  """
  try:
    specs = [device_names_lib.parse_device(name) for name in device_names]
  except errors.InputError:
    return list(device_names)
  varying = [key for key in ("job", "replica", "task")
             if len({spec.get(key) for spec in specs}) > 1]
  short = []
  for spec, name in zip(specs, device_names):
    if "type" not in spec:
      return list(device_names)
    parts = [f"{key}:{spec[key]}" for key in varying if key in spec]
    parts.append(f"{spec['type']}:{spec.get('index', '0')}")
    short.append("/".join(parts))
  if len(set(short)) != len(short):
    return list(device_names)
  return short


def op_scopes(node_names) -> tuple:
  """(scope names, int[n] scope id per op): each op's name scope.

  The scope is the first component of the op name, or the first two when the
  first is one of `WRAPPER_SCOPES`; ops without a `/` share `NO_SCOPE`.
  """
  ids = {}
  scope_of = np.empty(len(node_names), np.int64)
  for i, name in enumerate(node_names):
    parts = name.split("/", 2)
    if len(parts) == 1:
      scope = NO_SCOPE
    elif parts[0] in WRAPPER_SCOPES and len(parts) == 3:
      scope = parts[0] + "/" + parts[1]
    else:
      scope = parts[0]
    scope_of[i] = ids.setdefault(scope, len(ids))
  return list(ids), scope_of


def rank_scopes(scope_names, scope_of, busy_us, max_scopes: int) -> tuple:
  """(kept names, their busy us, int[n] colour slot per op; -1 = "other").

  Keeps the `max_scopes` scopes with the most busy time (ties by name), so
  the legend names where the step's time goes.
  """
  sums = np.bincount(scope_of, weights=busy_us, minlength=len(scope_names))
  ranked = sorted(range(len(scope_names)),
                  key=lambda k: (-sums[k], scope_names[k]))[:max(max_scopes, 0)]
  slot_of_scope = np.full(len(scope_names), -1, np.int64)
  slot_of_scope[ranked] = np.arange(len(ranked))
  return ([scope_names[k] for k in ranked], [float(sums[k]) for k in ranked],
          slot_of_scope[scope_of])
