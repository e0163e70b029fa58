"""Applications that use nilo-job the way its documentation says: see each module's docstring."""
