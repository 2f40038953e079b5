"""A matplotlib Figure as E2B's `e2b/chart` value (docs/code-interpreter-wire.md §4).

The SDKs read every key of a chart's schema without defaults, so each chart carries all of
its keys, with None where there is nothing. Values are plain JSON types: floats, strings
(dates in ISO form), lists and dicts.
"""

import datetime
import math
import re

import numpy as np
from matplotlib import category as mcategory
from matplotlib import dates as mdates
from matplotlib import ticker as mticker
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.lines import Line2D
from matplotlib.patches import PathPatch, Rectangle, Wedge
from matplotlib.text import Text

# A unit in a label: "Time (s)" or "Speed [m/s]".
_UNIT = re.compile(r"\s\((.*?)\)|\[(.*?)\]")

_DATE_CONVERTERS = tuple(
    cls
    for cls in (
        getattr(mdates, name, None)
        for name in ("DateConverter", "ConciseDateConverter", "_SwitchableDateConverter")
    )
    if isinstance(cls, type)
)

_NO_LINE_STYLES = ("None", "none", " ", "")


def figure_to_chart(figure):
    """The figure's chart: {} without axes, one chart per axes in a superchart when several."""
    axes = figure.get_axes()
    if not axes:
        return {}
    if len(axes) == 1:
        return axes_to_chart(axes[0])
    return {
        "type": "superchart",
        "title": _suptitle(figure),
        "elements": [axes_to_chart(ax) for ax in axes],
    }


def axes_to_chart(ax):
    kind = chart_type(ax)
    if kind in ("line", "scatter"):
        return _point_chart(kind, ax)
    if kind == "bar":
        return _bar_chart(ax)
    if kind == "pie":
        return _pie_chart(ax)
    if kind == "box_and_whisker":
        return _box_chart(ax)
    return {"type": "unknown", "title": _title(ax), "elements": []}


def chart_type(ax):
    """Classifies an axes by the kinds of artists drawn on it, text aside."""
    artists = [a for a in _children(ax) if not isinstance(a, Text)]
    if all(isinstance(a, Line2D) for a in artists):
        return "line"
    if all(isinstance(a, (PathPatch, Line2D)) for a in artists):
        return "box_and_whisker"
    artists = [a for a in artists if not (isinstance(a, Line2D) and _is_grid_line(a))]
    if all(isinstance(a, PathCollection) for a in artists):
        return "scatter"
    if all(isinstance(a, Wedge) for a in artists):
        return "pie"
    if all(isinstance(a, Rectangle) for a in artists):
        return "bar"
    return "unknown"


# --- chart kinds ---------------------------------------------------------------------------


def _point_chart(kind, ax):
    chart = _chart_2d(kind, ax)
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        ticks = list(axis.get_majorticklocs())
        labels = _tick_labels(axis, ticks)
        dates = _is_date_axis(axis)
        chart[f"{name}_ticks"] = [_axis_value(t, dates) for t in ticks]
        chart[f"{name}_tick_labels"] = labels
        chart[f"{name}_scale"] = _scale(axis, ticks, labels)
    if kind == "line":
        chart["elements"] = [_line_element(line) for line in ax.get_lines() if not _is_grid_line(line)]
    else:
        chart["elements"] = [_scatter_element(c, ax) for c in ax.collections]
    return chart


def _line_element(line):
    label = str(line.get_label())
    if label.startswith("_child"):
        label = f"Line {label[len('_child'):]}"  # matplotlib's automatic name, as E2B names it
    points = [[_data_value(x), _data_value(y)] for x, y in zip(line.get_xdata(), line.get_ydata())]
    return {"label": label, "points": points}


def _scatter_element(collection, ax):
    # Offsets are already in axis numbers: dates come back as ISO strings through the axis.
    x_dates, y_dates = _is_date_axis(ax.xaxis), _is_date_axis(ax.yaxis)
    points = [
        [_axis_value(x, x_dates), _axis_value(y, y_dates)]
        for x, y in np.ma.filled(np.ma.asarray(collection.get_offsets(), dtype=float), np.nan)
    ]
    return {"label": str(collection.get_label()), "points": points}


def _bar_chart(ax):
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    horizontal = bool(containers) and _is_horizontal(containers[0])
    # x is the categories' axis, whichever way the bars go.
    chart = _chart_2d("bar", ax, swap=horizontal)
    for index, container in enumerate(containers):
        group = _group_name(str(container.get_label()), index)
        flat = _is_horizontal(container)
        category_axis = ax.yaxis if flat else ax.xaxis
        values = container.datavalues
        if values is None:
            values = [r.get_width() if flat else r.get_height() for r in container.patches]
        for rect, value in zip(container.patches, values):
            start, size = (rect.get_y(), rect.get_height()) if flat else (rect.get_x(), rect.get_width())
            label = _label_at(category_axis, start + size / 2, (start, start + size))
            chart["elements"].append({"label": label, "group": group, "value": _number(value)})
    return chart


