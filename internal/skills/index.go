package skills

import (
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/agentfleet/agentfleet"
)

// BM25 parameters, the textbook defaults, and the weight of each field:
// a term in a skill's name counts as NameWeight occurrences, in its
// description DescriptionWeight (a simple BM25F: the fields share one
// length and one set of statistics).
const (
	K1                = 1.2
	B                 = 0.75
	NameWeight        = 3
	DescriptionWeight = 2
)

// Index is a BM25 index of one tenant's skills. It is immutable once
// built, so any number of turns search it at once.
type Index struct {
	skills []agentfleet.Skill
	byName map[string]int
	// postings maps a term to the skills holding it, in skill order.
	postings map[string][]posting
	// length is each skill's weighted term count, avgLen their mean.
	length []float32
	avgLen float64
	// words are each skill's distinct words (for Jaccard), built on
	// first use by the benchmark only.
	words []map[string]bool
	// scratch pools the searches' score arrays.
	scratch sync.Pool
}

type posting struct {
	doc int32
	tf  float32
}

// Hit is a skill found, with its BM25 score.
type Hit struct {
	Skill *agentfleet.Skill
	Score float64
}

// NewIndex indexes skills (kept by reference; the caller must not
// change them afterwards).
func NewIndex(skills []agentfleet.Skill) *Index {
	x := &Index{skills: skills, byName: make(map[string]int, len(skills)), postings: map[string][]posting{}, length: make([]float32, len(skills))}
	tf := map[string]float32{}
	var total float64
	for i := range skills {
		s := &skills[i]
		x.byName[s.Name] = i
		clear(tf)
		add := func(text string, w float32) {
			for _, t := range Tokens(text) {
				tf[t] += w
				x.length[i] += w
			}
		}
		add(s.Name, NameWeight)
		add(s.Description, DescriptionWeight)
		add(s.Body, 1)
		for t, n := range tf {
			x.postings[t] = append(x.postings[t], posting{doc: int32(i), tf: n})
		}
		total += float64(x.length[i])
	}
	if len(skills) > 0 {
		x.avgLen = total / float64(len(skills))
	}
	if x.avgLen == 0 {
		x.avgLen = 1
	}
	return x
}

// Len is how many skills x holds.
func (x *Index) Len() int { return len(x.skills) }

// Get returns the skill named name.
func (x *Index) Get(name string) (*agentfleet.Skill, bool) {
	i, ok := x.byName[name]
	if !ok {
		return nil, false
	}
	return &x.skills[i], true
}

// Skills are the indexed skills, by name as the store listed them.
func (x *Index) Skills() []agentfleet.Skill { return x.skills }

func (x *Index) idf(df int) float64 {
	n := float64(len(x.skills))
	return math.Log(1 + (n-float64(df)+0.5)/(float64(df)+0.5))
}

// Search returns at most k skills that agent sees (every skill when
// agent is ""), best first, with a positive BM25 score for query; ties
// go by name.
func (x *Index) Search(query, agent string, k int) []Hit {
	if k <= 0 || len(x.skills) == 0 {
		return nil
	}
	terms := queryTerms(query)
	if len(terms) == 0 {
		return nil
	}
	// The scores of a search are dense (one per skill) but few are
	// touched: a pooled array, zeroed where touched, spares a turn the
	// allocation of one per skill.
	sp, _ := x.scratch.Get().(*[]float64)
	if sp == nil {
		s := make([]float64, len(x.skills))
		sp = &s
	}
	scores := *sp
	touched := make([]int32, 0, 64)
	defer func() {
		for _, d := range touched {
			scores[d] = 0
		}
		x.scratch.Put(sp)
	}()
	for t, qtf := range terms {
		ps := x.postings[t]
		if len(ps) == 0 {
			continue
		}
		idf := x.idf(len(ps)) * qtf
		for _, p := range ps {
			norm := K1 * (1 - B + B*float64(x.length[p.doc])/x.avgLen)
			tf := float64(p.tf)
			if scores[p.doc] == 0 {
				touched = append(touched, p.doc)
			}
			scores[p.doc] += idf * tf * (K1 + 1) / (tf + norm)
		}
	}
	return x.top(touched, scores, agent, k)
}

// queryTerms are a query's terms with their counts.
func queryTerms(query string) map[string]float64 {
	ts := Tokens(query)
	if len(ts) == 0 {
		return nil
	}
	m := make(map[string]float64, len(ts))
	for _, t := range ts {
		m[t]++
	}
	return m
}

