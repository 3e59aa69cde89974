"""Gateway: the front door; stage demands, C1 probes, C2 branches, routing to engine agents."""
