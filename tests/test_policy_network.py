"""GdpPolicy end to end: masks, device counts, padding, switches, checkpoints."""

import numpy as np
import pytest
import tensorflow as tf

from tf_gdp.cost import topology
from tf_gdp.graph import op_graph
from tf_gdp.policy import features
from tf_gdp.policy import network

GIB = 1 << 30
# Small but complete: every piece present, fast on two shared cores.
_SMALL = dict(hidden_size=16, op_embedding_size=4, gnn_rounds=2,
              placer_layers=2, num_heads=2, ffn_size=32, segment_length=4,
              memory_length=4)


def _policy(**overrides):
  return network.GdpPolicy(network.PolicyConfig(**dict(_SMALL, **overrides)))


def _gpus(count, cpu=False):
  kinds = ["GPU"] * count + (["CPU"] if cpu else [])
  devices = [topology.Device(f"/job:localhost/replica:0/task:0/device:{k}:"
                             f"{i if k == 'GPU' else 0}", k, 16 * GIB)
             for i, k in enumerate(kinds)]
  d = len(kinds)
  return topology.custom(f"gpus{count}", devices, np.full((d, d), 12.0),
                         np.full((d, d), 10.0))


def _graph(n=10, seed=0, *, constrained=False):
  """A random DAG; with `constrained`, node 1 is CPU-only, node 2 is pinned
  to GPU:1, and nodes 3, 5, 7 form one colocation group."""
  rng = np.random.default_rng(seed)
  edges = sorted({(int(a), int(b)) for a, b in rng.integers(0, n, (2 * n, 2))
                  if a < b})
  kinds = pins = groups = None
  if constrained:
    kinds = [("CPU",) if i == 1 else None for i in range(n)]
    pins = ["/device:GPU:1" if i == 2 else None for i in range(n)]
    groups = ["g" if i in (3, 5, 7) else None for i in range(n)]
  return op_graph.OpGraph.build(
      name=f"g{seed}", node_names=[f"n{i}" for i in range(n)],
      op_types=[f"Op{i % 3}" for i in range(n)],
      costs={"GPU": rng.exponential(30.0, n), "CPU": rng.exponential(300.0, n)},
      output_bytes=rng.integers(0, 1 << 20, n), memory_bytes=np.zeros(n, int),
      edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
      edge_bytes=rng.integers(0, 1 << 20, len(edges)),
      colocation_groups=groups, device_kinds=kinds, pinned_devices=pins)


def _batch(pairs, **maxima):
  singles = [features.as_tensors(features.policy_inputs(g, t, **maxima))
             for g, t in pairs]
  return {k: np.stack([s[k] for s in singles]) for k in singles[0]}


_MAXIMA = dict(max_nodes=24, max_edges=60, max_groups=24, max_devices=8)


def test_logits_are_masked_for_constraints_and_padding():
  graph = _graph(constrained=True)
  inputs = features.policy_inputs(graph, _gpus(2, cpu=True), **_MAXIMA)
  logits = _policy()(_batch([(graph, _gpus(2, cpu=True))], **_MAXIMA)).numpy()
  assert logits.shape == (1, 24, 8) and logits.dtype == np.float32
  g, d = inputs.num_groups, inputs.num_devices
  assert g == 8 and d == 3
  real = logits[0, :g, :d]
  allowed = inputs.allowed[:g, :d]
  assert (real[~allowed] == network.NEG_LOGIT).all()
  assert (np.abs(real[allowed]) < 100).all()
  assert (logits[0, :, d:] == network.NEG_LOGIT).all()  # padding devices
  assert (logits[0, g:, 0] == 0).all()                  # padding groups
  assert (logits[0, g:, 1:] == network.NEG_LOGIT).all()
  # The CPU-only op may use only the CPU (device 2); the pinned op GPU:1.
  cpu_only = inputs.group_ids[np.flatnonzero(inputs.order == 1)[0]]
  pinned = inputs.group_ids[np.flatnonzero(inputs.order == 2)[0]]
  assert np.flatnonzero(real[cpu_only] > network.NEG_LOGIT).tolist() == [2]
  assert np.flatnonzero(real[pinned] > network.NEG_LOGIT).tolist() == [1]
  # Probabilities are finite and place no mass on masked devices.
  probs = tf.nn.softmax(logits).numpy()
  assert np.isfinite(probs).all()
  assert (probs[0, :g, :d][~allowed] == 0).all()


