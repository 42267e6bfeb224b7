"""Fuzz the lazy id-index lookup: ``IndexCache.candidates`` against reading
every index first (the property is in tests/engine/idindex_candidates.py),
under the fuzz suite's Hypothesis profile."""

from __future__ import annotations

from tests.engine.idindex_candidates import (
    lazy_candidates_name_what_reading_every_index_names_and_read_no_further_than_asked as property_,
)

test_lazy_candidates_name_what_reading_every_index_names_and_read_no_further_than_asked = property_
