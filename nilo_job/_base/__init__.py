"""What every part stands on, the stores included: the errors, the numbers' ranges, the values
users read and write, the clock, text for people, this process's name; and the two things the
producer and the worker share, the group commit and the status Spaces."""
