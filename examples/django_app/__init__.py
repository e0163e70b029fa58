"""A minimal Django project whose views push, cancel and read stats through `jobs.sync`.

    python -m examples.django_app migrate --run-syncdb     # Django's tables
    nilo-job migrate sqlite:///django_app.db                # the queue's, in the same database
    python -m examples.django_app runserver                 # the web process
    nilo-job worker examples.django_app.worker:jobs         # the workers

`DJANGO_APP_DATABASE_URL` names the database (default `sqlite:///django_app.db`; a
`postgresql://` URL works too). The welcome is pushed with `push_in` inside the view's
`transaction.atomic()`, on Django's own connection: a member and its welcome commit together.
"""
