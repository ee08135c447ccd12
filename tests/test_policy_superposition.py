"""Superposition gate: per-graph feature-wise modulation, and its off switch."""

import numpy as np

from tf_gdp.policy import superposition


def test_gate_modulates_each_example_by_its_own_embedding():
  rng = np.random.default_rng(0)
  states = rng.normal(size=(2, 5, 4)).astype(np.float32)
  embedding = rng.normal(size=(2, 3)).astype(np.float32)
  gate = superposition.FeatureWiseGate(seed=1)
  out = gate((states, embedding)).numpy()
  scale = 2.0 / (1.0 + np.exp(-(embedding @ gate._scale.kernel.numpy()  # pylint: disable=protected-access
                                + gate._scale.bias.numpy())))  # pylint: disable=protected-access
  shift = embedding @ gate._shift.kernel.numpy()  # pylint: disable=protected-access
  np.testing.assert_allclose(out, states * scale[:, None] + shift[:, None],
                             rtol=1e-5, atol=1e-5)
  # Example 0's output does not depend on example 1's embedding.
  other = embedding.copy()
  other[1] += 1.0
  np.testing.assert_allclose(gate((states, other)).numpy()[0], out[0])


def test_gate_works_for_any_number_of_inner_dimensions():
  gate = superposition.FeatureWiseGate()
  embedding = np.ones((2, 3), np.float32)
  assert gate((np.ones((2, 4), np.float32), embedding)).shape == (2, 4)
  assert gate((np.ones((2, 3, 5, 4), np.float32), embedding)).shape == (
      2, 3, 5, 4)


def test_zero_embedding_keeps_the_scale():
  gate = superposition.FeatureWiseGate()
  states = np.random.default_rng(1).normal(size=(1, 3, 4)).astype(np.float32)
  np.testing.assert_allclose(gate((states, np.zeros((1, 2), np.float32))),
                             states, rtol=1e-6)


def test_switch_off_is_the_identity_without_weights():
  gate = superposition.make_gate(False)
  states = np.ones((1, 3, 4), np.float32)
  np.testing.assert_array_equal(gate((states, np.ones((1, 2), np.float32))),
                                states)
  assert not gate.trainable_weights
  assert isinstance(superposition.make_gate(True),
                    superposition.FeatureWiseGate)
