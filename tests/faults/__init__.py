"""Fault injection on a 3-node kcli cluster: proxies that cut links, seeded faults, a workload, a checker.

    from faults.run import RunConfig, run
    result = run(RunConfig(seed=7, faults=4), workdir)
    assert not result.violations, result.report()

Test support, not shipped: `tests/test_faults.py` runs a short seeded schedule,
`tests/bench/bench_faults.py` a long one and prints its figures.
"""
