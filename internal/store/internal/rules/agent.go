package rules

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// Bounds of an agent's spec. The persona enters every prompt of every
// run of the agent, so it is capped well below a model's context.
const (
	AgentSystemMaxBytes = 32 << 10
	agentListMax        = 64 // entries of primitives, egress, approve
	agentEntryMaxBytes  = 256
)

// AgentUpsert validates p: the shape of its spec (what the store must be
// able to keep). What a worker can serve (primitive names, approve rules,
// egress syntax) the API checks against the sandbox and the guard.
func AgentUpsert(p store.AgentUpsertParams) error {
	if err := CheckID("agent tenant", p.Tenant); err != nil {
		return err
	}
	if err := CheckID("agent name", p.Name); err != nil {
		return err
	}
	s := p.Spec
	switch {
	case len(s.Persona) > AgentSystemMaxBytes:
		return Invalidf("agent %s: system is %d bytes; the limit is %d", p.Name, len(s.Persona), AgentSystemMaxBytes)
	case s.MaxTurns < 0 || s.MaxTokens < 0 || s.MaxCompletionTokens < 0 || s.MaxModelCallsPerTurn < 0:
		return Invalidf("agent %s: limits must not be negative (zero means the default)", p.Name)
	case s.TurnTimeout < 0 || s.ApprovalTimeout < 0:
		return Invalidf("agent %s: turn_timeout and approval_timeout must not be negative (zero means the default)", p.Name)
	}
	if err := agentfleet.CheckAgentSecrets(s.Secrets); err != nil {
		return Invalidf("agent %s: %v", p.Name, err)
	}
	if err := checkTexts("agent system", s.Persona, "agent model", s.Model, "agent approval_callback_url", s.ApprovalCallbackURL); err != nil {
		return err
	}
	for _, f := range []struct {
		field string
		list  []string
	}{{"primitives", s.Primitives}, {"egress", s.Egress}, {"approve", s.Approve}} {
		field, list := f.field, f.list
		if len(list) > agentListMax {
			return Invalidf("agent %s: %s has %d entries; the limit is %d", p.Name, field, len(list), agentListMax)
		}
		for _, e := range list {
			if e == "" || len(e) > agentEntryMaxBytes {
				return Invalidf("agent %s: %s entries are 1 to %d bytes", p.Name, field, agentEntryMaxBytes)
			}
			if err := CheckText("agent "+field, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// EncodeAgentSpec is the stored form of a spec.
func EncodeAgentSpec(s agentfleet.AgentSpec) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("encode agent spec: %v", err)) // plain data: cannot fail
	}
	return b
}

// DecodeAgentSpec reads a stored spec and fills the defaults a reader
// relies on (approval_timeout).
func DecodeAgentSpec(b []byte) (agentfleet.AgentSpec, error) {
	var s agentfleet.AgentSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("decode agent spec: %w", err)
	}
	if s.ApprovalTimeout == 0 {
		s.ApprovalTimeout = agentfleet.ApprovalTimeoutDefault
	}
	return s, nil
}