def _group_name(label, index):
    """A container's label; an unnamed one ("_container3", "_nolegend_") is "Group N"."""
    number = label[len("_container") :]
    if label.startswith("_container") and number.isdigit():
        return f"Group {number}"  # E2B's name for it
    return f"Group {index}" if label.startswith("_") else label


def _is_horizontal(container):
    orientation = getattr(container, "orientation", None)
    if orientation is not None:
        return orientation == "horizontal"
    heights = [r.get_height() for r in container.patches]  # matplotlib before 3.4: guess
    return len(set(heights)) == 1 and len(heights) > 1


def _pie_chart(ax):
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    elements = [
        {
            "label": str(w.get_label()),
            # pie() computes angles in float32: 7 digits are all there is.
            "angle": _number(abs(w.theta2 - w.theta1), digits=7),
            "radius": _number(w.r),
        }
        for w in wedges
    ]
    return {"type": "pie", "title": _title(ax), "elements": elements}


def _box_chart(ax):
    """Boxes are PathPatches; medians, whiskers, caps and fliers are Line2Ds around them."""
    extents = [_extent(p) for p in ax.patches if isinstance(p, PathPatch)]
    lines = [line for line in ax.get_lines() if len(line.get_xdata()) > 0]
    values_on_y = _values_on_y(extents, lines)
    chart = _chart_2d("box_and_whisker", ax, swap=not values_on_y)
    category_axis = ax.xaxis if values_on_y else ax.yaxis

    def oriented(x, y):  # (position along the categories, value)
        return (x, y) if values_on_y else (y, x)

    boxes = []
    for x0, x1, y0, y1 in extents:
        (p0, v0), (p1, v1) = oriented(x0, y0), oriented(x1, y1)
        boxes.append(_Box(p0, p1, v0, v1))
    for line in lines:
        points = [oriented(float(x), float(y)) for x, y in zip(line.get_xdata(), line.get_ydata())]
        box = next((b for b in boxes if all(b.holds(p) for p, _ in points)), None)
        if box is not None:
            box.add_line(points, line.get_linestyle() in _NO_LINE_STYLES)
    chart["elements"] = [b.element(_label_at(category_axis, (b.p0 + b.p1) / 2, (b.p0, b.p1))) for b in boxes]
    return chart


class _Box:
    def __init__(self, p0, p1, v0, v1):
        self.p0, self.p1 = min(p0, p1), max(p0, p1)
        self.q1, self.q3 = min(v0, v1), max(v0, v1)
        self.low, self.high = self.q1, self.q3  # whiskers, when drawn
        self.median, self._median_span = None, -1.0
        self.outliers = []

    def holds(self, position):
        return self.p0 - _EPS <= position <= self.p1 + _EPS

    def add_line(self, points, markers_only):
        if markers_only:  # fliers (a mean marker sits inside the box: not an outlier)
            self.outliers += [v for _, v in points if v < self.q1 or v > self.q3]
            return
        if len(points) != 2:
            return
        (pa, va), (pb, vb) = points
        if _close(va, vb) and self.q1 - _EPS <= va <= self.q3 + _EPS:
            # The median crosses the whole box; a cap level with the box is narrower.
            if abs(pb - pa) > self._median_span:
                self.median, self._median_span = va, abs(pb - pa)
        elif _close(pa, pb):
            low, high = sorted((va, vb))
            if _close(high, self.q1):
                self.low = low
            elif _close(low, self.q3):
                self.high = high

    def element(self, label):
        return {
            "label": label,
            "min": _number(self.low),
            "first_quartile": _number(self.q1),
            "median": None if self.median is None else _number(self.median),
            "third_quartile": _number(self.q3),
            "max": _number(self.high),
            "outliers": [_number(v) for v in self.outliers],
        }


def _values_on_y(extents, lines):
    """True for upright boxes: medians span a box's width; sideways ones span its height."""
    votes = 0
    for line in lines:
        xs, ys = line.get_xdata(), line.get_ydata()
        if len(xs) != 2 or line.get_linestyle() in _NO_LINE_STYLES:
            continue
        (xa, xb), (ya, yb) = sorted(map(float, xs)), sorted(map(float, ys))
        for x0, x1, y0, y1 in extents:
            if _close(ya, yb) and _close(xa, x0) and _close(xb, x1) and y0 <= ya <= y1:
                votes += 1
            elif _close(xa, xb) and _close(ya, y0) and _close(yb, y1) and x0 <= xa <= x1:
                votes -= 1
    if votes:
        return votes > 0
    widths = {round(x1 - x0, 9) for x0, x1, _, _ in extents}
    return len(widths) <= 1


def _extent(patch):
    vertices = patch.get_path().vertices
    xs, ys = vertices[:, 0], vertices[:, 1]
    return float(np.min(xs)), float(np.max(xs)), float(np.min(ys)), float(np.max(ys))