def test_one_network_serves_two_four_and_eight_devices():
  policy = _policy()
  graph = _graph()
  num_weights = None
  for count in (2, 4, 8):
    logits = policy(_batch([(graph, _gpus(count))])).numpy()
    assert logits.shape == (1, graph.num_nodes, count)
    assert np.isfinite(logits).all() and (logits > network.NEG_LOGIT).all()
    if num_weights is None:
      num_weights = len(policy.weights)
    assert len(policy.weights) == num_weights  # no per-count weights
  # Different topologies batch together when padded to the same maxima.
  mixed = policy(_batch([(graph, _gpus(2)), (graph, _gpus(8))], **_MAXIMA))
  assert mixed.shape == (2, 24, 8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_identical_devices_get_node_dependent_preferences_from_the_start(
    seed):
  # Swapping identical GPUs never changes the reward, so a policy that
  # treats them alike sits on a saddle of the policy gradient. At
  # initialization the preference between two identical GPUs must already
  # differ from op to op by O(1), not by the ~0.02 it did before the device
  # identity term and the node contrast were added.
  logits = _policy(seed=seed)(_batch([(_graph(16, seed=9), _gpus(2))]))
  preference = logits.numpy()[0, :, 0] - logits.numpy()[0, :, 1]
  assert preference.std() > 0.2


def test_padding_and_batch_mates_do_not_change_real_logits():
  policy = _policy()
  graph, other = _graph(10, seed=1), _graph(20, seed=2)
  exact = policy(_batch([(graph, _gpus(4))])).numpy()[0]
  padded = policy(_batch([(other, _gpus(2)), (graph, _gpus(4))],
                         **_MAXIMA)).numpy()[1]
  np.testing.assert_allclose(padded[:10, :4], exact, rtol=1e-4, atol=1e-4)


def test_group_logits_are_the_mean_over_member_nodes():
  node_logits = tf.constant([[[1.0, 2.0], [3.0, 6.0], [5.0, 1.0], [9.0, 9.0]]])
  group_ids = tf.constant([[0, 1, 0, 2]])
  node_mask = tf.constant([[True, True, True, False]])
  mean = network._group_mean(node_logits, group_ids, node_mask, 3)  # pylint: disable=protected-access
  np.testing.assert_allclose(mean[0], [[3.0, 1.5], [3.0, 6.0], [0.0, 0.0]])


@pytest.mark.parametrize("switch", [dict(superposition=False),
                                    dict(placer="feedforward")])
def test_ablation_switches_change_the_model(switch):
  obs = _batch([(_graph(), _gpus(4))])
  full, ablated = _policy(), _policy(**switch)
  full_logits, ablated_logits = full(obs).numpy(), ablated(obs).numpy()
  assert full.count_params() != ablated.count_params()
  assert not np.allclose(full_logits, ablated_logits)


def test_same_seed_same_weights_other_seed_other_weights():
  obs = _batch([(_graph(), _gpus(4))])
  first = _policy(seed=3)(obs).numpy()
  np.testing.assert_array_equal(_policy(seed=3)(obs).numpy(), first)
  assert not np.allclose(_policy(seed=4)(obs).numpy(), first)


def test_checkpoint_round_trip_gives_identical_logits(tmp_path):
  obs = _batch([(_graph(constrained=True), _gpus(2, cpu=True))], **_MAXIMA)
  saved = _policy(seed=1)
  want = saved(obs).numpy()
  path = tf.train.Checkpoint(policy=saved).write(str(tmp_path / "ckpt"))
  restored = _policy(seed=2)  # different initial weights, then restored
  status = tf.train.Checkpoint(policy=restored).read(path)
  got = restored(obs).numpy()
  status.assert_consumed()
  np.testing.assert_array_equal(got, want)


def test_any_number_of_outer_dimensions():
  policy = _policy()
  obs = _batch([(_graph(), _gpus(4)), (_graph(seed=5), _gpus(4))], **_MAXIMA)
  batched = policy(obs).numpy()
  unbatched = policy({k: v[1] for k, v in obs.items()}).numpy()
  np.testing.assert_allclose(unbatched, batched[1], atol=1e-5)
  time_major = policy({k: v[None] for k, v in obs.items()}).numpy()
  assert time_major.shape == (1,) + batched.shape
  assert policy.graph_embedding(obs).shape == (2, 2 * _SMALL["hidden_size"])


def test_spec_shaped_zeros_give_finite_logits_in_a_tf_function():
  # tf-agents builds networks from all-zero observations of the spec.
  spec = features.observation_spec(16, 16, 16, 4)
  zeros = {k: tf.zeros((3,) + shape, tf.as_dtype(dtype))
           for k, (shape, dtype) in spec.items()}
  logits = tf.function(_policy())(zeros).numpy()
  assert logits.shape == (3, 16, 4) and np.isfinite(logits).all()


def test_random_observations_of_the_spec_give_finite_logits():
  # tf-agents may also build on a random sample: masks need not be prefixes
  # and edges may dangle.
  rng = np.random.default_rng(7)
  spec = features.observation_spec(16, 20, 16, 4)
  sample = {}
  for name, (shape, dtype) in spec.items():
    shape = (2,) + shape
    if dtype == np.bool_:
      sample[name] = rng.random(shape) < 0.5
    elif dtype == np.int32:
      high = {"op_type_ids": features.OP_VOCAB, "group_ids": 16,
              "scope_ids": 256}.get(name, 16)
      sample[name] = rng.integers(0, high, shape).astype(np.int32)
    else:
      sample[name] = rng.normal(size=shape).astype(np.float32)
  logits = _policy()(sample).numpy()
  assert logits.shape == (2, 16, 4) and np.isfinite(logits).all()


def test_every_weight_gets_a_gradient():
  policy = _policy()
  obs = _batch([(_graph(constrained=True), _gpus(2, cpu=True)),
                (_graph(16, seed=3), _gpus(4))], **_MAXIMA)
  actions = tf.zeros((2, 24), tf.int32)
  with tf.GradientTape() as tape:
    logits = policy(obs, training=True)
    log_probs = -tf.nn.sparse_softmax_cross_entropy_with_logits(actions,
                                                                logits)
    loss = -tf.reduce_sum(log_probs * tf.cast(obs["group_mask"], tf.float32))
  gradients = tape.gradient(loss, policy.trainable_variables)
  for variable, gradient in zip(policy.trainable_variables, gradients):
    assert gradient is not None, variable.name
    assert np.isfinite(tf.convert_to_tensor(gradient).numpy()).all()


def test_config_is_validated():
  with pytest.raises(ValueError, match="placer"):
    network.PolicyConfig(placer="lstm")
  with pytest.raises(ValueError, match="num_heads"):
    network.PolicyConfig(hidden_size=10, num_heads=4)


def test_config_round_trips_through_a_dict():
  config = network.PolicyConfig(hidden_size=32, placer="feedforward")
  assert network.PolicyConfig.from_dict(config.to_dict()) == config
  with pytest.raises(ValueError, match="unknown PolicyConfig fields"):
    network.PolicyConfig.from_dict({"hidden": 3})


def test_shifted_centres_split_six_stages_differently_over_four_gpus():
  from tf_gdp.policy import devices  # pylint: disable=g-import-not-at-top
  inputs = features.policy_inputs(_layers_graph(), _gpus(4))
  stages = np.stack([np.arange(6) / 5, np.ones(6)], axis=-1)[None]
  args = (stages, inputs.device_features[None], inputs.device_mask[None])
  even = devices.stage_direction(*args).numpy()[0]
  np.testing.assert_array_equal(even.argmax(-1), [0, 1, 1, 2, 2, 3])
  shifted = devices.stage_direction(
      *args, centre_shift=np.array([[0.5, 0.5, 0.0, 0.5]], np.float32))
  np.testing.assert_array_equal(shifted.numpy()[0].argmax(-1),
                                [0, 0, 1, 2, 2, 3])  # (2, 1, 2, 1) per GPU


def test_exploration_noise_keeps_the_masks():
  policy = _policy()
  batch = _batch([(_graph(constrained=True), _gpus(2, cpu=True))], **_MAXIMA)
  noise = 3.0 * tf.random.stateless_normal(
      [4, _MAXIMA["max_devices"], features.EXPLORATION_SIZE], seed=[1, 2])
  every = policy.noisy_logits(batch, noise).numpy()
  allowed = batch["allowed"][0] & batch["device_mask"][0][None, :]
  real = batch["group_mask"][0]
  assert (every[:, real][:, ~allowed[real]] <= network.NEG_LOGIT / 2).all()
  assert np.isfinite(every).all()



def _layers_graph():
  """lstm/layer_0..3 (two ops each, a chain), then two unnumbered ops."""
  n = 10
  names = [f"lstm/layer_{i // 2}/op{i}" for i in range(8)] + ["loss/a", "b"]
  return op_graph.OpGraph.build(
      name="layers", node_names=names, op_types=["MatMul"] * n,
      costs={"GPU": np.full(n, 10.0), "CPU": np.full(n, 50.0)},
      output_bytes=np.full(n, 1 << 10), memory_bytes=np.zeros(n, int),
      edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
      edge_bytes=np.full(n - 1, 1 << 10))


def _group_of(graph, topology):
  inputs = features.policy_inputs(graph, topology)
  return {int(node): int(inputs.group_ids[p])
          for p, node in enumerate(inputs.order)}


def test_stage_affinity_sends_the_kth_layer_to_the_kth_gpu():
  graph, devices = _layers_graph(), _gpus(4, cpu=True)
  batch = _batch([(graph, devices)])
  policy = _policy()
  base = policy(batch).numpy()[0]
  # Zero gain at initialization: the same logits as a policy without it.
  np.testing.assert_allclose(_policy(stage_affinity=False)(batch).numpy()[0],
                             base, rtol=1e-5, atol=1e-5)
  policy.affinity._gain.bias.assign([0.3])  # pylint: disable=protected-access
  shift = policy(batch).numpy()[0] - base  # gain 10 * 0.3
  group_of = _group_of(graph, devices)
  for op in range(8):  # stages 0, 1/3, 2/3, 1 sit on the GPUs' centres
    expected = np.zeros(5)
    expected[op // 2] = 3.0
    np.testing.assert_allclose(shift[group_of[op]], expected, atol=1e-4)
  # The unnumbered ops after layer_3 inherit its stage; the CPU never moves.
  for op in (8, 9):
    np.testing.assert_allclose(shift[group_of[op]], [0, 0, 0, 3.0, 0],
                               atol=1e-4)


def test_pipeline_noise_moves_each_stage_to_its_device_per_sample():
  graph, devices = _layers_graph(), _gpus(2)
  batch = _batch([(graph, devices)])
  policy = _policy(stage_affinity=False)  # noise needs no weights
  base = policy(batch).numpy()[0]
  noise = np.zeros((2, 2, features.EXPLORATION_SIZE), np.float32)
  noise[1, 0, features.PIPELINE_NOISE_COLUMN] = 4.0
  shift = policy.noisy_logits(batch, tf.constant(noise)).numpy() - base[None]
  np.testing.assert_allclose(shift[0], 0.0, atol=1e-4)
  group_of = _group_of(graph, devices)
  # 2 GPUs: stage 0 on GPU 0's centre; 1/3, a third of the way to GPU 1,
  # gets the whole gain towards GPU 0, where the stage rule sends it (a
  # soft pull, 2/3 against 1/3 of the gain, would leave it to the logits).
  np.testing.assert_allclose(shift[1][group_of[0]], [4.0, 0.0], atol=1e-4)
  np.testing.assert_allclose(shift[1][group_of[2]], [4.0, 0.0], atol=1e-4)
  np.testing.assert_allclose(shift[1][group_of[4]], [0.0, 4.0], atol=1e-4)
  np.testing.assert_allclose(shift[1][group_of[7]], [0.0, 4.0], atol=1e-4)
  # The second stage rule's column pushes along its own stages (the same
  # ones in a plain chain).
  noise[1, 0] = 0.0
  noise[1, 0, features.PIPELINE_NOISE_COLUMN + 1] = 4.0
  second = policy.noisy_logits(batch, tf.constant(noise)).numpy() - base[None]
  np.testing.assert_allclose(second, shift, atol=1e-4)
  # With shifted centres (a push trying a neighbouring split) the pull
  # stays soft, and the policy settles the boundary layers: GPU 0's centre
  # moved right by 0.1 slot, stage 1/3 is 7/30 slot from it and 2/3 from
  # GPU 1's.
  noise[1, :, features.PIPELINE_SHIFT_COLUMN] = [0.1, 0.0]
  soft = policy.noisy_logits(batch, tf.constant(noise)).numpy() - base[None]
  np.testing.assert_allclose(soft[1][group_of[2]],
                             [4.0 * (1 - 7 / 30), 4.0 / 3], atol=1e-4)
