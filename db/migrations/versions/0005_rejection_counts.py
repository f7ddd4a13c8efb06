"""rejected configs as counts per run (tuning_runs.rejected, tuning_runs.rejections) instead of one `invalid`
trial row each: a matmul run stored about 4,900 rows for 40 measured configs. Existing rejection rows are
folded into their run's counts and deleted. Their rule is not stored, so a folded count is keyed by the message
with its numbers written as N ("shared memory N B (pipeline) exceeds the device's N B per block"); new runs key
by the constraint's name.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

BATCH = 5000


def rule_of(message: str) -> str:
    """A stored rejection message as a count's key: its first reason, numbers written as N."""
    first = message.split("; ")[0]
    return re.sub(r"\d+(\.\d+)?", "N", first)[:200] or "constraint"


def upgrade() -> None:
    op.add_column('tuning_runs', sa.Column('rejected', sa.Integer(), server_default='0', nullable=False))
    op.add_column('tuning_runs', sa.Column('rejections', sa.JSON(), nullable=True))
    bind = op.get_bind()
    trials = sa.table('trials', sa.column('id', sa.Integer), sa.column('run_id', sa.Integer),
                      sa.column('status', sa.String), sa.column('error', sa.Text),
                      sa.column('median_ms', sa.Float))
    runs = sa.table('tuning_runs', sa.column('id', sa.Integer), sa.column('rejected', sa.Integer),
                    sa.column('rejections', sa.JSON))
    # Constraint rejections: `invalid`, never timed. (An `invalid` with a time does not exist; one without is
    # either a rejection or a config refused at launch: both were never compiled, and both are now counts.)
    counts: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    totals: dict[int, int] = defaultdict(int)
    rows = bind.execute(sa.select(trials.c.run_id, trials.c.error)
                        .where(trials.c.status == 'invalid', trials.c.median_ms.is_(None)))
    for run_id, error in rows:
        message = error or "rejected by a constraint"
        entry = counts[run_id].setdefault(rule_of(message), {"count": 0, "example": message.split("; ")[0]})
        entry["count"] += 1
        totals[run_id] += 1
    for run_id, by_rule in counts.items():
        bind.execute(runs.update().where(runs.c.id == run_id)
                     .values(rejected=totals[run_id], rejections=by_rule))
    bind.execute(trials.delete().where(trials.c.status == 'invalid', trials.c.median_ms.is_(None)))


def downgrade() -> None:
    # The folded rows are not written back: a downgrade drops the counts.
    with op.batch_alter_table('tuning_runs', schema=None) as batch_op:
        batch_op.drop_column('rejections')
        batch_op.drop_column('rejected')
