"""The one user-facing error type, caught at the outer edge of the CLI."""


class UserError(Exception):
    """A mistake in the user's input: printed as one line, exit code 2, nothing changed on disk."""
