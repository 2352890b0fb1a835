"""The streaming answer: the model's text, Markdown source in ``text/markdown``, rendered in the view."""

from __future__ import annotations

from .base import Card
from .render import markdown_html

__all__ = ["AnswerCard"]


class AnswerCard(Card):
    """One run of answer text; a tool card (or any other card) between two runs starts a new one."""

    kind = "answer"

    def __init__(self, *, display_id: str, live: bool) -> None:
        super().__init__(display_id=display_id, live=live)
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def add(self, text: str) -> None:
        self._parts.append(text)

    def markdown(self) -> str:
        return self.text

    def body_html(self) -> str:
        return markdown_html(self.markdown())
