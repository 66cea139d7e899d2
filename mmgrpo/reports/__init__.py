"""Run reports: ``report.html`` (curves, sample gallery, evaluations, alerts) and run comparisons.

:mod:`run_data` reads a run folder, :mod:`curves` and :mod:`alerts` are pure functions of its
metrics, :mod:`html` writes one self-contained page (from :mod:`mmgrpo.pagekit`'s building blocks).
"""
