"""A small Django 6 project whose `@task` functions run on nilo-job (see README.md)."""
