"""Transformer-XL placer: relative attention, segment memory, ablation."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tf_gdp.policy import placer


def _sinusoid(distance, size):
  inverse = 1.0 / 10000.0 ** (np.arange(0, size, 2) / size)
  return np.concatenate([np.sin(distance * inverse), np.cos(distance * inverse)])


def test_relative_attention_matches_a_direct_per_pair_computation():
  rng = np.random.default_rng(0)
  seg_len, mem_len, hidden, heads = 3, 2, 8, 2
  layer = placer.RelativeSegmentAttention(heads, seed=1)
  segments = rng.normal(size=(1, 2, seg_len, hidden)).astype(np.float32)
  memory = rng.normal(size=(1, 2, mem_len, hidden)).astype(np.float32)
  key_mask = np.ones((1, 2, mem_len + seg_len), bool)
  key_mask[0, 0, :mem_len] = False  # the first segment has no memory
  key_mask[0, 1, -1] = False        # and the last key is padding
  # Non-zero u, v so that both bias terms are exercised.
  layer((segments, memory, key_mask))
  for weight in (layer._content_bias, layer._position_bias):  # pylint: disable=protected-access
    weight.assign(rng.normal(size=weight.shape))
  got = layer((segments, memory, key_mask)).numpy()

  wq, wk, wv, wr, wo, u, v = (w.numpy() for w in (
      layer._query, layer._key, layer._value, layer._relative,  # pylint: disable=protected-access
      layer._output, layer._content_bias, layer._position_bias))  # pylint: disable=protected-access
  head = hidden // heads
  want = np.zeros_like(got)
  for s in range(2):
    keys = np.concatenate([memory[0, s], segments[0, s]])
    q = np.einsum("ih,hnd->ind", segments[0, s], wq)
    k = np.einsum("jh,hnd->jnd", keys, wk)
    val = np.einsum("jh,hnd->jnd", keys, wv)
    for i in range(seg_len):
      scores = np.full((heads, mem_len + seg_len), -1e9)
      for j in range(mem_len + seg_len):
        if not key_mask[0, s, j]:
          continue
        r = np.einsum("h,hnd->nd", _sinusoid(mem_len + i - j, hidden), wr)
        scores[:, j] = (((q[i] + u) * k[j]).sum(-1) +
                        ((q[i] + v) * r).sum(-1)) / math.sqrt(head)
      weights = np.exp(scores - scores.max(-1, keepdims=True))
      weights /= weights.sum(-1, keepdims=True)
      attended = np.einsum("nj,jnd->nd", weights, val)
      want[0, s, i] = np.einsum("nd,ndh->h", attended, wo)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _run(layer, states, graph_embedding=None, mask=None):
  batch, n, _ = states.shape
  mask = np.ones((batch, n), bool) if mask is None else mask
  if graph_embedding is None:
    graph_embedding = np.zeros((batch, 6), np.float32)
  return layer((tf.constant(states), mask, graph_embedding)).numpy()


def _influence(layer, n, source, hidden=8):
  """Positions whose output changes when the input at `source` changes."""
  rng = np.random.default_rng(1)
  states = rng.normal(size=(1, n, hidden)).astype(np.float32)
  base = _run(layer, states)
  states[0, source] += rng.normal(size=hidden).astype(np.float32)
  changed = np.abs(_run(layer, states) - base).max(-1)[0] > 1e-6
  return np.flatnonzero(changed)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_information_flows_forward_one_memory_window_per_layer(num_layers):
  layer = placer.TransformerXLPlacer(num_layers=num_layers, num_heads=2,
                                     ffn_size=16, segment_length=4,
                                     memory_length=4)
  # A change in segment 1 (positions 4..7) reaches its own segment and, per
  # layer, one more segment ahead through the memory -- never backwards.
  reached = _influence(layer, 20, source=5)
  assert reached.min() == 4
  assert reached.max() == 4 * (num_layers + 2) - 1


def test_zero_memory_keeps_segments_independent():
  layer = placer.TransformerXLPlacer(num_layers=2, num_heads=2, ffn_size=16,
                                     segment_length=4, memory_length=0)
  assert _influence(layer, 12, source=5).tolist() == [4, 5, 6, 7]


def test_no_gradient_flows_through_the_memory():
  layer = placer.TransformerXLPlacer(num_layers=1, num_heads=2, ffn_size=16,
                                     segment_length=4, memory_length=4)
  states = tf.Variable(np.random.default_rng(2).normal(size=(1, 8, 8)),
                       dtype=tf.float32)
  with tf.GradientTape() as tape:
    out = layer((states, np.ones((1, 8), bool), np.zeros((1, 6), np.float32)))
    second_segment = tf.reduce_sum(out[:, 4:] ** 2)
  gradient = tape.gradient(second_segment, states).numpy()
  assert not gradient[0, :4].any()  # the memory is a constant
  assert gradient[0, 4:].any()


def test_padding_and_sequence_length_do_not_change_real_outputs():
  layer = placer.TransformerXLPlacer(num_layers=2, num_heads=2, ffn_size=16,
                                     segment_length=4, memory_length=3)
  rng = np.random.default_rng(3)
  real = rng.normal(size=(1, 10, 8)).astype(np.float32)
  exact = _run(layer, real)
  padded = np.concatenate([real, rng.normal(size=(1, 7, 8))], 1).astype(
      np.float32)
  mask = np.arange(17)[None] < 10
  np.testing.assert_allclose(_run(layer, padded, mask=mask)[:, :10], exact,
                             rtol=1e-5, atol=1e-5)


def test_graph_embedding_conditions_the_placer_only_with_superposition():
  rng = np.random.default_rng(4)
  states = rng.normal(size=(1, 6, 8)).astype(np.float32)
  one, other = (rng.normal(size=(1, 6)).astype(np.float32) for _ in range(2))
  for kind in (placer.TransformerXLPlacer, placer.FeedForwardPlacer):
    kwargs = dict(ffn_size=16)
    if kind is placer.TransformerXLPlacer:
      kwargs.update(num_heads=2, segment_length=4)
    gated = kind(superposition_on=True, **kwargs)
    assert not np.allclose(_run(gated, states, one), _run(gated, states, other))
    plain = kind(superposition_on=False, **kwargs)
    np.testing.assert_allclose(_run(plain, states, one),
                               _run(plain, states, other))


def test_feed_forward_placer_treats_nodes_independently():
  layer = placer.FeedForwardPlacer(num_layers=2, ffn_size=16)
  assert _influence(layer, 10, source=3).tolist() == [3]
