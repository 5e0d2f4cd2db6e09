"""``trainsim validate --published``: simulate published, measured GPU training runs and compare.

- :mod:`.rows` reads a published-runs file (format: ``docs/published-runs-format.toml``);
- :mod:`.jobs` turns a row into the simulator's Job (with :mod:`.hardware` for the cluster and
  :mod:`.frameworks` for each framework's software choices), marking what it assumed and
  approximated, or says in one line why the row cannot be expressed (:mod:`.notes`);
- :mod:`.run` simulates the rows, :mod:`.summary` aggregates the errors, :mod:`.output` and
  :mod:`.report` present them, :mod:`.command` is the CLI.

Nothing here imports torch.
"""
