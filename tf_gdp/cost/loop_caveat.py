"""What the step time of a graph with while loops rests on.

A lowered `tf.while_loop` (and the loop of a Keras LSTM or GRU layer built
without `unroll=True`) keeps each of its ops once in the op graph. Where the
graph fixes a loop's trip count (`grappler_bridge.loops`: a counter against
a constant, a shape, or another loop's count), its ops are priced over every
iteration, and a tensor sent between devices inside it, or its state sent
back to the next iteration, once per iteration. Where it does not, roofline costs price one iteration (a profile
on the target still counts them all) and its transfers count once, so a
placement that cuts such a loop looks cheaper than it is. Iterations are
modelled one after another: the overlap TF allows between iterations
(`parallel_iterations`) is not. The report and the log say which case holds.
"""

from typing import Optional

from tf_gdp.graph import op_graph


def caveat(graph: op_graph.OpGraph, cost_source: str) -> Optional[str]:
  """One line on how `graph`'s loops are priced, or None without loops.

  `cost_source` is what priced the ops ("profiled" counts every iteration).
  """
  loops = int(graph.metadata.get("while_loops", 0) or 0)
  if not loops:
    return None
  trips = list(graph.metadata.get("loop_trips") or [])
  known = [t for t in trips if t is not None]
  unknown = loops - len(known)
  head = f"{loops} while loop{'s' if loops > 1 else ''}"
  if not unknown:
    return (f"{head} ({_counts(known)} iterations): their ops are priced "
            "over every iteration and a transfer inside a loop once per "
            "iteration, iterations one after another")
  body = ("counted over all iterations" if cost_source == "profiled"
          else "priced as one iteration")
  some = (f"{unknown} of {head} run a number of times the graph does not "
          f"fix" if known else f"{head}, run a number of times the graph "
          "does not fix")
  return (f"{some}: their ops are {body} and a transfer inside them once per "
          "step, so a placement that cuts them looks cheaper than it is "
          "(unroll them, e.g. Keras RNN layers with unroll=True, or measure "
          "on the devices)")


def _counts(known) -> str:
  values = sorted(set(known))
  return "/".join(str(v) for v in values[:4]) + ("/..." if len(values) > 4
                                                 else "")
