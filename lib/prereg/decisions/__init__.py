"""The decisions about a run, above the stage kinds: the approval (:mod:`.approval`), the
gate that refuses or lets a run spend its id (:mod:`.gate`), what an approval binds and
how each binding is judged (:mod:`.bindings`), the audit that re-judges a run from its
artifacts (:mod:`.audit`) and the run manifest both read (:mod:`.manifest`).
"""
