"""What the step time of a graph with while loops leaves out.

A lowered `tf.while_loop` (and the loop of a Keras LSTM or GRU layer built
without `unroll=True`) keeps each of its ops once in the op graph, and the
graph does not say how many times the loop runs. Costs profiled on the
target add up every iteration of an op; roofline costs price one. Either
way a tensor sent between devices inside the loop is priced once per step,
so a placement that cuts a loop looks cheaper than it is. The report and
the log say so whenever a graph has loops.
"""

from typing import Optional

from tf_gdp.graph import op_graph


def caveat(graph: op_graph.OpGraph, cost_source: str) -> Optional[str]:
  """One line on what the prices of `graph`'s loops leave out, or None.

  `cost_source` is what priced the ops ("profiled" counts every iteration).
  """
  loops = int(graph.metadata.get("while_loops", 0) or 0)
  if not loops:
    return None
  body = ("counted over all iterations" if cost_source == "profiled"
          else "priced as one iteration")
  return (f"{loops} while loop{'s' if loops > 1 else ''}: the loop ops are "
          f"{body} and a transfer inside a loop once per step, so a "
          "placement that cuts a loop looks cheaper than it is (unroll it, "
          "e.g. Keras RNN layers with unroll=True, or measure on the "
          "devices)")