// AgentList validates p and decodes its cursor.
func AgentList(p store.AgentListParams) (store.AgentListParams, *driver.AgentPos, error) {
	if err := CheckID("agent list: tenant", p.Tenant); err != nil {
		return p, nil, err
	}
	var err error
	if p.Limit, err = PageLimit("agent list", p.Limit); err != nil {
		return p, nil, err
	}
	if p.Cursor == "" {
		return p, nil, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(p.Cursor)
	micros, name, ok := strings.Cut(strings.TrimPrefix(string(raw), "a"), ":")
	at, aerr := strconv.ParseInt(micros, 10, 64)
	if err != nil || len(raw) == 0 || raw[0] != 'a' || !ok || aerr != nil || CheckID("agent cursor name", name) != nil {
		return p, nil, Invalidf("agent cursor %q is malformed: pass the NextCursor of the previous page", p.Cursor)
	}
	return p, &driver.AgentPos{CreatedAt: time.UnixMicro(at).UTC(), Name: name}, nil
}

// AgentPage is AgentList p's answer from rows read newest first, one
// more than p.Limit when a page follows.
func AgentPage(as []agentfleet.Agent, p store.AgentListParams) store.AgentListResult {
	var res store.AgentListResult
	if len(as) > p.Limit {
		as = as[:p.Limit]
		last := as[len(as)-1]
		res.NextCursor = base64.RawURLEncoding.EncodeToString([]byte("a" + strconv.FormatInt(last.CreatedAt.UnixMicro(), 10) + ":" + last.Name))
	}
	res.Agents = as
	return res
}

// AgentDelete validates p: the default agent stays.
func AgentDelete(p store.AgentDeleteParams) error {
	if err := CheckID("agent tenant", p.Tenant); err != nil {
		return err
	}
	if err := CheckID("agent name", p.Name); err != nil {
		return err
	}
	if p.Name == agentfleet.DefaultAgent {
		return Invalidf("the %q agent cannot be deleted: every tenant has it (replace it instead)", agentfleet.DefaultAgent)
	}
	return nil
}

// AgentUpsert takes the agent's name lock, so that two replacements of
// one agent number their versions one after the other, compares with the
// current spec and stores a new version when it differs.
func (s *Store) AgentUpsert(ctx context.Context, p store.AgentUpsertParams) (agentfleet.Agent, error) {
	if err := AgentUpsert(p); err != nil {
		return agentfleet.Agent{}, err
	}
	spec := EncodeAgentSpec(p.Spec)
	// want is the spec as a read returns it, to compare with the stored one.
	want, err := DecodeAgentSpec(spec)
	if err != nil {
		return agentfleet.Agent{}, err
	}
	var a agentfleet.Agent
	err = s.d.Tx(ctx, func(x driver.Executor) error {
		if err := x.AgentLock(ctx, p.Tenant, p.Name); err != nil {
			return err
		}
		cur, err := x.AgentGet(ctx, p.Tenant, p.Name, 0)
		exists := err == nil
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		case reflect.DeepEqual(cur.AgentSpec, want):
			a = cur
			return nil
		}
		a, err = x.AgentVersionInsert(ctx, driver.AgentVersionInsertParams{
			Tenant: p.Tenant, Name: p.Name, Spec: spec, Exists: exists, Now: Now(),
		})
		return err
	})
	if err != nil {
		return agentfleet.Agent{}, fmt.Errorf("upsert agent %s/%s: %w", p.Tenant, p.Name, err)
	}
	return a, nil
}

func (s *Store) AgentGetByName(ctx context.Context, p store.AgentGetByNameParams) (agentfleet.Agent, error) {
	a, err := s.d.AgentGet(ctx, p.Tenant, p.Name, p.Version)
	if err != nil {
		return agentfleet.Agent{}, fmt.Errorf("get agent %s/%s: %w", p.Tenant, p.Name, err)
	}
	return a, nil
}

func (s *Store) AgentList(ctx context.Context, p store.AgentListParams) (store.AgentListResult, error) {
	p, after, err := AgentList(p)
	if err != nil {
		return store.AgentListResult{}, err
	}
	as, err := s.d.AgentList(ctx, driver.AgentListParams{Tenant: p.Tenant, Limit: p.Limit + 1, After: after})
	if err != nil {
		return store.AgentListResult{}, fmt.Errorf("list agents of %s: %w", p.Tenant, err)
	}
	return AgentPage(as, p), nil
}

func (s *Store) AgentDelete(ctx context.Context, p store.AgentDeleteParams) error {
	if err := AgentDelete(p); err != nil {
		return err
	}
	ok, err := s.d.AgentDelete(ctx, p.Tenant, p.Name)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete agent %s/%s: %w", p.Tenant, p.Name, err)
	}
	return nil
}
