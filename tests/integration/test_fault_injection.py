"""Fault injection, in CI: `autotuner serve` and two workers on SQLite and on PostgreSQL while other processes read
the database (the sqlite3 shell, `show`, `export`, `tune --here`), a worker killed with SIGKILL holding a job and the
service restarted. Every job the service acknowledged is done exactly once and visible to every process, and every
stored run reads back. benchmarks/fault_soak.py runs the same for many rounds (its figures: benchmarks/RESULTS.md)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from benchmarks.fault_soak import soak


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_every_acknowledged_job_is_done_once_through_kills_restarts_and_readers(url, tmp_path):
    tally = soak(url, tmp_path, rounds=1, jobs_per_round=4, drain_s=180)
    assert tally.acknowledged == 4 and tally.kills == 1 and tally.restarts == 1 and tally.reads >= 2
    assert tally.ok, json.dumps(asdict(tally), indent=1)
