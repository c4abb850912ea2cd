"""prereg's pytest runtime, the modules :mod:`prereg.plugin`'s hooks delegate to.

In import order (each module imports only those before it): :mod:`~.roles` (the options,
the role a process plays, a software run's collection: all that a process without a
research role loads); :mod:`~.process_run` (:class:`~.process_run.ProcessRun`, the stash
keys, the experiments' helpers);
:mod:`~.signals` and :mod:`~.terminal`; :mod:`~.collection`, :mod:`~.items` (the item
side), :mod:`~.workers` (the xdist bridge) and :mod:`~.listing`; :mod:`~.controller`;
:mod:`~.launcher`. The option policy is :mod:`prereg.runtime.option_policy`.
"""
