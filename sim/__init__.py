"""The simulator: the SimPy engine, the Timeline, metrics, reports and the CLI."""
