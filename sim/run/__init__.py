"""Run-level prediction on top of the step: days, dollars and energy to train N tokens when nodes
fail, checkpoints cost time and restarts cost more (issue 27).

It takes the step time, the checkpoint bytes per rank from the memory model and the cluster's
paths, never the other way round (DESIGN.md). One job per module:

- :mod:`sim.run.inputs`: the reliability inputs (failure classes, restart, checkpoint policy, storage).
- :mod:`sim.run.presets`: named inputs from published figures, each with its source.
- :mod:`sim.run.reliability_file`: the ``[reliability]`` TOML table of job and cluster files.
- :mod:`sim.run.checkpoint`: checkpoint bytes and seconds from the plan.
- :mod:`sim.run.ettr`: the closed-form effective training time ratio and its breakdown.
- :mod:`sim.run.interval`: optimum checkpoint intervals (Young, Daly, availability-optimal, numerical).
- :mod:`sim.run.montecarlo`: the seeded Monte Carlo of whole runs (days P10/P50/P90).
- :mod:`sim.run.power`: per-device power by activity; :mod:`sim.run.energy`: the step's waveform.
- :mod:`sim.run.predict`: the ``run`` object of ``simulate --json``.
"""
