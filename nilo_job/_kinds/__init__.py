"""What a job is: a class read into a `Kind`, its payload's codec, and its schedule."""
