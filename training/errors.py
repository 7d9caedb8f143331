"""User-facing errors: the CLI prints them as one line (no traceback) and exits 2."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """Something the user can fix: a bad file, a bad option, a missing dataset."""


class DataError(UserError):
    """Input data that cannot be used; the message names the file and the problem.

    ``DataError(problem, file=..., row=..., column=..., hint=...)`` reads
    ``FILE, row R (line L), column 'C': problem; hint: ...``: ``row`` counts data rows
    from 1 (the header is not one), ``line`` is the line of a text file, the header's
    line included, when the two differ.
    """

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        row: int | None = None,
        line: int | None = None,
        column: str | int | None = None,
        hint: str | None = None,
    ) -> None:
        self.problem, self.file, self.row, self.line = problem, file, row, line
        self.column, self.hint = column, hint
        where = [str(file)] if file is not None else []
        if row is not None:
            where.append(f"row {row}" + (f" (line {line})" if line else ""))
        elif line is not None:
            where.append(f"line {line}")
        if column is not None:
            # an int is a 1-based position (a file without column names)
            where.append(
                f"column {column}" if isinstance(column, int) else f"column {column!r}"
            )
        text = f"{', '.join(where)}: {problem}" if where else problem
        super().__init__(text + (f"; hint: {hint}" if hint else ""))
