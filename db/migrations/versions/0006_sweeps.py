"""sweeps (problems differing in one dimension, tuned together) and their cross timings (each winner timed on
its neighbours), and jobs of a kind (tune, or cross_time a sweep) that may belong to a sweep

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('sweeps',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('op', sa.String(length=200), nullable=False),
    sa.Column('dtype', sa.String(length=200), nullable=False),
    sa.Column('options', sa.JSON(), nullable=False),
    sa.Column('dim', sa.String(length=64), nullable=False),
    sa.Column('points', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('cross_timings',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('sweep_id', sa.Integer(), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('winner_key', sa.String(length=400), nullable=False),
    sa.Column('on_key', sa.String(length=400), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('ms', sa.Float(), nullable=True),
    sa.Column('own_ms', sa.Float(), nullable=True),
    sa.Column('kernel_hash', sa.String(length=64), nullable=False),
    sa.Column('triton_version', sa.String(length=32), nullable=False),
    sa.Column('measured_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], ),
    sa.ForeignKeyConstraint(['sweep_id'], ['sweeps.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('sweep_id', 'device_id', 'winner_key', 'on_key', 'kernel_hash', 'triton_version',
                        name='uq_cross_timing')
    )
    op.create_index(op.f('ix_cross_timings_sweep_id'), 'cross_timings', ['sweep_id'], unique=False)
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('kind', sa.String(length=16), server_default='tune', nullable=False))
        batch.add_column(sa.Column('sweep_id', sa.Integer(), nullable=True))
        batch.create_index(batch.f('ix_jobs_sweep_id'), ['sweep_id'], unique=False)
        batch.create_foreign_key('fk_jobs_sweep_id', 'sweeps', ['sweep_id'], ['id'], ondelete='SET NULL')


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_constraint('fk_jobs_sweep_id', type_='foreignkey')
        batch.drop_index(batch.f('ix_jobs_sweep_id'))
        batch.drop_column('sweep_id')
        batch.drop_column('kind')
    op.drop_index(op.f('ix_cross_timings_sweep_id'), table_name='cross_timings')
    op.drop_table('cross_timings')
    op.drop_table('sweeps')
