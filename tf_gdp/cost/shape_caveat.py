"""What the step time of a graph with inputs of unknown shape rests on.

A graph file or SavedModel signature that leaves an input's batch
dimension unknown (`[None, 128]`) is priced with every unknown dimension as
one element (`grappler_bridge.tensor_sizes`): the step time is that of a
batch of one, which may be far from the step the user runs, and placements
that pay off at the real batch may look useless. The report and the log say
so, and name the flag that fixes it (`grappler_bridge.input_shapes`).
"""

from typing import Optional

from tf_gdp.graph import op_graph


def caveat(graph: op_graph.OpGraph, *, measured: bool = False,
           advice: Optional[str] = None) -> Optional[str]:
  """One line naming the inputs of unknown shape, or None if there are none.

  `measured`: the line goes beside a measurement, which feeds such inputs
  with every unknown dimension as 1 too (`grappler_bridge.runnable`).
  `advice` replaces the closing advice (the `--input_shapes` flag).
  """
  unknown = graph.metadata.get("unknown_shape_inputs") or {}
  if not unknown:
    return None
  names = sorted(unknown)
  shown = ", ".join(f"{name} {_describe(unknown[name])}"
                    for name in names[:4])
  more = f" and {len(names) - 4} more" if len(names) > 4 else ""
  how, which = (("priced and run", "both times") if measured
                else ("priced", "step times"))
  example = ",".join(f"{name}:{_example(unknown[name])}"
                     for name in names[:2])
  advice = advice or (f"give the real shapes with --input_shapes={example} "
                      "(gdp.load_graph(..., input_shapes=...) in Python)")
  return (f"input{'s' if len(names) > 1 else ''} of unknown shape ({shown}"
          f"{more}): each unknown dimension is {how} as 1, so {which} "
          f"are those of a batch of one; {advice}")


def _describe(dims) -> str:
  if dims is None:
    return "[unknown rank]"
  return "[" + ", ".join("?" if d < 0 else str(d) for d in dims) + "]"


def _example(dims) -> str:
  if not dims:
    return "BATCHxDIMS"
  return "x".join("BATCH" if i == 0 and d < 0 else ("N" if d < 0 else str(d))
                  for i, d in enumerate(dims))