// top picks the k best of the touched skills agent sees.
func (x *Index) top(touched []int32, scores []float64, agent string, k int) []Hit {
	hits := make([]Hit, 0, min(k, len(touched)))
	less := func(a, b Hit) bool { // a ranks below b
		if a.Score != b.Score {
			return a.Score < b.Score
		}
		return a.Skill.Name > b.Skill.Name
	}
	for _, d := range touched {
		s := &x.skills[d]
		if agent != "" && !s.SkillFor(agent) {
			continue
		}
		h := Hit{Skill: s, Score: scores[d]}
		if len(hits) < k {
			hits = append(hits, h)
			// Keep the worst last once full.
			if len(hits) == k {
				sort.Slice(hits, func(i, j int) bool { return less(hits[j], hits[i]) })
			}
			continue
		}
		if !less(hits[k-1], h) {
			continue
		}
		// Insert in order, dropping the worst.
		i := sort.Search(k, func(i int) bool { return less(hits[i], h) })
		copy(hits[i+1:], hits[i:k-1])
		hits[i] = h
	}
	if len(hits) < k {
		sort.Slice(hits, func(i, j int) bool { return less(hits[j], hits[i]) })
	}
	return hits
}

// selfScore is the score query would get against a skill whose
// description is the query itself and whose length is the mean: the
// most a skill "about" the query scores, which Similarity divides by.
func (x *Index) selfScore(terms map[string]float64) float64 {
	var s float64
	for t, qtf := range terms {
		tf := qtf * DescriptionWeight
		s += qtf * x.idf(len(x.postings[t])) * tf * (K1 + 1) / (tf + K1)
	}
	return s
}

// NearDuplicateThreshold is the Similarity at or above which a skill
// compiled from a run is taken to be the same recipe as an existing
// one, which it then replaces (a learning agent's second run of a task).
const NearDuplicateThreshold = 0.5

// NearDuplicate is the skill agent sees that is most relevant to
// description (a compiled skill's, from its run's task) by BM25, if the
// two are alike both ways: the skill's score for the description and
// the description's score for the skill's own (each over its
// selfScore) both reach NearDuplicateThreshold. One way only, a short
// task that shares two words with a long skill would be its duplicate.
func (x *Index) NearDuplicate(description, agent string) (*agentfleet.Skill, float64, bool) {
	hits := x.Search(description, agent, 1)
	if len(hits) == 0 {
		return nil, 0, false
	}
	forward := x.Similarity(description, hits[0].Score)
	back := x.Similarity(hits[0].Skill.Description, x.pseudoScore(queryTerms(hits[0].Skill.Description), description))
	sim := min(forward, back)
	return hits[0].Skill, sim, sim >= NearDuplicateThreshold
}

// pseudoScore is the BM25 score of query's terms against a skill whose
// description is text and whose length is the mean.
func (x *Index) pseudoScore(terms map[string]float64, text string) float64 {
	tf := map[string]float64{}
	for _, t := range Tokens(text) {
		tf[t] += DescriptionWeight
	}
	var s float64
	for t, qtf := range terms {
		if n := tf[t]; n > 0 {
			s += qtf * x.idf(len(x.postings[t])) * n * (K1 + 1) / (n + K1)
		}
	}
	return s
}

// Similarity is score (a skill's BM25 score for query) over the score of
// a skill that is the query (selfScore), capped at 1: how much of what
// the query says the skill covers, comparable across queries.
func (x *Index) Similarity(query string, score float64) float64 {
	self := x.selfScore(queryTerms(query))
	if self <= 0 {
		return 0
	}
	return min(score/self, 1)
}

// Jaccard is |a ∩ b| / |a ∪ b| of two word sets.
func Jaccard(a, b map[string]bool) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 0
	}
	n := 0
	for w := range a {
		if b[w] {
			n++
		}
	}
	return float64(n) / float64(len(a)+len(b)-n)
}

// WordSet is text's distinct words, lower-cased, as Jaccard compares
// them: no stemming and no stop words dropped, the plain baseline.
func WordSet(text string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
	}) {
		m[w] = true
	}
	return m
}

// JaccardSearch ranks the skills by Jaccard similarity of query's words
// to each one's name, description and body words: the retrieval
// benchmark's baseline.
func (x *Index) JaccardSearch(query string, k int) []Hit {
	if x.words == nil {
		x.words = make([]map[string]bool, len(x.skills))
		for i, s := range x.skills {
			x.words[i] = WordSet(strings.NewReplacer("-", " ", "_", " ").Replace(s.Name) + " " + s.Description + " " + s.Body)
		}
	}
	q := WordSet(query)
	scores := make([]float64, len(x.skills))
	touched := make([]int32, 0, len(x.skills))
	for i := range x.skills {
		if scores[i] = Jaccard(q, x.words[i]); scores[i] > 0 {
			touched = append(touched, int32(i))
		}
	}
	return x.top(touched, scores, "", k)
}
