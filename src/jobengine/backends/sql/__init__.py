"""The rarely-run CRUD of the SQL backends, written once for SQLite and PostgreSQL.

Each repository module (``keys``, ...) holds its SQL text once, in the subset both databases speak, and its
row decoding once; its operations are coroutines of a :class:`~jobengine.backends.sql.base.Tx` (one open
transaction). A :class:`~jobengine.backends.sql.base.Dialect` fills in what differs (the schema prefix, a
row lock, how an array or a JSON value is written and read). Each backend supplies a
:class:`~jobengine.backends.sql.base.Db` that runs them: SQLite on its store thread in ``BEGIN IMMEDIATE``,
PostgreSQL on its async pool in a transaction. The hot paths (claim, complete, fail, heartbeat, insert,
prune, rescue) stay per backend.
"""
