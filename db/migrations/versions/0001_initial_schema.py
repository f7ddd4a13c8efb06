"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('devices',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('capability', sa.String(length=16), nullable=False),
    sa.Column('sm_count', sa.Integer(), nullable=False),
    sa.Column('total_memory', sa.BigInteger(), nullable=False),
    sa.Column('smem_per_block', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('key')
    )
    op.create_table('tuning_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('op', sa.String(length=64), nullable=False),
    sa.Column('problem_key', sa.String(length=200), nullable=False),
    sa.Column('problem', sa.JSON(), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('kernel_hash', sa.String(length=64), nullable=False),
    sa.Column('triton_version', sa.String(length=32), nullable=False),
    sa.Column('torch_version', sa.String(length=64), nullable=False),
    sa.Column('strategy', sa.String(length=32), nullable=False),
    sa.Column('budget_trials', sa.Integer(), nullable=True),
    sa.Column('budget_seconds', sa.Float(), nullable=True),
    sa.Column('clock', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('best_configs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('op', sa.String(length=64), nullable=False),
    sa.Column('problem_key', sa.String(length=200), nullable=False),
    sa.Column('problem', sa.JSON(), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('kernel_hash', sa.String(length=64), nullable=False),
    sa.Column('triton_version', sa.String(length=32), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('median_ms', sa.Float(), nullable=False),
    sa.Column('default_ms', sa.Float(), nullable=True),
    sa.Column('torch_ms', sa.Float(), nullable=True),
    sa.Column('run_id', sa.Integer(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['tuning_runs.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('op', 'problem_key', 'device_id', 'kernel_hash', 'triton_version', name='uq_best_result_key')
    )
    with op.batch_alter_table('best_configs', schema=None) as batch_op:
        batch_op.create_index('ix_best_lookup', ['op', 'device_id'], unique=False)

    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('op', sa.String(length=64), nullable=False),
    sa.Column('shape', sa.String(length=200), nullable=False),
    sa.Column('dtype', sa.String(length=16), nullable=False),
    sa.Column('options', sa.JSON(), nullable=False),
    sa.Column('strategy', sa.String(length=32), nullable=False),
    sa.Column('budget_trials', sa.Integer(), nullable=True),
    sa.Column('budget_seconds', sa.Float(), nullable=True),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('worker', sa.String(length=200), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('run_id', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['tuning_runs.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index('ix_jobs_claim', ['state', 'priority', 'id'], unique=False)

    op.create_table('trials',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('config_key', sa.String(length=400), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('median_ms', sa.Float(), nullable=True),
    sa.Column('p20_ms', sa.Float(), nullable=True),
    sa.Column('p80_ms', sa.Float(), nullable=True),
    sa.Column('retimed_ms', sa.Float(), nullable=True),
    sa.Column('compile_s', sa.Float(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['tuning_runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'config_key', name='uq_trial_run_config')
    )
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_trials_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_trials_run_id'))

    op.drop_table('trials')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_claim')

    op.drop_table('jobs')
    with op.batch_alter_table('best_configs', schema=None) as batch_op:
        batch_op.drop_index('ix_best_lookup')

    op.drop_table('best_configs')
    op.drop_table('tuning_runs')
    op.drop_table('devices')
