"""Ranking candidate chunks with BM25 over substring counts — the same on SQLite and PostgreSQL.

The database finds candidates (chunks containing at least one term) and counts, per term, how many
chunks contain it; scores are computed here, so both backends rank identically.

- A term's BM25 weight uses its substring count; an occurrence in the title counts `TITLE_WEIGHT`
  times. Chunk length is measured in characters.
- A concept's score is its phrase's weight (when it has one) plus the mean weight of its character
  pairs, so a four-character Chinese segment counts about as much as a two-character word, not
  three times as much.
- The sum is multiplied by the share of the query's concepts the chunk matches (coordination):
  a chunk about everything asked beats one that repeats a single word.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxpress.app.kb.terms import QueryTerms, count_occurrences

BM25_K1 = 1.2
BM25_B = 0.4  # milder length normalisation: short stub records must not outrank full ones
TITLE_WEIGHT = 2.0
SCORE_DIGITS = 3


@dataclass(frozen=True)
class CandidateChunk:
    id: str
    document_id: str
    title: str
    source: str
    text: str


@dataclass(frozen=True)
class CorpusStats:
    chunks: int
    documents: int
    average_chunk_chars: float


@dataclass(frozen=True)
class ScoredChunk:
    chunk: CandidateChunk
    score: float
    matched_terms: tuple[str, ...]


def inverse_document_frequency(total: int, containing: int) -> float:
    return math.log(1 + (total - containing + 0.5) / (containing + 0.5))


def rank_candidates(
    candidates: Sequence[CandidateChunk],
    terms: QueryTerms,
    document_frequency: Mapping[str, int],
    stats: CorpusStats,
    *,
    limit: int,
    per_document: int,
) -> list[ScoredChunk]:
    """The best `limit` chunks, at most `per_document` of one document, best first (ties: by id)."""
    idf = {
        term: inverse_document_frequency(stats.chunks, document_frequency.get(term, 0))
        for term in terms.terms
    }
    average = stats.average_chunk_chars or 1.0
    scored: list[ScoredChunk] = []
    for candidate in candidates:
        text, title = candidate.text.casefold(), candidate.title.casefold()
        norm = BM25_K1 * (1 - BM25_B + BM25_B * len(candidate.text) / average)

        def weight(term: str, text: str = text, title: str = title, norm: float = norm) -> float:
            frequency = count_occurrences(text, term) + TITLE_WEIGHT * count_occurrences(title, term)
            return idf[term] * frequency * (BM25_K1 + 1) / (frequency + norm) if frequency else 0.0

        score = 0.0
        matched: list[str] = []
        concepts_matched = 0
        for concept in terms.concepts:
            phrase = weight(concept.phrase) if concept.phrase else 0.0
            parts = [weight(part) for part in concept.parts]
            concept_score = phrase + (sum(parts) / len(parts) if parts else 0.0)
            if concept_score > 0:
                concepts_matched += 1
                score += concept_score
                matched.extend(term for term in concept.terms if weight(term) > 0)
        if concepts_matched:
            coordination = concepts_matched / len(terms.concepts)
            scored.append(ScoredChunk(candidate, round(score * coordination, SCORE_DIGITS), tuple(matched)))
    scored.sort(key=lambda item: (-item.score, item.chunk.id))
    kept: list[ScoredChunk] = []
    per_doc: dict[str, int] = {}
    for item in scored:
        seen = per_doc.get(item.chunk.document_id, 0)
        if seen >= per_document:
            continue
        per_doc[item.chunk.document_id] = seen + 1
        kept.append(item)
        if len(kept) >= limit:
            break
    return kept
