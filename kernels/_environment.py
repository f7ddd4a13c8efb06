"""The AUTOTUNER_* variables read before any Settings exists or where one must not be built (AUTOTUNER_INSTALL at
import, AUTOTUNER_POISON_OUTPUTS, AUTOTUNER_RECHECK_SCHEMA, AUTOTUNER_LOCAL_WORKER, AUTOTUNER_GPUS,
AUTOTUNER_RUNTIME_DIR), with the settings' own rules for a flag."""

from __future__ import annotations

import logging
import os

TRUE = frozenset({"1", "true", "yes", "on", "t", "y"})
FALSE = frozenset({"0", "false", "no", "off", "f", "n"})
log = logging.getLogger("autotuner")
_warned: set[str] = set()


def env_text(name: str) -> str | None:
    """The variable's value with surrounding whitespace taken off; None where it is unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def env_flag(name: str, default: bool = False) -> bool:
    """The variable as a flag; `default` where it is unset, and (said once) where it is not a flag."""
    value = env_text(name)
    if value is None:
        return default
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    if name not in _warned:
        _warned.add(name)
        log.warning("autotuner: %s=%r is not a flag (1/true/yes/on or 0/false/no/off); %s stands", name, value,
                    "on" if default else "off")
    return default
