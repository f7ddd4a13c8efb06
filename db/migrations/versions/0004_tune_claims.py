"""claims on problems being tuned in a launching process, so that one process tunes and the others wait; wider
names for `autotuner.autotune` kernels: op (module:qualname) 200, problem key and job shape 400 (the key
arguments), job dtype 200 (every tensor argument's dtype)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


WIDER = (("tuning_runs", "op", 64, 200), ("best_configs", "op", 64, 200), ("jobs", "op", 64, 200),
         ("tuning_runs", "problem_key", 200, 400), ("best_configs", "problem_key", 200, 400),
         ("jobs", "shape", 200, 400), ("jobs", "dtype", 16, 200))


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":  # SQLite does not enforce VARCHAR lengths
        for table, column, old, new in WIDER:
            op.alter_column(table, column, type_=sa.String(length=new), existing_type=sa.String(length=old),
                            existing_nullable=False)
    op.create_table('tune_claims',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('op', sa.String(length=200), nullable=False),
    sa.Column('problem_key', sa.String(length=400), nullable=False),
    sa.Column('device_key', sa.String(length=200), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('op', 'problem_key', 'device_key', name='uq_tune_claim')
    )


def downgrade() -> None:
    op.drop_table('tune_claims')
    if op.get_bind().dialect.name != "sqlite":
        for table, column, old, new in WIDER:
            op.alter_column(table, column, type_=sa.String(length=old), existing_type=sa.String(length=new),
                            existing_nullable=False)
