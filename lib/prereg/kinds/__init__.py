"""What a stage kind is built from, above the evidence: the stage kind interface and its
loading (:mod:`.stages`), the extension points (:mod:`.registry`), plans (:mod:`.plans`),
an item's context (:mod:`.context`), what most kinds repeat (:mod:`.helpers`) and the
building blocks of a report section (:mod:`.report`). :mod:`prereg.api` exports the public
part; nothing here imports the decisions, the runtime or the commands.
"""
