"""Benchmark scripts: each prints a table and writes JSON (see DESIGN.md s7)."""
