"""The graphs a policy trains on: zoo models, graph files and generated DAGs.

A graph-set spec is a comma-separated list of items:

  gnmt2, rnnlm2:batch=8:num_layers=2   zoo models with optional knobs
  zoo                                  every benchmark model of the zoo
  my_graph.json, graphs/*.pb           files or globs (see `sources.load`)
  layered:N[:width=W][:seed=S]         a random layered DAG of N ops
                                       (`random_layered_graph`)
  cells:N[:cell=C][:seed=S]            N ops of randomly wired cells
                                       (`random_cells_graph`)

Pre-training on generated graphs next to the zoo gives the policy variety:
graphs it has not seen before in shape, width and cost spread.
"""

import dataclasses
from typing import List, Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.graph import op_graph
from tf_gdp.graph import sources

GENERATORS = ("layered", "cells")


@dataclasses.dataclass
class GraphItem:
  """One entry of a graph set; `load(devices)` builds it."""
  label: str
  generator: Optional[str] = None
  options: Optional[dict] = None
  source: Optional[object] = None  # bench.harness.GraphSource

  def load(self, devices: str) -> sources.LoadedGraph:
    if self.generator == "layered":
      o = self.options
      return sources.LoadedGraph(random_layered_graph(
          o["n"], width=o.get("width", 100), seed=o.get("seed", 0),
          name=self.label))
    if self.generator == "cells":
      o = self.options
      return sources.LoadedGraph(random_cells_graph(
          o["n"], cell_size=o.get("cell", 32), seed=o.get("seed", 0),
          name=self.label))
    return self.source.load(devices)


def parse(spec: str) -> List[GraphItem]:
  """Parses a graph-set spec (module doc); InputError on a bad item."""
  from tf_gdp.bench import harness  # pylint: disable=g-import-not-at-top
  items, rest = [], []
  for item in [s.strip() for s in spec.split(",") if s.strip()]:
    name, _, options = item.partition(":")
    if name not in GENERATORS:
      rest.append(item)
      continue
    fields = options.split(":") if options else []
    if not fields or not fields[0].isdigit() or int(fields[0]) < 2:
      raise errors.InputError(
          f"{item!r}: use {name}:N with N >= 2 ops, e.g. {name}:2000")
    parsed = {"n": int(fields[0])}
    for field in fields[1:]:
      key, _, value = field.partition("=")
      allowed = ("width", "seed") if name == "layered" else ("cell", "seed")
      if key not in allowed or not value.lstrip("-").isdigit():
        raise errors.InputError(
            f"{item!r}: {name} takes {' and '.join(k + '=INT' for k in allowed)}")
      parsed[key] = int(value)
    if parsed.get("width", 1) < 1 or parsed.get("cell", 2) < 2:
      raise errors.InputError(f"{item!r}: width must be >= 1, cell >= 2")
    items.append(GraphItem(label=item.replace(":", "_").replace("=", ""),
                           generator=name, options=parsed))
  if rest:
    items += [GraphItem(label=s.label, source=s)
              for s in harness.parse_graphs(",".join(rest))]
  if not items:
    raise errors.InputError("the graph set names no graph")
  labels = [i.label for i in items]
  if len(set(labels)) != len(labels):
    raise errors.InputError(f"the graph set names a graph twice: {labels}")
  return items


