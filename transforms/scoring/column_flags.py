"""The column flags resolved against the columns the input offers.

`resolve_columns` turns the column flags into a `ColumnMapping`, `resolve_kept_columns`
`--keep_input_columns` into the names the scores file carries; a problem is a
`ValueError` whose message lists the columns available.

Column defaults: `prediction` and `references` are required; `question`,
`negative_references`, `id`, `system` and `human` are used when the input has them. A
column named explicitly by a flag must exist. References come from exactly one of
`--references_column` (one column holding a list or a string), `--reference_columns a,b,c`
or `--reference_prefix p` (the columns named p<digits>, in numeric order).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from transforms.scoring.reading.rows import KEPT_TEXTS, ColumnMapping

# What `--keep_input_columns` alone keeps: the texts the metrics scored.
DEFAULT_KEPT_COLUMNS = KEPT_TEXTS
# The column flags (`resolve_columns`' keyword arguments).
COLUMN_FLAGS = ("prediction_column", "references_column", "reference_columns",
                "reference_prefix", "max_references", "question_column",
                "negative_references_column", "id_column", "system_column", "human_column")
_OPTIONAL_DEFAULTS = {"question": "question", "negative_references": "negative_references",
                      "id": "id", "system": "system", "human": "human"}


def split_list(value: str | None) -> list[str]:
    """"a, b,,c" -> ["a", "b", "c"]."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _missing(kind: str, column: str, flag: str, available: Sequence[str]) -> ValueError:
    return ValueError(f"{kind} column {column!r} is not in the input; available columns: "
                      f"{list(available)} (set it with {flag})")


def resolve_columns(available: Sequence[str], *, prediction_column: str | None = None,
                    references_column: str | None = None,
                    reference_columns: str | None = None, reference_prefix: str | None = None,
                    max_references: int | None = None, question_column: str | None = None,
                    negative_references_column: str | None = None,
                    id_column: str | None = None, system_column: str | None = None,
                    human_column: str | None = None) -> ColumnMapping:
    """Resolves the column flags against the columns the input offers.

    Args:
        available: the input's columns (from `sniff_columns`).
        prediction_column ... human_column: the flag values; None means "the default".

    Returns:
        The ColumnMapping.

    Raises:
        ValueError: contradictory flags, or a column that is not in the input.
    """
    given = [name for name, value in (("--references_column", references_column),
                                      ("--reference_columns", reference_columns),
                                      ("--reference_prefix", reference_prefix)) if value]
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)} contradict each other: give one of them")
    if max_references is not None and max_references < 1:
        raise ValueError(f"--max_references must be >= 1, got {max_references}")
    prediction = prediction_column or "prediction"
    if prediction not in available:
        raise _missing("prediction", prediction, "--prediction_column", available)
    if reference_columns:
        references = tuple(split_list(reference_columns))
        absent = [c for c in references if c not in available]
        if absent:
            raise ValueError(f"reference columns {absent} are not in the input; available "
                             f"columns: {list(available)}")
    elif reference_prefix:
        pattern = re.compile(re.escape(reference_prefix) + r"(\d+)$")
        numbered = sorted((int(m.group(1)), c) for c in available if (m := pattern.match(c)))
        if not numbered:
            raise ValueError(f"no column is named {reference_prefix}<number>; available "
                             f"columns: {list(available)}")
        references = tuple(c for _, c in numbered)
    else:
        references = (references_column or "references",)
        if references[0] not in available:
            raise _missing("references", references[0], "--references_column, "
                           "--reference_columns or --reference_prefix", available)
    explicit = {"question": question_column, "negative_references": negative_references_column,
                "id": id_column, "system": system_column, "human": human_column}
    optional: dict[str, str | None] = {}
    for role, column in explicit.items():
        if column is not None:
            if column not in available:
                raise _missing(role, column, f"--{role}_column", available)
            optional[role] = column
        else:
            default = _OPTIONAL_DEFAULTS[role]
            taken = default == prediction or default in references
            optional[role] = default if default in available and not taken else None
    return ColumnMapping(prediction=prediction, references=references,
                         max_references=max_references, **optional)


def resolve_kept_columns(value: str | None, available: Sequence[str],
                         taken: Sequence[str]) -> tuple[str, ...]:
    """`--keep_input_columns` -> the names the scores file carries, in the order given.

    Args:
        value: comma-separated names; None or "" = none.
        available: the input's columns.
        taken: the scores file's other columns (reserved and metric columns).

    Raises:
        ValueError: a name that is neither one of `DEFAULT_KEPT_COLUMNS` nor an input
            column, or that clashes with another column of the scores file.
    """
    names = split_list(value)
    unknown = [n for n in names if n not in DEFAULT_KEPT_COLUMNS and n not in available]
    if unknown:
        raise ValueError(f"--keep_input_columns: {unknown} are not input columns; "
                         f"available: {list(DEFAULT_KEPT_COLUMNS)} (the scored texts) or "
                         f"input columns {list(available)}")
    clash = [n for n in names if n in taken]
    if clash:
        raise ValueError(f"--keep_input_columns: {clash} clash with the scores file's own "
                         f"columns {list(taken)}")
    return tuple(dict.fromkeys(names))
