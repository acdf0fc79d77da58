"""The jobengine benchmark harness (run on demand, never as a test): ``python -m bench --help``.

It runs the standard workload of ``bench/README.md`` (enqueue batch, enqueue single, process, latency)
against one backend and prints the results as a table.
"""
