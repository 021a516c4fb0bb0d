package sandbox

import (
	"crypto/tls"
	"net/http"
	"strings"
	"sync"

	"github.com/agentfleet/agentfleet/internal/egress"
)

// egressNetsMax bounds the distinct agent egress lists a pool keeps a
// client for; past it they are all dropped (their idle connections
// closed) and made again as turns need them.
const egressNetsMax = 256

// guardedNet is a guard and the client that dials through it.
type guardedNet struct {
	guard  *egress.Guard
	client *http.Client
}

// egressNets holds one guardedNet per distinct agent egress list. An agent's
// addresses get a transport of their own: a connection to an address one
// agent may reach must never be reused by a turn of another agent that
// may not.
type egressNets struct {
	mu   sync.Mutex
	nets map[string]*guardedNet
}

// netFor is the net of a turn whose agent adds list to what the pool's
// NetworkConfig allows: the pool's own for an empty list, or under
// NetworkConfig.DenyPrivate, which no agent overrides. The list is read
// for its form only: the guard holds an agent's entries to the private
// ranges when it dials, so an entry the API would refuse today (an agent
// stored before it did) opens nothing more.
func (p *Pool) netFor(list []string) (*guardedNet, error) {
	if len(list) == 0 || p.cfg.Network.DenyPrivate {
		return &p.base, nil
	}
	key := strings.Join(list, "\x00")
	p.egress.mu.Lock()
	defer p.egress.mu.Unlock()
	if n, ok := p.egress.nets[key]; ok {
		return n, nil
	}
	agent, err := egress.ParseEntries(list)
	if err != nil {
		return nil, err
	}
	if len(p.egress.nets) >= egressNetsMax {
		p.egress.closeLocked()
	}
	cfg := p.guardConfig()
	cfg.Agent = agent
	g := egress.New(cfg)
	n := &guardedNet{guard: g, client: p.httpClient(g)}
	if p.egress.nets == nil {
		p.egress.nets = map[string]*guardedNet{}
	}
	p.egress.nets[key] = n
	return n, nil
}

// httpClient is the client of fetch and http that dials through g.
func (p *Pool) httpClient(g *egress.Guard) *http.Client {
	c := g.HTTPClient(p.cfg.Network.MaxRedirects)
	if p.cfg.Network.RootCAs != nil {
		if tr, ok := c.Transport.(*http.Transport); ok {
			tr.TLSClientConfig = &tls.Config{RootCAs: p.cfg.Network.RootCAs, MinVersion: tls.VersionTLS12}
		}
	}
	return c
}

// guardConfig is the guard of the pool's NetworkConfig.
func (p *Pool) guardConfig() egress.Config {
	n := p.cfg.Network
	return egress.Config{Allow: n.Allow, AllowHosts: n.AllowHosts, Resolver: n.Resolver, DenyPrivate: n.DenyPrivate}
}

func (e *egressNets) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closeLocked()
}

func (e *egressNets) closeLocked() {
	for _, n := range e.nets {
		n.client.CloseIdleConnections()
	}
	e.nets = nil
}
