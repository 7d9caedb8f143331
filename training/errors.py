"""User-facing errors: the CLI prints them as one line (no traceback) and exits 2."""


class UserError(Exception):
    """Something the user can fix: a bad file, a bad option, a missing dataset."""


class DataError(UserError):
    """Input data that cannot be used; the message names the file and the problem."""
