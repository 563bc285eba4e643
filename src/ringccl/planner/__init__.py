"""The planner: the collectives, time and memory of one training step for a model, a layout and a cluster."""
