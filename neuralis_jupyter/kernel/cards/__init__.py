"""The chat cards: a turn shown as ipywidgets cards that freeze to static Markdown/HTML when it ends.

Importing this package imports no widget library: ipywidgets and mistune load when the first card
is built (the first chat cell), so the kernel starts as fast as plain ipykernel.

Modules: :mod:`.turn` (``CardDisplay``, the event router), :mod:`.base` (one card = one output),
:mod:`.answer`, :mod:`.tool`, :mod:`.prompts` (approval, ask_question), :mod:`.session` (session
ledger, sub-agent, footer) and :mod:`.render` (pure text helpers).
"""

from .turn import CardDisplay

__all__ = ["CardDisplay"]
