"""The one effect fold behind consent, the guard's floors and the deny arms."""

from __future__ import annotations

import pytest

from neuralis_jupyter.contracts.envelope import EGRESS, effect_kind, effects_require_consent

#: Every spelling a package author might declare for "this sends data out".
EGRESS_SPELLINGS = [
    "egress",
    "egress:external",
    "egress:internet",
    "egress:internal",
    "egress:email",
    "egress:",
    "Egress",
    "EGRESS:External",
    " egress:external ",
]
#: Effects that merely look like egress, and ordinary ones: none needs consent on a read.
NOT_CONSENT = ["", "read", "network", "ingress", "egressive", "egress_external", "net:egress", "cache"]


@pytest.mark.parametrize("effect", EGRESS_SPELLINGS)
def test_every_egress_spelling_folds_and_needs_consent(effect):
    assert effect_kind(effect) == EGRESS
    assert effects_require_consent({effect})
    assert effects_require_consent(["read", effect])


@pytest.mark.parametrize("effect", ["exec", "destructive", "EXEC", " destructive"])
def test_exec_and_destruction_need_consent(effect):
    assert effects_require_consent({effect})


@pytest.mark.parametrize("effect", NOT_CONSENT)
def test_other_effects_do_not(effect):
    assert effect_kind(effect) != EGRESS
    assert not effects_require_consent({effect})
    assert not effects_require_consent(())
