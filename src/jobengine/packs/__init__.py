"""Task packs: versioned, content-addressed bundles of task code that run on workers once approved.

- :mod:`~jobengine.packs.manifest` — the manifest (``jobengine-pack.yaml`` / ``.toml``), validated strictly
- :mod:`~jobengine.packs.archive` — reproducible build, guarded streaming extraction
- :mod:`~jobengine.packs.registry` — upload, immutability, the approval workflow, verified reads
- :mod:`~jobengine.packs.jobs` — jobs naming ``pack@version:task``, resolved to a digest at enqueue
- :mod:`~jobengine.packs.loader` — workers that download, verify, unpack and register packs
"""
