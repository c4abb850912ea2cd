"""RP002A: the statistical pipeline's worlds, models, training and analysis."""
