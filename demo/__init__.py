"""The nilo-job demo: 1,000 welcome mails through a real SMTP server, by a worker process.

    python3 dev.py demo          # or: .venv/bin/python -m demo [--dir PATH] [--json]

`demo.app` is the queue (the module a worker imports), `demo.smtp` the mail server, and
`demo.__main__` the script that ties them together. `demo.e2e_check` runs it twice for a test.
"""
