"""The domain every service shares: pure rules with no bus, store or service behind them.

- :mod:`shared.domain.classes`: request classes by input × output length, their SLOs and
  the output-length predictor contract;
- :mod:`shared.domain.plan`: what an enforced plan asks of workers (parking) and of the
  DVFS agents (pool clock caps);
- :mod:`shared.domain.projection`: throttLL'eM's batch and KV projection (Eq. 1–2), per
  iteration for admission and per horizon segment for predictive DVFS;
- :mod:`shared.domain.load_forecast`: the planner's request-rate forecast;
- :mod:`shared.domain.best_window`: the carbon-aware-sdk "best window" search.

Services import these modules, never each other (``tests/unit/test_import_rules.py``).
Nothing is re-exported here, so importing one module does not pull in the others' numpy
and pandas.
"""
