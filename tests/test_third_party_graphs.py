"""third_party_graphs: Hugging Face steps are named, and need their library."""

import sys

import pytest

from tf_gdp import errors
from tf_gdp.bench import bench_graphs
from tf_gdp.bench import third_party_graphs


def test_the_steps_are_benchmark_graphs(monkeypatch):
  monkeypatch.setattr(third_party_graphs, "require_library", lambda: None)
  sources = bench_graphs.parse(
      "hf_bert_base,hf_gpt2_small,hf_vit_base,hf_t5_small")
  assert [s.label for s in sources] == list(third_party_graphs.BUILDERS)
  assert all(isinstance(s, bench_graphs.BuiltGraph) for s in sources)


def test_without_transformers_it_says_what_to_install(monkeypatch):
  monkeypatch.setitem(sys.modules, "transformers", None)  # import fails
  with pytest.raises(errors.InputError, match=r'pip install "transformers<5"'):
    third_party_graphs.BUILDERS["hf_gpt2_small"]()
  # A benchmark asking for one stops before it runs anything.
  with pytest.raises(errors.InputError, match=r'pip install "transformers<5"'):
    bench_graphs.parse("layered:30,hf_vit_base")
