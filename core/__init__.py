"""The ground floor: what every other package of trainsim speaks, importing nothing of them.

- :mod:`core.vocab`: the closed vocabularies as enums (lanes, kinds, phases, op classes,
  collectives, runtimes, offload kinds);
- :mod:`core.taskgraph`: ``Op``, ``Task`` and ``TaskGraph``, the work the engine runs;
- :mod:`core.errors`: the one-line validation errors of every config and setting.

``topo``, ``schedules``, ``sim`` and ``profiler`` import from here; nothing here imports them
(``tests/core/test_layering.py`` checks it).
"""
