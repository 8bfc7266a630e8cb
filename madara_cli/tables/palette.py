"""One colour per strategy, defined once for every figure, the report's legend and its routing map.

The Okabe-Ito colours (told apart under the common colour-vision deficiencies) go to the
routed treatments and the strategies a reader meets first, the rest to Paul Tol's muted
scheme (same property); plug-ins take the spare colours, then hatches. Colours mean
strategies only: the ρ̂ figure's model lines are greys, so a blue line never reads as SDA.
"""

from __future__ import annotations

from madara_cli import paper as pv

STRATEGY_COLOURS: dict[str, str] = {
    "nf": "#7F7F7F",  # the baseline: neutral grey
    "three_agent": "#56B4E9",  # sky blue
    "cot": "#E69F00",  # orange
    "sda": "#0072B2",  # blue
    "sda_cot": "#332288",  # indigo (Tol)
    "atf": "#009E73",  # bluish green
    "pde": "#D55E00",  # vermillion
    "pde_random": "#882255",  # wine (Tol)
    "pde_uniform": "#DDCC77",  # sand (Tol)
    "rrf": "#44AA99",  # teal (Tol)
    "self_consistency": "#999933",  # olive (Tol)
    "main_rag": "#000000",  # black
    "cross_encoder": "#8C564B",  # brown
    "madara": "#CC79A7",  # reddish purple
}
# Strategies of plug-ins (not in the paper) cycle through these, then again with a hatch.
SPARE_COLOURS = ("#AA4499", "#88CCEE", "#661100", "#F0E442", "#6699CC", "#AA7744")
# Figure 2's violins by RSC class, green and red as the paper's, in colours no strategy has.
QUALITY_ORDERED, NOT_QUALITY_ORDERED = "#117733", "#CC6677"
HATCHES = ("", "//", "..", "xx")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
UNKNOWN = "#BBBBBB"  # a route or strategy nothing names

if set(STRATEGY_COLOURS) != set(pv.STRATEGY_LABELS):  # a strategy added to the paper's labels without a colour
    raise RuntimeError(f"strategies without a colour: {sorted(set(pv.STRATEGY_LABELS) - set(STRATEGY_COLOURS))}")
_TAKEN = [*STRATEGY_COLOURS.values(), *SPARE_COLOURS, QUALITY_ORDERED, NOT_QUALITY_ORDERED, UNKNOWN]
if len(set(_TAKEN)) != len(_TAKEN):
    raise RuntimeError("a colour means two things")

_ORDER = {s: i for i, s in enumerate(pv.STRATEGY_LABELS)}


def strategy_colour(strategy: str | None) -> str:
    """The strategy's one colour (grey-blue :data:`UNKNOWN` for none)."""
    return strategy_style(strategy)[0]


def strategy_style(strategy: str | None) -> tuple[str, str, str]:
    """(colour, hatch, marker) of a strategy, the same in every figure and on the page."""
    if not strategy:
        return UNKNOWN, "", "o"
    if strategy in STRATEGY_COLOURS:
        return STRATEGY_COLOURS[strategy], "", MARKERS[_ORDER[strategy] % len(MARKERS)]
    i = sum(map(ord, strategy))  # stable across runs (hash() is salted per process)
    return (SPARE_COLOURS[i % len(SPARE_COLOURS)], HATCHES[1 + (i // len(SPARE_COLOURS)) % (len(HATCHES) - 1)],
            MARKERS[i % len(MARKERS)])


def model_shade(index: int, total: int) -> str:
    """A grey (black to mid grey) for the ``index``-th of ``total`` model lines: never a strategy's colour."""
    if total <= 1:
        return "#000000"
    level = int(0x99 * index / (total - 1))
    return f"#{level:02X}{level:02X}{level:02X}"
