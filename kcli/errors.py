"""The one error type the CLI turns into a single line and an exit code."""


class KcliError(Exception):
    """A user mistake or bad input, told in one sentence; never shown as a traceback."""

    exit_code: int = 2

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
