"""The post-mortem as data: incidents, costs and hypotheses filled from the log (seed 003)."""
