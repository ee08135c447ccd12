"""GraphSAGE-style encoder of op graphs, built on TF-GNN.

The policy sees each op through its neighbourhood: an op's cost matters less
than what feeds it, what it feeds, and how many bytes cross each edge. The
encoder turns the padded observation arrays (see `features`) into a TF-GNN
`GraphTensor` with one graph component per batch element, holding only the
real nodes and edges, so padding can never leak into messages. It then runs
a few rounds of message passing in both edge directions and returns node
embeddings (padded back to [B, N, H]) and a pooled graph embedding.
"""

import tensorflow as tf
import tensorflow_gnn as tfgnn

from tf_gdp.graph import scopes
from tf_gdp.policy import compat
from tf_gdp.policy import features

NODE_SET = "ops"
FORWARD = "forward"    # data/control edges, producer -> consumer
BACKWARD = "backward"  # the same edges reversed, consumer -> producer
EDGE_FEATURES = "features"
_SCOPE_EMBEDDING_SIZE = 8


def batch_to_graph_tensor(node_states: tf.Tensor, edge_features: tf.Tensor,
                          observation: dict) -> tfgnn.GraphTensor:
  """Merges a padded batch into one GraphTensor of B components.

  Args:
    node_states: float[B, N, S] initial node states.
    edge_features: float[B, E, F] edge features.
    observation: the batched observation dict (`node_mask`, `edge_mask`,
      `edge_src`, `edge_dst` are read).

  Returns:
    A scalar GraphTensor; component b holds the real nodes and edges of batch
    element b in their padded order, so batch element b's k-th real node is
    the k-th node of component b. Edges touching a padding node are dropped.
  """
  node_mask = tf.cast(observation["node_mask"], tf.bool)
  last = tf.shape(node_mask)[1] - 1
  edge_src = tf.clip_by_value(tf.cast(observation["edge_src"], tf.int32), 0,
                              last)
  edge_dst = tf.clip_by_value(tf.cast(observation["edge_dst"], tf.int32), 0,
                              last)
  # An edge counts only if both ends are real nodes. `features` never emits
  # anything else, but tf-agents builds networks on random samples of the
  # spec, and a dangling index would silently join two components.
  edge_mask = (tf.cast(observation["edge_mask"], tf.bool) &
               tf.gather(node_mask, edge_src, batch_dims=1) &
               tf.gather(node_mask, edge_dst, batch_dims=1))
  num_nodes = tf.reduce_sum(tf.cast(node_mask, tf.int32), axis=1)
  num_edges = tf.reduce_sum(tf.cast(edge_mask, tf.int32), axis=1)
  # Merged index of each real node: its rank among all real nodes of the
  # batch (the identity on each graph's prefix when masks are prefixes).
  merged_index = tf.reshape(
      tf.cumsum(tf.reshape(tf.cast(node_mask, tf.int32), [-1])) - 1,
      tf.shape(node_mask))
  edge_where = tf.where(edge_mask)
  src = tf.gather_nd(merged_index, tf.stack(
      [edge_where[:, 0], tf.cast(tf.gather_nd(edge_src, edge_where),
                                 tf.int64)], axis=1))
  dst = tf.gather_nd(merged_index, tf.stack(
      [edge_where[:, 0], tf.cast(tf.gather_nd(edge_dst, edge_where),
                                 tf.int64)], axis=1))
  edge_values = tf.gather_nd(edge_features, edge_where)
  edge_fields = {EDGE_FEATURES: edge_values}
  return tfgnn.GraphTensor.from_pieces(
      node_sets={
          NODE_SET: tfgnn.NodeSet.from_fields(
              sizes=num_nodes,
              features={tfgnn.HIDDEN_STATE: tf.boolean_mask(node_states,
                                                            node_mask)}),
      },
      edge_sets={
          FORWARD: tfgnn.EdgeSet.from_fields(
              sizes=num_edges, features=edge_fields,
              adjacency=tfgnn.Adjacency.from_indices(
                  source=(NODE_SET, src), target=(NODE_SET, dst))),
          BACKWARD: tfgnn.EdgeSet.from_fields(
              sizes=num_edges, features=edge_fields,
              adjacency=tfgnn.Adjacency.from_indices(
                  source=(NODE_SET, dst), target=(NODE_SET, src))),
      })


