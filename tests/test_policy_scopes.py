"""Scope coordinates: layer numbers read from name scopes, model-agnostic."""

import numpy as np

from tf_gdp.policy import scopes


def test_layers_get_ranks_on_a_common_scale_and_backward_ops_follow():
  names = ["encoder/layer_0/t0/MatMul", "encoder/layer_1/t0/MatMul",
           "encoder/layer_3/t1/MatMul_1",
           "gradient_tape/encoder/layer_3/t1/MatMul",
           "decoder/layer_2/t0/add", "inputs_0"]
  ids, ranks, counts = scopes.scope_coordinates(names)
  # encoder layers 0, 1, 3 -> ranks 0, 1/2, 1; the decoder has one layer.
  np.testing.assert_allclose(ranks[:, 0], [0.0, 0.5, 1.0, 1.0, 0.0, 0.0])
  np.testing.assert_allclose(ranks[:, 1], [0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
  assert ids[0, 0] == ids[4, 0] == scopes.stem_id("layer_")
  assert ids[0, 1] == scopes.stem_id("t") and ids[0, 1] != ids[0, 0]
  # An op's own name (`MatMul_1`, `inputs_0`) is not a scope.
  assert (ids[5] == 0).all() and (ranks[5] == 0).all()
  np.testing.assert_allclose(counts[0, 0], np.log1p(2) / 5)
  assert counts[4, 0] == 0.0


def test_numbers_rank_numerically_and_unnumbered_scopes_do_not_count():
  names = [f"stack_{s}/conv1d/layer_{l}/op" for s in (0, 1)
           for l in (2, 10, 9)]
  ids, ranks, _ = scopes.scope_coordinates(names)
  np.testing.assert_allclose(ranks[:, 0], [0, 0, 0, 1, 1, 1])
  np.testing.assert_allclose(ranks[:, 1], [0, 1, 0.5] * 2)
  assert (ids[:, 1] == scopes.stem_id("layer_")).all()
  assert ((ids >= 0) & (ids < scopes.SCOPE_VOCAB)).all()


def test_stem_spelling_does_not_matter():
  assert (scopes.stem_id("layer_") == scopes.stem_id("layer") ==
          scopes.stem_id("Layer-"))
  assert scopes.stem_id("layer") != scopes.stem_id("t")
