"""The included 3D-parallel trainer (PyTorch-native, torchtitan style), run under torchrun.

Modules, one job each:

- :mod:`.config` — :class:`TrainConfig` (validated run config) and the schedule table (torch-free)
- :mod:`.args` — the shared command-line flags (torch-free)
- :mod:`.model` — the decoder-only transformer built from a ``ModelSpec``
- :mod:`.data` — the deterministic synthetic token stream
- :mod:`.tensor_parallel`, :mod:`.pipeline`, :mod:`.data_parallel`, :mod:`.zero1` — TP/SP,
  PP, DP/FSDP2 and ZeRO-1
- :mod:`.moe`, :mod:`.moe_dispatch`, :mod:`.moe_parallel`, :mod:`.moe_config` — the MoE block,
  its all-to-all token exchange, expert parallelism, and its flags (torch-free)
- :mod:`.actions`, :mod:`.recording`, :mod:`.manifest`, :mod:`.files` — trace ranges and the
  compute slowdown, torch.profiler, the run manifest, atomic writes
- :mod:`.torch_compat` — every private/undocumented torch API used
- :mod:`.train` — the per-rank loop (:func:`train`), :mod:`.__main__` — the torchrun worker

Nothing here imports torch at package import time.
"""
