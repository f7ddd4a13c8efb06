"""The result database: SQLAlchemy 2 models, engine factory, repository functions, Alembic migrations."""
