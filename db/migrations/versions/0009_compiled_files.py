"""compiled_files: Triton's compile-cache files shared between hosts, each signed with the operator's secret

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'compiled_files',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('signer', sa.String(length=16), nullable=False),
        sa.Column('cache_key', sa.String(length=128), nullable=False),
        sa.Column('filename', sa.String(length=400), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.Column('mac', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('signer', 'cache_key', 'filename', name='uq_compiled_file'),
    )


def downgrade() -> None:
    op.drop_table('compiled_files')
