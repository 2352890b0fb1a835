"""One card = one notebook output: a widget view while the turn runs, a static bundle after it.

Every bundle carries ``text/markdown``, ``text/html`` and ``text/plain`` beside the widget view, so a
saved notebook reads well on GitHub and in nbconvert. :meth:`Card.freeze` replaces the output with the
static bundle (``update_display`` without the widget view) and closes the card's widgets: a notebook
reopened without a live kernel shows content, not "model not found".

A card that is not ``live`` (a headless run) never creates a widget: its output is the static bundle
from the start and each update rewrites it in place.
"""

from __future__ import annotations

from typing import Any

from .render import Tone, card_html

__all__ = ["WIDGET_VIEW", "Card", "close_widget"]

#: The mimetype of a widget view in a display bundle.
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def close_widget(widget: Any) -> None:
    """Close a widget with its children, layout and style (each of them is a comm of its own)."""
    for child in getattr(widget, "children", ()):
        close_widget(child)
    for part in ("layout", "style"):
        model = getattr(widget, part, None)
        if model is not None and hasattr(model, "close"):
            model.close()
    widget.close()


class Card:
    """A card's state and its three text forms; subclasses say what they show."""

    kind = "card"

    def __init__(self, *, display_id: str, live: bool) -> None:
        self.display_id = display_id
        self.live = live
        self.shown = False
        self._view: Any = None
        self._body: Any = None  # the HTML widget showing :meth:`body_html`

    # -- what a card shows: override these ---------------------------------------------------------

    def markdown(self) -> str:
        raise NotImplementedError

    def body_html(self) -> str:
        raise NotImplementedError

    def plain(self) -> str:
        return self.markdown()

    def tone(self) -> Tone:
        return "info"

    def controls(self, widgets: Any) -> list[Any]:
        """Widgets below the body (buttons, inputs); none by default."""
        return []

    # -- the output --------------------------------------------------------------------------------

    def html(self) -> str:
        return card_html(self.body_html(), tone=self.tone(), kind=self.kind)

    def view(self) -> Any:
        """The live widget (built on first use); ``None`` for a card that is not live."""
        if not self.live:
            return None
        if self._view is None:
            import ipywidgets as widgets

            self._body = widgets.HTML(value=self.html())
            extra = self.controls(widgets)
            self._view = widgets.VBox([self._body, *extra]) if extra else self._body
        return self._view

    def bundle(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "text/markdown": self.markdown(),
            "text/html": self.html(),
            "text/plain": self.plain(),
        }
        view = self.view()
        if view is not None:
            data[WIDGET_VIEW] = view._repr_mimebundle_()[WIDGET_VIEW]
        return data

    def show(self) -> None:
        """Add the card's output to the cell (once)."""
        from IPython.display import display

        if not self.shown:
            self.shown = True
            display(self.bundle(), raw=True, display_id=self.display_id)

    def push(self) -> None:
        """Send the card's current state: to its widget (live) and to its stored output."""
        from IPython.display import update_display

        if self._body is not None:
            self._body.value = self.html()
        update_display(self.bundle(), raw=True, display_id=self.display_id)

    def freeze(self, *, changed: bool = True) -> None:
        """Leave the static bundle behind and free the widgets. A card that never had a widget and
        did not change since its last push keeps its output as it is."""
        view = self._view
        self.live = False
        self._view = self._body = None
        if self.shown and (changed or view is not None):
            self.push()
        if view is not None:
            close_widget(view)
