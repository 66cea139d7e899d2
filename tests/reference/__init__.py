"""Reference-equality tests: mmgrpo's algorithms against other libraries' own code (issue #32).

They run in the reference environment only (``scripts/reference_env.sh``); elsewhere they skip.
"""
