"""Helpers of the project's checks: scratch projects, toy stages, hosts, fake distributions,
E04 and RP002A scratch projects, LM Studio stand-ins.

Test-only code, never installed: pytest.ini's ``pythonpath = checks`` puts ``checks/`` on
``sys.path``, so every check imports them as ``support.<module>``. What users call to test
their own stages stays in :mod:`prereg.testing` (``ScratchProject``, ``terminal_signals``).
"""
