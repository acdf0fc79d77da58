"""jobengine against PgQueuer and Procrastinate on PostgreSQL: ``python -m bench.compare --dsn ...``.

See ``__main__.py`` for the orchestration (a separate venv, interleaved runs, one table), ``driver.py`` for
the standard workload on the other systems and ``systems.py`` for how each of them is driven.
"""
