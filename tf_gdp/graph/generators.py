"""Random op graphs: variety for pre-training, sizes for the benchmarks.

A graph spec names a generated graph as one of

  layered:N[:width=W][:seed=S]   a random layered DAG of N ops
                                 (`random_layered_graph`)
  cells:N[:cell=C][:seed=S]      N ops of randomly wired cells
                                 (`random_cells_graph`)
  branches:N[:k=K][:seed=S]      K independent branches of N ops in all,
                                 joined at the end (`random_branches_graph`)

Pre-training on generated graphs next to the zoo gives the policy variety:
graphs it has not seen before in shape, width and cost spread, and (the
branches) independent work that only pays to split where links are slow
relative to compute, as on CPU workers. `random_grid_graph` is the policy
forward-pass benchmark's graph. numpy only, no TensorFlow.
"""

from typing import List

import numpy as np

from tf_gdp import errors
from tf_gdp.graph import op_graph

GENERATORS = ("layered", "cells", "branches")
# Options each generator takes (besides N), with their lower bounds.
_OPTIONS = {"layered": {"width": 1, "seed": None},
            "cells": {"cell": 2, "seed": None},
            "branches": {"k": 2, "seed": None}}


def generate(name: str, options: dict, *, label: str) -> op_graph.OpGraph:
  """Builds generator `name` with `options` (from `parse_options`)."""
  o = options
  if name == "layered":
    return random_layered_graph(o["n"], width=o.get("width", 100),
                                seed=o.get("seed", 0), name=label)
  if name == "cells":
    return random_cells_graph(o["n"], cell_size=o.get("cell", 32),
                              seed=o.get("seed", 0), name=label)
  if name == "branches":
    return random_branches_graph(o["n"], branches=o.get("k", 2),
                                 seed=o.get("seed", 0), name=label)
  raise errors.InputError(f"unknown graph generator {name!r} (known: "
                          f"{', '.join(GENERATORS)})")


def parse_options(item: str, name: str, options: str) -> dict:
  """The N and KEY=INT options of spec item `item` (`name:options`)."""
  fields = options.split(":") if options else []
  if not fields or not fields[0].isdigit() or int(fields[0]) < 2:
    raise errors.InputError(
        f"{item!r}: use {name}:N with N >= 2 ops, e.g. {name}:2000")
  parsed = {"n": int(fields[0])}
  allowed = _OPTIONS[name]
  for field in fields[1:]:
    key, _, value = field.partition("=")
    if key not in allowed or not value.lstrip("-").isdigit():
      raise errors.InputError(
          f"{item!r}: {name} takes {' and '.join(k + '=INT' for k in allowed)}")
    parsed[key] = int(value)
  for key, low in allowed.items():
    if low is not None and parsed.get(key, low) < low:
      raise errors.InputError(f"{item!r}: {key} must be >= {low}")
  if name == "branches" and parsed["n"] < 2 * parsed.get("k", 2) + 1:
    raise errors.InputError(f"{item!r}: N must be at least 2K+1 (each "
                            "branch needs two ops, plus the join)")
  return parsed


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
  gpu, cpu, out_bytes = _log_uniform_costs(rng, num_nodes, (2.0, 500.0),
                                          (4e3, 16e6))
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


