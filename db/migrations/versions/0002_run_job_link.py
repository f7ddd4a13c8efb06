"""tuning runs remember the queued job they ran for

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tuning_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('job_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_tuning_runs_job_id', 'jobs', ['job_id'], ['id'], ondelete='SET NULL')
        batch_op.create_index('ix_tuning_runs_job_id', ['job_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('tuning_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_tuning_runs_job_id')
        batch_op.drop_constraint('fk_tuning_runs_job_id', type_='foreignkey')
        batch_op.drop_column('job_id')
