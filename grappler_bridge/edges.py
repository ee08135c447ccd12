"""The edges of the op graph: the tensors (and control) flowing between ops.

The placer needs a DAG whose edges carry the bytes a cut would send between
devices. A while loop's NextIteration -> Merge input closes a cycle, so it
goes to `back_edges` instead; any other cycle is an error. A tensor read
twice by the same op is sent once, and a control input that duplicates a
data input adds nothing.
"""

import dataclasses
from typing import Dict, List

from grappler_bridge import errors
from grappler_bridge import graph_view
from grappler_bridge import tensor_sizes


@dataclasses.dataclass
class Edges:
  """Data/control edges (a DAG), loop back-edges, and per-node input info."""
  edges: List[Dict[str, int]]
  back_edges: List[Dict[str, int]]
  input_bytes: List[int]
  # Per node: source index of each data input, in order.
  data_sources: List[List[int]]


def build_edges(nodes, index: Dict[str, int],
                outputs: tensor_sizes.Outputs) -> Edges:
  """Edges from NodeDef inputs; NextIteration -> Merge goes to back_edges."""
  result = Edges([], [], [0] * len(nodes), [[] for _ in nodes])
  seen = set()
  for dst, node in enumerate(nodes):
    data_sources = set()
    control = []
    for tensor in node.input:
      name, slot = graph_view.parse_input(tensor)
      src = index.get(name)
      if src is None:
        raise errors.GraphLoadError(
            f"node {node.name!r} has input {tensor!r} from a missing node")
      if slot < 0:
        control.append(src)
        continue
      _add_data_edge(result, seen, nodes, outputs, src, dst, slot)
      data_sources.add(src)
    for src in control:
      if src not in data_sources and (src, dst, -1) not in seen:
        seen.add((src, dst, -1))
        result.edges.append({"src": src, "dst": dst, "bytes": 0, "output": -1})
  return result


def _add_data_edge(result: Edges, seen, nodes, outputs: tensor_sizes.Outputs,
                   src: int, dst: int, slot: int):
  src_bytes = outputs.nbytes[src]
  nbytes = src_bytes[slot] if slot < len(src_bytes) else 0
  result.input_bytes[dst] += nbytes
  result.data_sources[dst].append(src)
  if nodes[dst].op in ("Merge", "RefMerge") and nodes[src].op in (
      "NextIteration", "RefNextIteration"):
    result.back_edges.append({"src": src, "dst": dst})
    return
  if (src, dst, slot) in seen:
    return  # the same tensor consumed twice is sent once
  seen.add((src, dst, slot))
  result.edges.append({"src": src, "dst": dst, "bytes": nbytes, "output": slot})


def check_acyclic(nodes, edges: List[Dict[str, int]]):
  """Kahn's algorithm; raises if `edges` still have a cycle."""
  num_nodes = len(nodes)
  indegree = [0] * num_nodes
  successors = [[] for _ in range(num_nodes)]
  for edge in edges:
    successors[edge["src"]].append(edge["dst"])
    indegree[edge["dst"]] += 1
  ready = [i for i in range(num_nodes) if indegree[i] == 0]
  visited = 0
  while ready:
    node = ready.pop()
    visited += 1
    for nxt in successors[node]:
      indegree[nxt] -= 1
      if indegree[nxt] == 0:
        ready.append(nxt)
  if visited != num_nodes:
    stuck = next(i for i in range(num_nodes) if indegree[i] > 0)
    raise errors.GraphLoadError(
        f"the graph has a cycle that is not a NextIteration->Merge back-edge "
        f"(through {nodes[stuck].name!r})")
