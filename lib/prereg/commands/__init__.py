"""The commands behind ``prereg``'s subcommands that are more than a call into a layer
below: ``prereg demo`` (:mod:`.demo`, :mod:`.demo_steps`), ``prereg init``
(:mod:`.scaffold`), ``prereg status`` (:mod:`.status`) and the report pages
(:mod:`.report`).
"""
