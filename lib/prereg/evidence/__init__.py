"""Evidence about this process and machine, above the records: the hermetic session's
snapshot and environment (:mod:`.hermetic`), what the process executed and from where
(:mod:`.execution`) and the environment lock, the installed distributions and their files
(:mod:`.envlock`).
"""
