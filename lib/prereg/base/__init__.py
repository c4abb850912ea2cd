"""Base utilities, the bottom layer: git plumbing (:mod:`.gitrepo`), hashing and canonical
JSON (:mod:`.hashing`), seeds (:mod:`.seeds`), JSON schemas (:mod:`.schema`), arrays
(:mod:`.arrays`), typed plan parameters (:mod:`.typed_settings`) and this process's
provenance (:mod:`.provenance`). Nothing here imports prereg above this package.
"""
