package skills

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/agentfleet/agentfleet"
)

// Source is where a worker reads a tenant's skills (a store.Store).
type Source interface {
	// SkillRevision moves on at every write of the tenant's skills.
	SkillRevision(ctx context.Context, tenant string) (int64, error)
	SkillList(ctx context.Context, tenant string) ([]agentfleet.Skill, error)
}

// TenantsMax bounds the tenants whose index a Libraries keeps; past it,
// one is dropped (and rebuilt when its tenant runs again).
const TenantsMax = 1024

// Libraries keeps one Index per tenant in a worker process. Every turn
// asks For, which reads the tenant's skills revision (one primary-key
// read) and rebuilds the index when another process wrote the skills
// since; a fleet needs no message for it, and a worker that missed one
// cannot serve stale skills past its next turn. A tenant with no
// skills costs that read and nothing more.
type Libraries struct {
	src Source
	mu  sync.Mutex
	m   map[string]*tenantIndex
}

type tenantIndex struct {
	rev   int64
	index *Index
	// build serialises a tenant's rebuilds: turns that find the same
	// new revision wait for one build.
	build sync.Mutex
}

// NewLibraries returns the indexes over src.
func NewLibraries(src Source) *Libraries {
	return &Libraries{src: src, m: map[string]*tenantIndex{}}
}

// Index is the tenant's index as of its current revision (nil, with no
// error, for a tenant that has never had a skill).
func (l *Libraries) Index(ctx context.Context, tenant string) (*Index, error) {
	rev, err := l.src.SkillRevision(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return l.indexAt(ctx, tenant, rev)
}

// indexAt is the tenant's index as of revision rev, which the caller read
// (a turn's load reads it with the run: store.TurnLoadResult).
func (l *Libraries) indexAt(ctx context.Context, tenant string, rev int64) (*Index, error) {
	if rev == 0 {
		return nil, nil
	}
	l.mu.Lock()
	ti := l.m[tenant]
	if ti == nil {
		if len(l.m) >= TenantsMax {
			for k := range l.m {
				delete(l.m, k)
				break
			}
		}
		ti = &tenantIndex{}
		l.m[tenant] = ti
	}
	l.mu.Unlock()

	ti.build.Lock()
	defer ti.build.Unlock()
	if ti.index != nil && ti.rev >= rev {
		return ti.index, nil
	}
	// The revision read before the list: a write between them makes the
	// next turn rebuild again, never keep a list older than its mark.
	list, err := l.src.SkillList(ctx, tenant)
	if err != nil {
		return nil, err
	}
	ti.rev, ti.index = rev, NewIndex(list)
	return ti.index, nil
}

// For is the skills agent of tenant sees, as its run's scripts reach
// them, and nil when it sees none: the prompt then says nothing of
// skills, as for a tenant without any.
//
// rev is the tenant's skills revision as the caller read it (the turn's
// load); 0 means the tenant has none, and nothing is read.
func (l *Libraries) For(ctx context.Context, tenant, agent string, rev int64) (agentfleet.SkillLibrary, error) {
	x, err := l.indexAt(ctx, tenant, rev)
	if err != nil || x == nil {
		return nil, err
	}
	for i := range x.skills {
		if x.skills[i].SkillFor(agent) {
			return &Library{x: x, agent: agent}, nil
		}
	}
	return nil, nil
}

// Library is an index as one agent sees it: agentfleet.SkillLibrary.
type Library struct {
	x     *Index
	agent string
}

// NewLibrary is x as agent sees it ("" for every skill).
func NewLibrary(x *Index, agent string) *Library { return &Library{x: x, agent: agent} }

// ListMax bounds what one skillList() returns.
const ListMax = 50

// SkillList ranks the agent's skills for query, or lists them by name
// without one, at most limit (zero or past ListMax: ListMax).
func (l *Library) SkillList(_ context.Context, query string, limit int) ([]agentfleet.SkillMatch, error) {
	if limit <= 0 || limit > ListMax {
		limit = ListMax
	}
	out := []agentfleet.SkillMatch{}
	if strings.TrimSpace(query) == "" {
		for i := range l.x.skills {
			s := &l.x.skills[i]
			if len(out) == limit {
				break
			}
			if l.agent == "" || s.SkillFor(l.agent) {
				out = append(out, agentfleet.SkillMatch{Name: s.Name, Description: s.Description})
			}
		}
		return out, nil
	}
	for _, h := range l.x.Search(query, l.agent, limit) {
		out = append(out, agentfleet.SkillMatch{Name: h.Skill.Name, Description: h.Skill.Description, Score: round3(h.Score)})
	}
	return out, nil
}

// SkillGet is the body of a skill the agent sees.
func (l *Library) SkillGet(_ context.Context, name string) (string, error) {
	s, ok := l.x.Get(name)
	if !ok || (l.agent != "" && !s.SkillFor(l.agent)) {
		return "", fmt.Errorf("no skill %q: skillList() names the skills there are", name)
	}
	return s.Body, nil
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
