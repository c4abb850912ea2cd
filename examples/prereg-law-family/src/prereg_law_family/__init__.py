"""An example prereg extension: the RP002A law family ``sticky-erasure``."""
