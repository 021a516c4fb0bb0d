// Package skills owns finding a tenant's skills by relevance (DESIGN.md
// section 20): the tokenizer, a BM25 index over each skill's name,
// description and body, Jaccard similarity over words (the baseline the
// retrieval benchmark compares against), the near-duplicate rule that
// makes a learning agent update a skill instead of adding another, the
// compiling of a completed run into a skill, and a worker's per-tenant
// indexes, kept current by the store's per-tenant skills revision.
//
// It knows no SQL, HTTP or NATS: a store comes in as Source.
//
// # Why a BM25 of our own, not bleve
//
// A tenant has at most thousands of short documents (a description and
// up to 64 KiB of markdown), searched with a one-line query per turn,
// and the index lives in each worker's memory, rebuilt when the tenant's
// skills change. That is one map from term to postings and one loop: a
// few hundred lines, no dependency, an index built in milliseconds and
// searched in well under one (BENCHMARKS.md, "Skills"). bleve
// (github.com/blevesearch/bleve/v2) would bring its analysis pipeline,
// scorch segments and dozens of modules for the same ranking function,
// with an index per tenant to open, persist or rebuild in memory through
// its batch API; its strengths (persistence, faceting, phrase queries,
// many languages) are none of what a catalog line needs. Should skills
// outgrow this (millions per tenant), the seam is Index.
package skills
