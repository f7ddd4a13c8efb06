"""The engine's view of the database: what reads results, what writes a tuning run, and the job queue, as small
interfaces (`interfaces`) with one SQL implementation (`database.Store`, through `db`), a launching process's
reads in stdlib sqlite3 (`lazy.LaunchReads`), the database opened on first use (`lazy.LazyStore`) and a
worker's writes through outages (`job_store.JobStore`). Also: how a stored best is judged current or stale
(`stored_best`), which tuned problem is nearest (`nearest`), the frozen rows handed to the service and the
command line (`rows`), and export and import (`transfer`).

May import: `autotuner.base`, `db`, the ground floor.
"""
