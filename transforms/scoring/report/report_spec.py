"""What the meta-evaluation report is asked for: `--report_subsets`, `--accuracy_threshold`
and `--report_min_n`, plus the decision thresholds saved with model checkpoints; parsed and
validated when the graph is built (`config.py`), with no plotting or statistics imported
(those are report.py's and bootstrap.py's).

Accuracy threshold of a metric, first that applies: a `name=value` item of
`--accuracy_threshold`; a bare number given to `--accuracy_threshold` (every metric); the
threshold saved in the metric's checkpoint (`qa_eval_decision_threshold`, see
`transforms.models.uses.ModelUse.decision_threshold`); 0.5.

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
DEFAULT_MIN_N = 30
DEFAULT_RESAMPLES = 1000
MIN_RESAMPLES = 100  # --report_resamples at least
DEFAULT_SEED = 0
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
        thresholds: per-metric overrides of the threshold (`--accuracy_threshold f1=0.4`).
        saved_thresholds: per-metric thresholds saved with the metric's checkpoint.
        default_given: whether `default_threshold` was given on the command line (then it
            overrides the saved thresholds too).
        min_n: scopes with fewer rows (system level: fewer systems) name no best metric,
            and row scopes below it get no panel.
        resamples: bootstrap resamples for the intervals and the paired test.
        seed: the bootstrap's seed.
    """

    subsets: tuple[Subset, ...] = ()
    default_threshold: float = DEFAULT_THRESHOLD
    thresholds: tuple[tuple[str, float], ...] = ()
    saved_thresholds: tuple[tuple[str, float], ...] = ()
    default_given: bool = False
    min_n: int = DEFAULT_MIN_N
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED

    def threshold(self, column: str) -> float:
        """The accuracy threshold of `column` (see the module docstring for the order)."""
        return self._threshold(column)[0]

    def threshold_source(self, column: str) -> str:
        """Where `column`'s threshold comes from: flag, checkpoint or default."""
        return self._threshold(column)[1]

    def _threshold(self, column: str) -> tuple[float, str]:
        overrides = dict(self.thresholds)
        if column in overrides:
            return overrides[column], "flag"
        if self.default_given:
            return self.default_threshold, "flag"
        saved = dict(self.saved_thresholds)
        if column in saved:
            return saved[column], "checkpoint"
        return self.default_threshold, "default"


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

    A bare number sets the threshold of every metric not named (saved thresholds
    included); `name=value` sets one metric's.

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


def default_threshold_given(spec: str | None) -> bool:
    """Whether `--accuracy_threshold` has a bare number (a threshold for every metric)."""
    return any(item.strip() and "=" not in item for item in (spec or "").split(","))
