"""The FastAPI service (app factory, routes, schemas). It reads and queues through `db` and `autotuner.launch.lookup`."""
