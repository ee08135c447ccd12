"""TF-GNN encoder: padding never leaks, both edge directions carry messages."""

import numpy as np
import tensorflow_gnn as tfgnn

from tf_gdp.cost import topology
from tf_gdp.graph import op_graph
from tf_gdp.policy import encoder
from tf_gdp.policy import features


def _random_graph(rng, n, name="r"):
  edges = sorted({(int(a), int(b)) for a, b in rng.integers(0, n, (2 * n, 2))
                  if a < b})
  return op_graph.OpGraph.build(
      name=name, node_names=[f"n{i}" for i in range(n)],
      op_types=[f"Op{i % 5}" for i in range(n)],
      costs={"GPU": rng.exponential(30.0, n), "CPU": rng.exponential(300.0, n)},
      output_bytes=rng.integers(0, 1 << 20, n), memory_bytes=np.zeros(n, int),
      edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
      edge_bytes=rng.integers(0, 1 << 20, len(edges)))


def _observation(graphs, **maxima):
  topo = topology.get("p100x4")
  singles = [features.as_tensors(features.policy_inputs(g, topo, **maxima))
             for g in graphs]
  return {k: np.stack([s[k] for s in singles]) for k in singles[0]}


_MAXIMA = dict(max_nodes=40, max_edges=90, max_groups=40, max_devices=8)


def test_graph_tensor_holds_only_real_nodes_and_edges():
  rng = np.random.default_rng(0)
  graphs = [_random_graph(rng, 12), _random_graph(rng, 30)]
  obs = _observation(graphs, **_MAXIMA)
  states = np.arange(2 * 40, dtype=np.float32).reshape(2, 40, 1)
  graph = encoder.batch_to_graph_tensor(states, obs["edge_features"], obs)
  assert graph.node_sets[encoder.NODE_SET].sizes.numpy().tolist() == [12, 30]
  sizes = [g.num_edges for g in graphs]
  for name in (encoder.FORWARD, encoder.BACKWARD):
    assert graph.edge_sets[name].sizes.numpy().tolist() == sizes
  forward = graph.edge_sets[encoder.FORWARD].adjacency
  # Component 1's first edge, offset by component 0's 12 nodes.
  first = sizes[0]
  assert forward.source[first].numpy() == obs["edge_src"][1, 0] + 12
  assert forward.target[first].numpy() == obs["edge_dst"][1, 0] + 12
  backward = graph.edge_sets[encoder.BACKWARD].adjacency
  np.testing.assert_array_equal(backward.source.numpy(), forward.target.numpy())
  node_states = graph.node_sets[encoder.NODE_SET][tfgnn.HIDDEN_STATE].numpy()
  np.testing.assert_array_equal(node_states[:12, 0], np.arange(12))
  np.testing.assert_array_equal(node_states[12:, 0], np.arange(40, 70))


def test_padding_and_batch_mates_do_not_change_embeddings():
  rng = np.random.default_rng(1)
  small, other = _random_graph(rng, 12), _random_graph(rng, 30)
  layer = encoder.GraphEncoder(hidden_size=16, num_rounds=2)
  exact_nodes, exact_graph = layer(_observation([small]))
  padded_nodes, padded_graph = layer(_observation([small, other], **_MAXIMA))
  np.testing.assert_allclose(padded_nodes[0, :12], exact_nodes[0], atol=1e-5)
  np.testing.assert_allclose(padded_graph[0], exact_graph[0], atol=1e-5)
  assert not padded_nodes.numpy()[0, 12:].any()
  assert exact_graph.shape == (1, layer.graph_embedding_size)


def test_messages_flow_in_both_directions():
  # A chain a -> b -> c: changing c's features must reach a (backward) and
  # changing a's must reach c (forward), within two rounds.
  graph = op_graph.OpGraph.build(
      name="chain", node_names=["a", "b", "c"], op_types=["X"] * 3,
      costs={"GPU": [1.0, 2.0, 3.0]}, output_bytes=[8, 8, 8],
      memory_bytes=[0, 0, 0], edge_src=[0, 1], edge_dst=[1, 2],
      edge_bytes=[8, 8])
  layer = encoder.GraphEncoder(hidden_size=32, num_rounds=2)
  obs = _observation([graph])
  base = layer(obs)[0].numpy()[0]
  for changed, watched in ((2, 0), (0, 2)):
    moved = {k: v.copy() for k, v in obs.items()}
    moved["node_features"][0, changed] += 0.5
    assert not np.allclose(layer(moved)[0].numpy()[0, watched], base[watched])


def test_a_graph_with_no_real_nodes_encodes_to_zeros():
  spec = features.observation_spec(8, 8, 8, 4)
  zeros = {k: np.zeros((2,) + shape, dtype) for k, (shape, dtype) in
           spec.items()}
  nodes, graph = encoder.GraphEncoder(hidden_size=8, num_rounds=1)(zeros)
  assert not nodes.numpy().any() and not graph.numpy().any()
