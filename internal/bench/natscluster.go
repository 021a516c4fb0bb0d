package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// natsNode is one NATS server of a spawned fleet: its name, ports and
// store, fixed for the bench, and the process running it (nil while
// down).
type natsNode struct {
	name      string
	port      int
	routePort int // 0: a single server, no cluster
	dir       string
	p         *proc
	// gen counts its store directories: a node brought back empty gets
	// a new one.
	gen int
}

// clusterName names the bench's NATS cluster.
const clusterName = "agentfleet-bench"

// ClusterReplicas is the replicas of a cluster fleet's streams.
const ClusterReplicas = 3

func newNATSNodes(dir string, n int) ([]*natsNode, error) {
	nodes := make([]*natsNode, n)
	for i := range nodes {
		nd := &natsNode{name: "n" + strconv.Itoa(i+1), dir: filepath.Join(dir, "nats-n"+strconv.Itoa(i+1))}
		var err error
		if nd.port, err = freePort(); err != nil {
			return nil, err
		}
		if n > 1 {
			if nd.routePort, err = freePort(); err != nil {
				return nil, err
			}
		}
		nodes[i] = nd
	}
	return nodes, nil
}

// natsURL is every node's client URL, comma-separated, as the fleet's
// processes are given a cluster.
func (f *procFleet) natsURL() string {
	urls := make([]string, len(f.nats))
	for i, nd := range f.nats {
		urls[i] = "nats://127.0.0.1:" + strconv.Itoa(nd.port)
	}
	return strings.Join(urls, ",")
}

// natsProcs are the running NATS processes (f.mu held).
func (f *procFleet) natsProcs() []*proc {
	var ps []*proc
	for _, nd := range f.nats {
		if nd.p != nil {
			ps = append(ps, nd.p)
		}
	}
	return ps
}

// startNATS starts node i; empty gives it a new, empty store directory,
// as a machine replaced by a new one would have.
func (f *procFleet) startNATS(ctx context.Context, i int, empty bool) error {
	f.mu.Lock()
	nd := f.nats[i]
	if empty {
		nd.gen++
	}
	dir := nd.dir + "-" + strconv.Itoa(nd.gen)
	f.mu.Unlock()
	if empty {
		if err := os.RemoveAll(nd.dir + "-" + strconv.Itoa(nd.gen-1)); err != nil {
			return err
		}
	}
	args := []string{RoleCommand, "nats", "--listen", "127.0.0.1:" + strconv.Itoa(nd.port), "--store-dir", dir}
	if nd.routePort != 0 {
		var routes []string
		for _, o := range f.nats {
			if o != nd {
				routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(o.routePort))
			}
		}
		args = append(args, "--name", nd.name, "--cluster-name", clusterName,
			"--cluster", "127.0.0.1:"+strconv.Itoa(nd.routePort), "--routes", strings.Join(routes, ","))
	}
	name := f.name("nats-" + nd.name)
	p, err := startProc(f.exe, name, filepath.Join(f.dir, name+".log"), natsReadyLine, args, f.procEnv(name))
	if err != nil {
		return err
	}
	if _, err := p.waitReady(ctx, 30*time.Second); err != nil {
		p.kill()
		return err
	}
	f.mu.Lock()
	nd.p = p
	f.mu.Unlock()
	return nil
}

// restartNATS stops the (single) NATS server, gracefully or (crash) with
// SIGKILL, and starts it again on the same port and store directory.
func (f *procFleet) restartNATS(ctx context.Context, crash bool) error {
	f.killNATS(0, crash)
	return f.startNATS(ctx, 0, false)
}

// killNATS stops node i, with SIGKILL when crash, and leaves it down.
func (f *procFleet) killNATS(i int, crash bool) {
	f.mu.Lock()
	nd := f.nats[i]
	p := nd.p
	nd.p = nil
	f.mu.Unlock()
	if p == nil {
		return
	}
	if crash {
		p.kill()
	} else {
		p.stop(15 * time.Second)
	}
}

// natsNode is the index of the node named name, or an error.
func (f *procFleet) natsNodeNamed(name string) (int, error) {
	for i, nd := range f.nats {
		if nd.name == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no NATS node is named %q", name)
}