class GraphEncoder(tf.keras.layers.Layer):
  """Op-type embedding + features -> GraphSAGE rounds -> node/graph embeddings.

  Each round updates every op from the mean and max of messages from its
  producers and, separately, from its consumers (a message is a ReLU layer
  over the neighbour's state and the edge's features), combined with the op's
  own state in a residual block. Separate weights per direction matter: a
  producer and a consumer say different things about where an op should go.
  """

  def __init__(self, hidden_size: int = 64, num_rounds: int = 3,
               op_embedding_size: int = 16, seed: int = 0,
               scope_features: bool = True, **kwargs):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.num_rounds = num_rounds
    self.op_embedding_size = op_embedding_size
    # False: the inputs of policies saved before scope coordinates existed
    # (the scope columns and ids are ignored; `compat`).
    self.scope_features = scope_features
    seeds = iter(range(seed, seed + 1000))

    def dense(units, activation=None, name=None):
      return tf.keras.layers.Dense(
          units, activation=activation, name=name,
          kernel_initializer=tf.keras.initializers.GlorotUniform(next(seeds)))

    self._op_embedding = tf.keras.layers.Embedding(
        features.OP_VOCAB, op_embedding_size, name="op_embedding",
        embeddings_initializer=tf.keras.initializers.RandomUniform(
            -0.05, 0.05, seed=next(seeds)))
    if scope_features:
      self._scope_embedding = tf.keras.layers.Embedding(
          scopes.SCOPE_VOCAB, _SCOPE_EMBEDDING_SIZE, name="scope_embedding",
          embeddings_initializer=tf.keras.initializers.RandomUniform(
              -0.05, 0.05, seed=next(seeds)))
    self._input_projection = dense(hidden_size, "relu", "input_projection")
    self._rounds = []
    for r in range(num_rounds):
      convolutions = {
          edge_set: tfgnn.keras.layers.SimpleConv(
              dense(hidden_size, "relu"), "mean|max_no_inf",
              receiver_tag=tfgnn.TARGET, receiver_feature=None,
              sender_edge_feature=EDGE_FEATURES, name=f"{edge_set}_conv_{r}")
          for edge_set in (FORWARD, BACKWARD)}
      residual = tf.keras.Sequential(
          [dense(hidden_size, "relu"), dense(hidden_size),
           tf.keras.layers.LayerNormalization()], name=f"residual_{r}")
      self._rounds.append(tfgnn.keras.layers.GraphUpdate(
          node_sets={NODE_SET: tfgnn.keras.layers.NodeSetUpdate(
              convolutions, tfgnn.keras.layers.ResidualNextState(residual))},
          name=f"sage_round_{r}"))
    self._pool = tfgnn.keras.layers.Pool(
        tfgnn.CONTEXT, "mean|max_no_inf", node_set_name=NODE_SET)

  @property
  def graph_embedding_size(self) -> int:
    return 2 * self.hidden_size

  def call(self, observation: dict, training: bool = False):
    """Encodes a padded batch.

    Args:
      observation: batched observation dict with leading dimension B.
      training: Keras training flag.

    Returns:
      (node_embeddings float32[B, N, H], zero at padding nodes;
       graph_embedding float32[B, 2H], mean and max over real nodes).
    """
    node_features = tf.cast(observation["node_features"], tf.float32)
    op_ids = tf.cast(observation["op_type_ids"], tf.int32)
    pieces = [node_features, self._op_embedding(op_ids)]
    if self.scope_features:
      scope_ids = tf.cast(observation["scope_ids"], tf.int32)
      embedded = self._scope_embedding(scope_ids)  # [B, N, slots, S]
      pieces.append(tf.reshape(embedded, tf.concat(
          [tf.shape(scope_ids)[:2],
           [scopes.NUM_SLOTS * _SCOPE_EMBEDDING_SIZE]], 0)))
    else:
      pieces[0] = node_features[..., :compat.UNSCOPED_F_NODE]
    initial = self._input_projection(tf.concat(pieces, axis=-1))
    graph = batch_to_graph_tensor(
        initial, tf.cast(observation["edge_features"], tf.float32), observation)
    for update in self._rounds:
      graph = update(graph, training=training)
    graph_embedding = self._pool(graph)
    node_mask = tf.cast(observation["node_mask"], tf.bool)
    states = graph.node_sets[NODE_SET][tfgnn.HIDDEN_STATE]
    padded = tf.scatter_nd(
        tf.where(node_mask), states,
        tf.concat([tf.shape(node_mask, out_type=tf.int64),
                   [self.hidden_size]], axis=0))
    return padded, graph_embedding

  def get_config(self):
    return dict(super().get_config(), hidden_size=self.hidden_size,
                num_rounds=self.num_rounds,
                op_embedding_size=self.op_embedding_size,
                scope_features=self.scope_features)
