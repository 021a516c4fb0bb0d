package skills_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/skills"
)

type labelled struct {
	Query string `json:"query"`
	Skill string `json:"skill"`
}

// retrievalSet is testdata's labelled set (testdata/generate.py): the
// skills, and queries that paraphrase one each.
func retrievalSet(t testing.TB) ([]agentfleet.Skill, []labelled) {
	t.Helper()
	var ss []agentfleet.Skill
	var qs []labelled
	for file, v := range map[string]any{"testdata/skills.json": &ss, "testdata/queries.json": &qs} {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, v))
	}
	slices.SortFunc(ss, func(a, b agentfleet.Skill) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	require.GreaterOrEqual(t, len(ss), 200)
	require.GreaterOrEqual(t, len(qs), 100)
	return ss, qs
}

// hitRates are the share of queries whose labelled skill ranks first,
// and in the first five.
func hitRates(qs []labelled, search func(q string) []skills.Hit) (top1, top5 float64) {
	for _, q := range qs {
		hits := search(q.Query)
		for i, h := range hits {
			if h.Skill.Name == q.Skill {
				if i == 0 {
					top1++
				}
				top5++
				break
			}
		}
	}
	n := float64(len(qs))
	return top1 / n, top5 / n
}

// On the labelled paraphrases BM25 finds the right skill in its first
// five at least as often as Jaccard over words does (it reports both).
func TestRetrievalQuality(t *testing.T) {
	t.Parallel()
	ss, qs := retrievalSet(t)
	x := skills.NewIndex(ss)
	for _, q := range qs {
		_, ok := x.Get(q.Skill)
		require.True(t, ok, "query %q is labelled with an unknown skill %q", q.Query, q.Skill)
	}
	b1, b5 := hitRates(qs, func(q string) []skills.Hit { return x.Search(q, "", 5) })
	j1, j5 := hitRates(qs, func(q string) []skills.Hit { return x.JaccardSearch(q, 5) })
	t.Logf("%d skills, %d paraphrased queries: BM25 top-1 %.2f top-5 %.2f; Jaccard top-1 %.2f top-5 %.2f", len(ss), len(qs), b1, b5, j1, j5)
	require.GreaterOrEqual(t, b5, j5, "BM25 top-5 below Jaccard's")
	require.Greater(t, b5, 0.5, "BM25 finds most paraphrases in its first five")
}

// bigTenant is n skills made from the labelled set's, renamed and with
// their descriptions' words shuffled in, the size of a large tenant.
func bigTenant(t testing.TB, n int) ([]agentfleet.Skill, []labelled) {
	ss, qs := retrievalSet(t)
	r := rand.New(rand.NewPCG(35, 10))
	out := make([]agentfleet.Skill, 0, n)
	for i := 0; len(out) < n; i++ {
		s := ss[i%len(ss)]
		o := ss[r.IntN(len(ss))]
		s.Name = fmt.Sprintf("%s-%d", s.Name, i)
		s.Body += "\nSee also: " + o.Description + ".\n"
		out = append(out, s)
	}
	return out, qs
}

// BenchmarkSkillSearch is one turn's search, the prompt's top five, in
// a tenant of 10,000 skills; it reports the p99 over the labelled
// queries and the characters the catalog adds to the prompt.
func BenchmarkSkillSearch(b *testing.B) {
	ss, qs := bigTenant(b, 10000)
	start := time.Now()
	x := skills.NewIndex(ss)
	build := time.Since(start)
	lib := skills.NewLibrary(x, "")
	durs := make([]time.Duration, 0, b.N)
	var chars int
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		q := qs[i%len(qs)].Query
		t0 := time.Now()
		ms, _ := lib.SkillList(b.Context(), q, loop.SkillCatalogSize)
		durs = append(durs, time.Since(t0))
		if i < len(qs) {
			chars += len(loop.SkillCatalog(ms))
		}
	}
	b.StopTimer()
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(build.Milliseconds()), "build-ms")
	b.ReportMetric(float64(chars)/float64(min(b.N, len(qs))), "catalog-chars")
}

// BenchmarkSkillIndexBuild is a worker's rebuild of a 10,000-skill
// tenant's index after a write.
func BenchmarkSkillIndexBuild(b *testing.B) {
	ss, _ := bigTenant(b, 10000)
	b.ReportAllocs()
	for range b.N {
		skills.NewIndex(ss)
	}
}