# --- shared pieces -------------------------------------------------------------------------


def _chart_2d(kind, ax, swap=False):
    x_label, y_label = _text(ax.get_xlabel()), _text(ax.get_ylabel())
    if swap:
        x_label, y_label = y_label, x_label
    return {
        "type": kind,
        "title": _title(ax),
        "x_label": x_label,
        "y_label": y_label,
        "x_unit": _unit(x_label),
        "y_unit": _unit(y_label),
        "elements": [],
    }


def _title(ax):
    for loc in ("center", "left", "right"):
        title = _text(ax.get_title(loc=loc))
        if title is not None:
            return title
    return None


def _suptitle(figure):
    if hasattr(figure, "get_suptitle"):  # matplotlib 3.8+
        return _text(figure.get_suptitle())
    sup = getattr(figure, "_suptitle", None)
    return _text(sup.get_text()) if sup is not None else None


def _text(value):
    return value if isinstance(value, str) and value != "" else None


def _unit(label):
    match = _UNIT.search(label) if label else None
    return (match.group(1) or match.group(2) or None) if match else None


def _children(ax):
    children = getattr(ax, "_children", None)  # matplotlib 3.5+: every artist, in order
    if children is not None:
        return list(children)
    return [*ax.lines, *ax.patches, *ax.collections, *ax.texts, *ax.artists, *ax.images]


def _is_grid_line(line):
    """A straight two-point line along an axis, as grid lines (and axhline/axvline) are."""
    xs, ys = line.get_xdata(), line.get_ydata()
    if len(xs) != 2 or len(ys) != 2:
        return False
    return bool(xs[0] == xs[1] or ys[0] == ys[1])


def _converter(axis):
    getter = getattr(axis, "get_converter", None)  # matplotlib 3.10+
    return getter() if getter else getattr(axis, "converter", None)


def _is_date_axis(axis):
    return isinstance(_converter(axis), _DATE_CONVERTERS)


def _scale(axis, ticks, labels):
    if _is_date_axis(axis):
        return "datetime"
    scale = axis.get_scale()
    if scale != "linear":
        return scale
    if isinstance(_converter(axis), mcategory.StrCategoryConverter):
        return "categorical"
    # Ticks 0..n-1 that say something else than their number: categories set by hand.
    if ticks and len(ticks) == len(labels) and all(
        t == i and label != str(i) for i, (t, label) in enumerate(zip(ticks, labels))
    ):
        return "categorical"
    return "linear"


def _tick_labels(axis, ticks):
    """The labels a draw shows for these ticks (the same formatter call, without drawing)."""
    try:
        return [str(label) for label in axis.get_major_formatter().format_ticks(ticks)]
    except Exception:  # an exotic formatter: take what the last draw left
        return [label.get_text() for label in axis.get_ticklabels()]


def _label_at(axis, position, span):
    """The label of the tick at a bar's or box's center; on an axis of named ticks
    (categories, plt.xticks(positions, names)) the one within its span, as grouped bars
    sit beside their tick; else the center itself."""
    ticks = [float(t) for t in axis.get_majorticklocs()]
    labels = _tick_labels(axis, ticks)
    named = isinstance(_converter(axis), mcategory.StrCategoryConverter) or isinstance(
        axis.get_major_locator(), mticker.FixedLocator
    )
    low, high = sorted(span)
    nearest = sorted(zip(ticks, labels), key=lambda tick: abs(tick[0] - position))
    for tick, label in nearest:
        if _close(tick, position) or (named and low - _EPS <= tick <= high + _EPS):
            return label
    if _is_date_axis(axis):
        return _axis_value(position, True)
    return f"{position:g}"


def _axis_value(value, dates):
    """A number on an axis: an ISO date on a date axis, a float elsewhere."""
    value = float(value)
    if dates and math.isfinite(value):
        try:
            return mdates.num2date(value).isoformat()
        except (ValueError, OverflowError):
            pass
    return _number(value)


def _data_value(value):
    """A point's coordinate as given: numbers as floats, dates in ISO form, text as is."""
    if value is np.ma.masked:
        return None
    if isinstance(value, (datetime.date, datetime.time)):  # datetime, pandas Timestamp too
        return value.isoformat()
    if isinstance(value, np.datetime64):
        return str(value.astype("datetime64[s]"))
    if isinstance(value, (str, bytes)):
        return value if isinstance(value, str) else value.decode("utf-8", "replace")
    try:
        return _number(value)
    except (TypeError, ValueError):
        return str(value)


def _number(value, digits=12):
    """A float without the noise of the drawing's arithmetic (324.00000000000006 → 324.0)."""
    value = float(value)
    return float(f"{value:.{digits}g}") if math.isfinite(value) else value


_EPS = 1e-9


def _close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=_EPS)
