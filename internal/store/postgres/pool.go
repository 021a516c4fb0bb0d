package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// pool is a small connection pool of *pgx.Conn.
//
// Why not pgxpool: it needs github.com/jackc/puddle/v2, which the module
// does not carry, and the store needs only this much: a bounded set of
// connections handed out LIFO, checked when they sat idle, and dropped
// when a call left them broken or inside a transaction.
type pool struct {
	cfg *pgx.ConnConfig
	// sem holds one token per connection handed out (or being opened),
	// so at most cap(sem) exist in use at once.
	sem chan struct{}

	mu     sync.Mutex
	idle   []idleConn
	closed bool
}

type idleConn struct {
	conn  *pgx.Conn
	since time.Time
}

// pingAfterIdle: a connection idle longer than this is pinged before use,
// so a server restart costs a reconnect, not a failed call.
const pingAfterIdle = time.Second

var errPoolClosed = errors.New("postgres: store closed")

func newPool(cfg *pgx.ConnConfig, maxConns int) *pool {
	return &pool{cfg: cfg, sem: make(chan struct{}, maxConns)}
}

func (p *pool) acquire(ctx context.Context) (*pgx.Conn, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			<-p.sem
			return nil, errPoolClosed
		}
		var ic idleConn
		if n := len(p.idle); n > 0 {
			ic = p.idle[n-1]
			p.idle = p.idle[:n-1]
		}
		p.mu.Unlock()
		if ic.conn == nil {
			break
		}
		if ic.conn.IsClosed() {
			continue
		}
		if time.Since(ic.since) > pingAfterIdle {
			if err := ic.conn.Ping(ctx); err != nil {
				closeConn(ic.conn)
				if ctx.Err() != nil {
					<-p.sem
					return nil, ctx.Err()
				}
				continue
			}
		}
		return ic.conn, nil
	}
	c, err := pgx.ConnectConfig(ctx, p.cfg)
	if err != nil {
		<-p.sem
		return nil, err
	}
	return c, nil
}

// release returns c to the pool, or closes it when it cannot be reused:
// broken, still busy, or left inside a transaction.
func (p *pool) release(c *pgx.Conn) {
	defer func() { <-p.sem }()
	if c.IsClosed() || c.PgConn().IsBusy() || c.PgConn().TxStatus() != 'I' {
		closeConn(c)
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		closeConn(c)
		return
	}
	p.idle = append(p.idle, idleConn{conn: c, since: time.Now()})
	p.mu.Unlock()
}

// close closes idle connections; those in use are closed when released.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, ic := range idle {
		closeConn(ic.conn)
	}
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}
