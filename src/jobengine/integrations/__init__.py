"""Framework glue: enqueue in the application's own database transaction, and run the engine with the app.

- :mod:`jobengine.integrations.sqlalchemy`: the psycopg connection of a SQLAlchemy session (async or sync),
  to pass as ``connection=``: the jobs commit or roll back with the session's rows.
- :mod:`jobengine.integrations.django`: the same on Django's connection, or ``transaction.on_commit`` when the
  job store is another database.
- :mod:`jobengine.integrations.fastapi`: a lifespan that starts and closes the engine, and a dependency
  that hands it to a route.

Each module imports its framework only when imported itself; none is needed by the rest of jobengine. The
guide is ``docs/integrations.md``.
"""
