"""E04: retrieval robustness of frozen code-retrieval harnesses over a Go repository."""
