"""The TF-free cost model: topologies, the simulator, lower bound, feasibility."""
