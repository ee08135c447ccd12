"""How often a step sends each tensor when while loops repeat it.

A loop's ops run once per iteration (`OpGraph.executions`), so a tensor
between two of them crosses devices once per iteration, as does the loop's
state on its way back to the next iteration (a back edge, NextIteration to
Merge, which is not one of the DAG's edges). The simulator's compiled pass
reads these arrays (`schedule_kernel.run`).
"""

import dataclasses

import numpy as np

from tf_gdp.graph import op_graph


@dataclasses.dataclass(frozen=True)
class LoopSends:
  """Sends per step of each tensor and of each loop back edge.

  Attributes:
    tensor_repeats: int64[t] per tensor (the simulator's numbering), the
      most its edges repeat: as often as both ends run (once into and out of
      a loop, every iteration inside one).
    back_src, back_dst: int64[k] each back edge's NextIteration and Merge.
    back_bytes: int64[k] what it carries (the NextIteration's outputs).
    back_repeats: int64[k] its sends per step (the Merge's executions).
  """
  tensor_repeats: np.ndarray
  back_src: np.ndarray
  back_dst: np.ndarray
  back_bytes: np.ndarray
  back_repeats: np.ndarray


def loop_sends(graph: op_graph.OpGraph, data_edges: np.ndarray,
               tensor_of_data: np.ndarray, num_tensors: int) -> LoopSends:
  """`graph`'s LoopSends; `data_edges` are its data edges' ids and
  `tensor_of_data` the tensor each carries."""
  runs = graph.executions
  src, dst = graph.edge_src[data_edges], graph.edge_dst[data_edges]
  tensor_repeats = np.ones(num_tensors, np.int64)
  np.maximum.at(tensor_repeats, tensor_of_data,
                np.minimum(runs[src], runs[dst]))
  back = np.ascontiguousarray(graph.back_edges, np.int64).reshape(-1, 2)
  return LoopSends(
      tensor_repeats=tensor_repeats, back_src=back[:, 0],
      back_dst=back[:, 1],
      back_bytes=graph.output_bytes[back[:, 0]].astype(np.int64),
      back_repeats=runs[back[:, 1]].astype(np.int64))
