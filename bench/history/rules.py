"""The judge's rules: the band rule per case, overrides by testbed and case, and annotations.

Data the judge (``bench.history.detect``) applies and the store keeps (``thresholds.json``,
``annotations.json``); neither the store nor the judge owns them.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, field

from bench.history.summarise import HistoryError

ACTIONS = ("accept", "exclude")


@dataclass(frozen=True)
class Annotation:
    """``accept``: a new baseline from night ``night`` on (the shift is accepted); ``exclude``: ignore that night."""

    testbed: str
    night: str
    action: str
    why: str
    cases: str = "*"
    who: str = ""
    date: str = ""

    def matches(self, testbed: str, case_id: str | None = None) -> bool:
        """Whether this annotation applies to the case (any case if None) on the testbed (glob patterns)."""
        return fnmatch.fnmatchcase(testbed, self.testbed) and (
            case_id is None or fnmatch.fnmatchcase(case_id, self.cases)
        )


@dataclass(frozen=True)
class Rule:
    """The judge's rule for one case: band = median +- max(k x 1.4826 x MAD, delta x median) over ``window`` nights."""

    k: float = 4.0
    delta: float = 0.03
    window: int = 30
    min_history: int = 10
    confirm: int = 2


@dataclass
class Thresholds:
    """Default rule and overrides by testbed and case glob (later overrides win)."""

    default: Rule = field(default_factory=Rule)
    overrides: list[dict] = field(default_factory=list)

    def rule(self, testbed: str, case_id: str) -> Rule:
        """The rule for a case: the default updated by each matching override in order."""
        values = asdict(self.default)
        for o in self.overrides:
            if fnmatch.fnmatchcase(testbed, o.get("testbed", "*")) and fnmatch.fnmatchcase(
                case_id, o.get("cases", "*")
            ):
                values.update({k: v for k, v in o.items() if k in values})
        return Rule(**values)


def check_rule(values: dict, where: str) -> None:
    """HistoryError naming ``where`` unless the values make a sensible rule."""
    try:
        r = Rule(**values)
    except TypeError as e:
        raise HistoryError(f"{where}: {e}") from None
    ok = (
        isinstance(r.k, (int, float))
        and r.k > 0
        and isinstance(r.delta, (int, float))
        and 0 <= r.delta < 1
        and isinstance(r.window, int)
        and r.window >= 3
        and isinstance(r.min_history, int)
        and 3 <= r.min_history <= r.window
        and isinstance(r.confirm, int)
        and r.confirm >= 1
    )
    if not ok:
        raise HistoryError(
            f"{where}: need k > 0, 0 <= delta < 1, window >= 3, 3 <= min_history <= window, confirm >= 1; got {values}"
        )
