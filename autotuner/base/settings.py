"""One settings class, read from AUTOTUNER_* environment variables; built in entry points and passed down."""

from __future__ import annotations

import difflib
import json
import logging
import os
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MIN_SECRET_BYTES = 16  # a shorter compile secret is guessed, and with it any host could sign what others load
MAX_SECONDS = 1e9  # a duration setting past this (about 30 years) would overflow the waits it bounds
MIN_BEATS_PER_LEASE = 3  # a lease shorter than this many heartbeats takes jobs from healthy workers
# AUTOTUNER_* variables that are not settings of a running autotuner: the test suite's and docker-compose's
NOT_SETTINGS = ("TEST_PG_URL", "REQUIRE_BROWSER", "CHROMIUM", "SCREENSHOTS", "PROBE", "PORT", "GPU")
log = logging.getLogger(__name__)
_warned: set[str] = set()


class Settings(BaseSettings):
    # inf, nan and a number past a float's range (1e400 reads as inf) are refused, as no wait or size is endless
    model_config = SettingsConfigDict(env_prefix="AUTOTUNER_", extra="ignore", allow_inf_nan=False)

    db_url: str | None = Field(None, description="SQLAlchemy URL; default: a SQLite file in the user's data dir")
    url: str | None = Field(None, description="Base URL of a remote autotuner service for lookups")
    token: str | None = Field(None, description="Bearer token the service requires for writes")
    tune_on_miss: bool = False  # library calls: queue a tuning job for a problem with no exact result
    on_miss: Literal["tune", "nearest", "default", "error"] = Field(
        "tune", description="A problem with no stored result. autotuner.autotune kernels: tune now in the launching "
                            "process; launch the nearest tuned key's winner and queue the exact key (nearest); "
                            "launch the default and queue it; or raise. Library calls: nearest also queues the "
                            "problem")
    record: bool = Field(False, description="autotuner.autotune kernels: queue a job with the recorded call for "
                                            "every new key")
    torch_op: bool = Field(True, description="Library calls launch torch's own op for a problem whose tune timed it "
                                             "faster than the best config (false: always the tuned kernel)")
    recheck_s: float = Field(60.0, gt=0, description="A launching process asks again this long after an answer "
                             "that is not an exact tuned result (nearest, bucket of a sweep, default), so results "
                             "tuned meanwhile arrive")
    tune_wait_s: float = Field(600.0, gt=0, description="A process that misses a key another process is tuning "
                                                        "waits this long for its winner, then launches the default")
    kernel_cache: bool = Field(True, description="Decorated kernels and the library calls' kernels keep their "
                               "compiled binaries, so a new process's first launch skips Triton's compile-cache "
                               "key")
    kernel_cache_dir: str | None = Field(None, description="Where the kept binaries live; default: a kernels folder "
                                         "in the user's cache dir")
    plugins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Modules that register extra ops on import: a name, names separated by "
                                          "commas, or a JSON list of names")
    kernel_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Modules (or packages, with everything under them) a worker may import to "
                                          "tune a decorated kernel that a job or sweep names (`module:kernel`): a "
                                          "name, names separated by commas, or a JSON list. A job naming any other "
                                          "module fails; the plugins are allowed too")
    import_probe_s: float = Field(300.0, gt=0, description="A job's kernel module is first imported in a child "
                                                          "process: one that crashes, exits or takes longer than "
                                                          "this fails the job, not the worker")
    trial_timeout_s: float = Field(60.0, gt=0, description="A trial (compile + check + timing) running longer is killed")
    compile_secret: str | None = Field(None, description="Set on every host that tunes: Triton's compiled files are "
                                       "kept in the database signed with it, and a host loads what another one "
                                       "compiled for the same kernel version instead of compiling (a file whose "
                                       "signature does not verify is never loaded); unset: nothing is shared")
    compile_workers: int = Field(0, ge=0, description="Processes compiling ahead of timing (0: from the CPU count)")
    gpus: str | None = Field(None, description="GPUs of this host that measure one problem's configs at once in "
                                               "`autotuner tune` (e.g. 0,1 or all; the first is the problem's "
                                               "device), and a decorated kernel's tuning in its launching process "
                                               "(with the launch's device); default: one")
    warmup_ms: float = Field(25.0, gt=0)
    rep_ms: float = Field(100.0, gt=0)
    max_problem_bytes: int | None = Field(None, gt=0, description="Refuse problems needing more memory than this "
                                                                  "(default: the device's memory)")
    db_wait_s: float = Field(30.0, ge=0, description="`worker --once/--until-empty` give up on a database that "
                                                     "cannot be opened after this long")

    # The service and the worker
    config_cache_s: float = Field(2.0, ge=0, description="The service answers GET /config from memory this long")
    heartbeat_s: float = Field(10.0, gt=0, description="A worker refreshes its job's heartbeat this often")
    lease_s: float = Field(120.0, gt=0, description="A running job whose heartbeat is older is queued again")
    max_attempts: int = Field(3, ge=1, description="A job that failed this many times is marked failed")
    poll_s: float = Field(2.0, gt=0, description="An idle worker looks for queued jobs this often")
    db_timeout_s: float = Field(5.0, gt=0, description="Every database call of the service is bounded by this: "
                                                      "statement, lock and pool waits, a stalled connection")
    request_timeout_s: float = Field(8.0, gt=0, description="A request the service has not answered in this long "
                                                           "is answered 503 (the database stalled)")
    min_free_mb: float = Field(16.0, ge=0, description="A database whose disk has less free space is full: "
                                                      "/healthz fails and writes are refused (503)")
    max_body_bytes: int = Field(16_384, ge=1024, description="Request bodies larger than this are refused (413) "
                                                             "before they are read")
    local_worker: bool = Field(True, description="`autotuner tune` hands its problem to an `autotuner worker` running "
                                                 "on this host (same database), which tunes it in its warm processes; "
                                                 "a worker takes such commands")
    runtime_dir: str | None = Field(None, description="Where running workers' sockets are (default: the user's "
                                                      "runtime folder)")
    db_retry_s: float = Field(300.0, ge=0, description="A worker retries a failed database write for this long "
                                                       "(keeping measured trials in memory) before giving its job up")

    # Read where they act, before settings are built (at import, or by a process that starts others)
    install: bool = Field(False, description="Every Triton autotuner of a process importing autotuner tunes "
                                             "through it (what `python -m autotuner run` sets)")
    report: str | None = Field(None, description="Write the covered kernels' report as JSON here at exit ({pid}: "
                                                 "the process id)")
    recheck_schema: bool = Field(False, description="Check a database's schema on every open, not once per process")
    poison_outputs: bool = Field(False, description="Kernel outputs start as NaN, so an unwritten element fails "
                                                    "its check (the test suite sets it)")
    bytecode_cache: bool = Field(True, description="Where torch is installed without bytecode and Python may not "
                                                   "write it, autotuner's commands read and write their processes' "
                                                   "bytecode in the user's cache folder, which a host's first "
                                                   "command fills on its idle cores (autotuner.base.bytecode)")

    @property
    def min_free_bytes(self) -> int:
        return int(self.min_free_mb * 2**20)

    def model_post_init(self, context: Any, /) -> None:
        unknown_variables()

    @field_validator("plugins", "kernel_modules", mode="before")
    @classmethod
    def _plugins(cls, value: object) -> object:
        """`mymodule`, `a,b` or `["a", "b"]` (what a shell, a compose file or a JSON-minded user writes)."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                raise ValueError(f"{text!r} is not a JSON list; give module names separated by commas, or a JSON "
                                 'list such as ["mymodule"]') from None
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if not all(part.isidentifier() for part in n.split("."))]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))} is not a module name; give module names separated by "
                             "commas (mymodule,other.module) or a JSON list")
        return names

    @field_validator("token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()  # a trailing newline from a file or a shell is not part of it
        if not value:
            raise ValueError("empty (or only whitespace); unset it to refuse writes")
        if any(c.isspace() for c in value):
            raise ValueError("holds whitespace, which a bearer token cannot carry")
        return value

    @field_validator("compile_secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        if not value:  # set empty: unset (a compose file's `${SECRET:-}`)
            return None
        if len(value.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"{len(value.encode())} bytes, shorter than {MIN_SECRET_BYTES}: use a long random "
                             "value (python -c 'import secrets; print(secrets.token_hex(32))')")
        return value

    @model_validator(mode="after")
    def _durations(self) -> Settings:
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name.endswith(("_s", "_ms")) and isinstance(value, float) and value > MAX_SECONDS:
                raise ValueError(f"AUTOTUNER_{name.upper()}={value:g} is longer than any wait can be; give at most "
                                 f"{MAX_SECONDS:g}")
        return self

    @model_validator(mode="after")
    def _lease_vs_heartbeat(self) -> Settings:
        if self.lease_s < MIN_BEATS_PER_LEASE * self.heartbeat_s:
            raise ValueError(
                f"AUTOTUNER_LEASE_S={self.lease_s:g} is shorter than {MIN_BEATS_PER_LEASE} heartbeats "
                f"(AUTOTUNER_HEARTBEAT_S={self.heartbeat_s:g}): healthy workers would take jobs from each other; "
                f"set AUTOTUNER_LEASE_S to at least {MIN_BEATS_PER_LEASE * self.heartbeat_s:g}")
        return self


def settings_error(exc: ValidationError) -> str:
    """A settings ValidationError in one line, naming the environment variables."""
    parts = []
    for e in exc.errors():
        name = ".".join(str(x) for x in e["loc"])
        where = f"AUTOTUNER_{name.upper()}: " if name else ""
        parts.append(where + str(e["msg"]).removeprefix("Value error, "))
    return "bad settings: " + "; ".join(parts)


def unknown_variables(environ: dict[str, str] | None = None) -> list[str]:
    """AUTOTUNER_* variables that are neither settings nor known to the tests or docker-compose: each is warned of
    once per process, in one line naming the closest setting (a misspelt AUTOTUNER_DB is never silently ignored)."""
    names = [f"AUTOTUNER_{f.upper()}" for f in Settings.model_fields] + [f"AUTOTUNER_{n}" for n in NOT_SETTINGS]
    unknown = sorted(k for k in (os.environ if environ is None else environ)
                     if k.startswith("AUTOTUNER_") and k not in names)
    for name in unknown:
        if name not in _warned:
            _warned.add(name)
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]}?" if close else ""
            log.warning("autotuner: %s is not a setting and is ignored%s", name, hint)
    return unknown
