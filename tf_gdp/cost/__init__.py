"""Device kinds, topologies and the cost side of placement."""