def random_branches_graph(num_nodes: int, *, branches: int = 2, seed: int = 0,
                          name: str = "branches") -> op_graph.OpGraph:
  """`branches` independent chains of ops, joined by one op at the end.

  Like the towers of a multi-tower model or the members of an ensemble:
  work that can run side by side, worth splitting only where the links are
  fast relative to the ops. Each branch starts at an op holding a variable
  and is a chain in which an op also reads the op two back now and then.
  Branch lengths vary by up to +-30%; nodes are numbered branch by branch, so
  the topological order runs through one branch after another (as traced
  TF code does). Names are flat (`op<i>`), so the policy must tell the
  branches apart by structure and position. GPU costs are log-uniform in
  5-500 us (CPU 5-20x slower), outputs log-uniform in 4 KB-4 MB.
  """
  rng = np.random.default_rng(seed)
  weights = rng.uniform(0.7, 1.3, branches)
  sizes = np.maximum(2, np.floor(weights / weights.sum() *
                                 (num_nodes - 1))).astype(int)
  sizes[-1] = max(2, num_nodes - 1 - int(sizes[:-1].sum()))
  total = int(sizes.sum()) + 1
  src, dst, ends, memory = [], [], [], np.zeros(total, np.int64)
  start = 0
  for size in sizes:
    memory[start] = int(rng.integers(1 << 20, 32 << 20))
    for i in range(start + 1, start + size):
      src.append(i - 1)
      dst.append(i)
      if i - 2 >= start and rng.random() < 0.2:
        src.append(i - 2)
        dst.append(i)
    ends.append(start + size - 1)
    start += size
  src += ends
  dst += [total - 1] * len(ends)
  gpu, cpu, out_bytes = _log_uniform_costs(rng, total, (5.0, 500.0),
                                          (4e3, 4e6))
  names = [f"op{i}" for i in range(total)]
  src = np.asarray(src, np.int64)
  return op_graph.OpGraph.build(
      name=name, node_names=names, op_types=["Synthetic"] * total,
      costs={"GPU": gpu, "CPU": cpu}, output_bytes=out_bytes,
      memory_bytes=memory, edge_src=src, edge_dst=np.asarray(dst, np.int64),
      edge_bytes=out_bytes[src], fetches=[names[-1]],
      metadata={"generator": "branches", "branches": branches, "seed": seed})


def _log_uniform_costs(rng, n: int, gpu_us, out_bytes):
  """GPU op times and output sizes log-uniform in their ranges; CPU 5-20x."""
  gpu = np.exp(rng.uniform(np.log(gpu_us[0]), np.log(gpu_us[1]), n))
  cpu = gpu * rng.uniform(5.0, 20.0, n)
  sizes = np.exp(rng.uniform(np.log(out_bytes[0]), np.log(out_bytes[1]),
                             n)).astype(np.int64)
  return gpu, cpu, sizes


def random_grid_graph(num_nodes: int, seed: int = 0) -> op_graph.OpGraph:
  """A layered random DAG with GNMT-like size ratios (~1.5 edges per op).

  Layers of about sqrt(N)/2 ops; each op links, each with probability one
  half, to the ops one layer, one layer and one op, and two layers behind
  it. 37 op types, exponential costs (GPU mean 20 us, CPU 200 us), ~10% of
  the ops hold variables. Sized for the policy forward-pass benchmark.
  """
  rng = np.random.default_rng(seed)
  width = max(1, int(np.sqrt(num_nodes) / 2))
  layer = np.arange(num_nodes) // width
  src, dst = [], []
  for offset in (width, width + 1, 2 * width):  # links to the layers behind
    take = rng.random(num_nodes) < 0.5
    nodes = np.flatnonzero(take & (np.arange(num_nodes) >= offset))
    src.append(nodes - offset)
    dst.append(nodes)
  src, dst = np.concatenate(src), np.concatenate(dst)
  keep = layer[src] < layer[dst]
  src, dst = src[keep], dst[keep]
  pairs = np.unique(np.stack([src, dst], 1), axis=0)
  return op_graph.OpGraph.build(
      name=f"synthetic{num_nodes}",
      node_names=[f"op{i}" for i in range(num_nodes)],
      op_types=[f"Op{i % 37}" for i in range(num_nodes)],
      costs={"GPU": rng.exponential(20.0, num_nodes),
             "CPU": rng.exponential(200.0, num_nodes)},
      output_bytes=rng.integers(0, 1 << 22, num_nodes),
      memory_bytes=np.where(rng.random(num_nodes) < 0.1,
                            rng.integers(0, 1 << 24, num_nodes), 0),
      edge_src=pairs[:, 0], edge_dst=pairs[:, 1],
      edge_bytes=rng.integers(0, 1 << 22, pairs.shape[0]))
