"""``mmgrpo sweep``: hyperparameter search over config keys with Optuna (TPE + median pruning).

:mod:`space` reads and samples the search space, :mod:`study` runs the trials (each a normal
run folder, trained in its own process by :mod:`trial`), :mod:`summary` writes ``sweep.md``.
"""