def random_layered_graph(num_nodes: int, *, width: int = 100, seed: int = 0,
                         name: str = "layered") -> op_graph.OpGraph:
  """A random layered DAG shaped like a deep network's training step.

  Layers of `width` ops; each op reads 1-3 tensors from the previous three
  layers; ~10% of the ops have two outputs, ~5% of the edges are control
  edges, ~2% of the ops hold variables. GPU costs are uniform in 1-100 us,
  CPU costs 5-20x that, outputs log-uniform in 1 KB-10 MB. The simulator
  speed benchmark uses it too.
  """
  rng = np.random.default_rng(seed)
  layer = np.arange(num_nodes) // width
  gpu = rng.uniform(1.0, 100.0, num_nodes)
  cpu = gpu * rng.uniform(5.0, 20.0, num_nodes)
  out_bytes = np.exp(rng.uniform(np.log(1e3), np.log(1e7),
                                 num_nodes)).astype(np.int64)
  two_outputs = rng.random(num_nodes) < 0.1
  src, dst, nbytes, slots = [], [], [], []
  for v in range(width, num_nodes):
    low = max(0, (layer[v] - 3) * width)
    high = layer[v] * width
    for u in sorted(set(rng.integers(low, high,
                                     size=rng.integers(1, 4)).tolist())):
      src.append(u)
      dst.append(v)
      if rng.random() < 0.05:
        nbytes.append(0)
        slots.append(-1)
      else:
        slot = int(two_outputs[u] and rng.random() < 0.5)
        nbytes.append(int(out_bytes[u]) // (2 if two_outputs[u] else 1))
        slots.append(slot)
  memory = np.where(rng.random(num_nodes) < 0.02,
                    rng.integers(1 << 20, 50 << 20, num_nodes), 0)
  names = [f"layer{layer[i]}/op{i}" for i in range(num_nodes)]
  return op_graph.OpGraph.build(
      name=name, node_names=names, op_types=["Synthetic"] * num_nodes,
      costs={"GPU": gpu, "CPU": cpu}, output_bytes=out_bytes,
      memory_bytes=memory, edge_src=src, edge_dst=dst, edge_bytes=nbytes,
      edge_output=slots, fetches=names[-width:],
      metadata={"generator": "layered", "width": width, "seed": seed})


def random_cells_graph(num_nodes: int, *, cell_size: int = 32, seed: int = 0,
                       name: str = "cells") -> op_graph.OpGraph:
  """Randomly wired cells (after Xie et al., 2019), stacked into one DAG.

  Each cell is a Watts-Strogatz small-world graph (ring of `cell_size` ops,
  each linked to its 4 nearest neighbours, every link rewired with
  probability 0.25), oriented from lower to higher index so it is a DAG. The
  cell's sources read the previous cell's sinks. Ops get GPU costs
  log-uniform in 2-500 us (CPU 5-20x slower), outputs log-uniform in
  4 KB-16 MB; about 3% hold variables.
  """
  rng = np.random.default_rng(seed)
  src, dst = [], []
  previous_sinks: List[int] = []
  start = 0
  while start < num_nodes:
    size = min(cell_size, num_nodes - start)
    edges = set()
    for i in range(size):
      for offset in (1, 2):
        j = (i + offset) % size
        if rng.random() < 0.25:
          j = int(rng.integers(size))
        if i != j:
          edges.add((min(i, j), max(i, j)))
    has_in = {b for _, b in edges}
    has_out = {a for a, _ in edges}
    for a, b in sorted(edges):
      src.append(start + a)
      dst.append(start + b)
    for i in range(size):
      if i not in has_in and previous_sinks:
        for s in previous_sinks:
          src.append(s)
          dst.append(start + i)
    previous_sinks = [start + i for i in range(size) if i not in has_out]
    start += size
  gpu = np.exp(rng.uniform(np.log(2.0), np.log(500.0), num_nodes))
  cpu = gpu * rng.uniform(5.0, 20.0, num_nodes)
  out_bytes = np.exp(rng.uniform(np.log(4e3), np.log(16e6),
                                 num_nodes)).astype(np.int64)
  memory = np.where(rng.random(num_nodes) < 0.03,
                    rng.integers(1 << 20, 64 << 20, num_nodes), 0)
  names = [f"cell{i // cell_size}/op{i}" for i in range(num_nodes)]
  src = np.asarray(src, np.int64)
  return op_graph.OpGraph.build(
      name=name, node_names=names, op_types=["Synthetic"] * num_nodes,
      costs={"GPU": gpu, "CPU": cpu}, output_bytes=out_bytes,
      memory_bytes=memory, edge_src=src, edge_dst=np.asarray(dst, np.int64),
      edge_bytes=out_bytes[src] if src.size else np.zeros(0, np.int64),
      fetches=[names[s] for s in previous_sinks],
      metadata={"generator": "cells", "cell_size": cell_size, "seed": seed})
