"""Benchmark scripts: each prints a table and writes JSON.

Run one with `python -m tf_gdp.bench.<name>`: placement quality of the
baselines and GDP and its robustness to cost-model error, GDP against local
search and HDP at equal evaluation budgets, the pre-trained policy beside a
random one and uniform logits on unseen graphs and topologies, GDP on real step
times, the simulator's speed and its agreement with Grappler and with
measured step and transfer times, and the speed of training iterations and
policy forward passes. Their results and the
exact commands are in docs/BENCHMARKS.md; `reliability_check` runs the cases
of docs/RELIABILITY.md instead.
"""
