"""The standalone worker daemon: registration with the master(s), executors, web UI, CLI.

Why a package: Spark's worker is several cooperating parts - its decisions as a sans-I/O
state machine (`state.py`), the `Worker` endpoint that carries them out (`worker.py`), one
`ExecutorRunner` per executor process (`executor_runner.py`), the web UI (`http.py`) and
the command line (`cli.py`: `ember worker`, `start-worker`, `stop-worker`).
`python -m ember.deploy.worker` runs `cli.main`.
"""
