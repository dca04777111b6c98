"""What the meta-evaluation report is asked for: `--report_subsets` and
`--accuracy_threshold`, parsed and validated when the graph is built (`config.py`), with
no plotting or statistics imported (those are report.py's).

Subsets are conditions on the metric columns (or `human`): `f1>0`, `f1=0`, `em=0&f1>0`;
several subsets are separated by commas: `--report_subsets 'f1>0,f1=0'`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np

HUMAN = "human"
DEFAULT_THRESHOLD = 0.5
OPS = {">=": np.greater_equal, "<=": np.less_equal, "!=": np.not_equal, "==": np.equal,
        ">": np.greater, "<": np.less, "=": np.equal}
_CONDITION = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*(>=|<=|!=|==|>|<|=)\s*([-+0-9.eE]+)\s*$")


@dataclasses.dataclass(frozen=True)
class Condition:
    """`column op value`, e.g. f1 > 0."""

    column: str
    op: str
    value: float


@dataclasses.dataclass(frozen=True)
class Subset:
    """A named conjunction of conditions."""

    name: str
    conditions: tuple[Condition, ...]


@dataclasses.dataclass(frozen=True)
class ReportSpec:
    """What the report computes besides the correlations.

    Attributes:
        subsets: row subsets reported besides "all rows".
        default_threshold: accuracy threshold for binary labels.
        thresholds: per-metric overrides of the threshold.
    """

    subsets: tuple[Subset, ...] = ()
    default_threshold: float = DEFAULT_THRESHOLD
    thresholds: tuple[tuple[str, float], ...] = ()

    def threshold(self, column: str) -> float:
        return dict(self.thresholds).get(column, self.default_threshold)


def parse_subsets(spec: str | None, columns: Sequence[str]) -> tuple[Subset, ...]:
    """Parses `--report_subsets`, e.g. "f1>0,f1=0" or "em=0&f1>0".

    Args:
        spec: comma-separated subsets; in each, conditions joined by '&'.
        columns: the metric columns the conditions may name (plus "human").

    Returns:
        The subsets, in the given order.

    Raises:
        ValueError: a condition that does not parse or names an unknown column.
    """
    if not spec:
        return ()
    allowed = [*columns, HUMAN]
    subsets = []
    for part in spec.split(","):
        conditions = []
        for text in part.split("&"):
            match = _CONDITION.match(text)
            if not match:
                raise ValueError(
                    f"cannot parse report subset condition {text!r}; write e.g. 'f1>0' with "
                    f"one of {sorted(set(OPS))} and a number")
            column, op, value = match.groups()
            if column not in allowed:
                raise ValueError(
                    f"report subset {part!r} names {column!r}; available: {allowed}")
            try:
                conditions.append(Condition(column, op, float(value)))
            except ValueError as e:
                raise ValueError(f"report subset {part!r}: {value!r} is not a number") from e
        subsets.append(Subset("&".join(t.strip() for t in part.split("&")), tuple(conditions)))
    return tuple(subsets)


def parse_thresholds(spec: str | None, columns: Sequence[str]) -> tuple[float, dict[str, float]]:
    """Parses `--accuracy_threshold`: "0.5" or "0.5,cider=1.0,bleu4=0.2".

    Returns:
        (default threshold, per-metric overrides).

    Raises:
        ValueError: a value that is not a number or names an unknown metric.
    """
    default, overrides = DEFAULT_THRESHOLD, {}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        name, sep, value = (part.strip() for part in item.partition("="))
        if sep and name not in columns:
            raise ValueError(
                f"--accuracy_threshold names {name!r}; available: {list(columns)}")
        try:
            number = float(value if sep else name)
        except ValueError as e:
            raise ValueError(f"--accuracy_threshold item {item!r} is not a number") from e
        if sep:
            overrides[name] = number
        else:
            default = number
    return default, overrides
