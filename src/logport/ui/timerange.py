"""The time range of a view, as URLs carry it: `date=YYYY-MM-DD`, or `from`/`to` as a day (`YYYY-MM-DD`) or a
minute (`YYYY-MM-DDTHH:MM`). Times are the lake's wall-clock minutes (docs/pipeline.md "Days and minutes"), never
converted: a minute is a (date, minute of day) pair of the tables."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from logport.errors import LogportError

DAY = dt.timedelta(days=1)
MAX_DAYS = 400


class RangeError(LogportError):
    """A time range in a URL that cannot be used: says which parameter and what is expected."""


def _parse(name: str, text: str) -> tuple[dt.datetime, bool]:
    """(the instant, whether it was a day only)."""
    try:
        if len(text) == 10:
            return dt.datetime.strptime(text, "%Y-%m-%d"), True
        return dt.datetime.strptime(text.replace(" ", "T")[:16], "%Y-%m-%dT%H:%M"), False
    except ValueError:
        raise RangeError(f"{name}={text!r}: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM") from None


@dataclass(frozen=True)
class TimeRange:
    """Minutes [start, end) of wall time."""

    start: dt.datetime
    end: dt.datetime

    @classmethod
    def parse(cls, date: str | None, start: str | None, end: str | None, default_day: str | None) -> TimeRange:
        """From the URL's `date`, `from` and `to` (a day in `to` includes it); `default_day` when none is given."""
        if date and (start or end):
            raise RangeError("give either date= or from=/to=, not both")
        if date or not (start or end):
            if not (date or default_day):
                raise RangeError("no date given and the lake holds none")
            day, _ = _parse("date", date or default_day or "")
            return cls(day, day + DAY)
        first, _ = _parse("from", start) if start else _parse("to", end or "")
        if end:
            last, day_only = _parse("to", end)
            last = last + DAY if day_only else last
        else:
            last = first.replace(hour=0, minute=0) + DAY
        if last <= first:
            raise RangeError(f"to={end!r} is not after from={start!r}")
        if last - first > MAX_DAYS * DAY:
            raise RangeError(f"a range of {(last - first).days} days is more than the limit of {MAX_DAYS}")
        return cls(first, last)

    @property
    def days(self) -> list[str]:
        """The dates the range touches (partitions to read)."""
        day = self.start.replace(hour=0, minute=0)
        out = []
        while day < self.end:
            out.append(day.strftime("%Y-%m-%d"))
            day += DAY
        return out

    @property
    def whole_days(self) -> bool:
        """Whether the range is whole days (then the per-day tables answer it)."""
        return self.start.hour == self.start.minute == self.end.hour == self.end.minute == 0

    @property
    def minutes(self) -> int:
        return int((self.end - self.start).total_seconds() // 60)

    def bounds(self) -> tuple[str, int, str, int]:
        """(first date, its first minute, last date, its end minute exclusive) for SQL over (date, minute)."""
        last = self.end - dt.timedelta(minutes=1)
        return (self.start.strftime("%Y-%m-%d"), self.start.hour * 60 + self.start.minute,
                last.strftime("%Y-%m-%d"), last.hour * 60 + last.minute + 1)

    def query(self) -> dict[str, str]:
        """The URL parameters that give this range back."""
        if self.whole_days and self.end - self.start == DAY:
            return {"date": self.start.strftime("%Y-%m-%d")}
        if self.whole_days:
            return {"from": self.start.strftime("%Y-%m-%d"), "to": (self.end - DAY).strftime("%Y-%m-%d")}
        return {"from": self.start.strftime("%Y-%m-%dT%H:%M"), "to": self.end.strftime("%Y-%m-%dT%H:%M")}

    def previous(self) -> TimeRange:
        """The range of the same length just before (growth of patterns)."""
        return TimeRange(self.start - (self.end - self.start), self.start)

    def auto_interval(self) -> int:
        """Minutes per point on a time axis: 1 up to 6 hours, 5 up to 2 days, then an hour (at most ~600 points
        a day's range, about 170 a week's)."""
        if self.minutes <= 360:
            return 1
        if self.minutes <= 2 * 1440:
            return 5
        return 60
