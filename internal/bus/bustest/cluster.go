package bustest

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentfleet/agentfleet/internal/bus"
)

// Cluster is a JetStream cluster of embedded servers on loopback ports
// fixed for its lifetime, so a node can be stopped and started again at
// the same address, with its store or with an empty one.
type Cluster struct {
	t     testing.TB
	Name  string
	mu    sync.Mutex
	nodes []*clusterNode
}

type clusterNode struct {
	name       string
	listen     string // client address
	route      string // cluster address
	storeDir   string
	srv        *bus.Embedded // nil while stopped
	otherRoute []string
}

// StartCluster starts an n-node JetStream cluster of embedded servers
// (named n1..nN) and stops it when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, Name: "af-test"}
	for i := range n {
		c.nodes = append(c.nodes, &clusterNode{
			name:     "n" + strconv.Itoa(i+1),
			listen:   "127.0.0.1:" + strconv.Itoa(FreePort(t)),
			route:    "127.0.0.1:" + strconv.Itoa(FreePort(t)),
			storeDir: t.TempDir(),
		})
	}
	for _, nd := range c.nodes {
		for _, o := range c.nodes {
			if o != nd {
				nd.otherRoute = append(nd.otherRoute, "nats://"+o.route)
			}
		}
	}
	for i := range c.nodes {
		c.Start(i, false)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	return c
}

// URL is every node's client URL, comma-separated, as the fleet is given
// a cluster.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = "nats://" + nd.listen
	}
	return strings.Join(urls, ",")
}

// Index is the index of the node named name (a stream leader's name), or
// -1.
func (c *Cluster) Index(name string) int {
	for i, nd := range c.nodes {
		if nd.name == name {
			return i
		}
	}
	return -1
}

// Stop shuts node i down (a no-op when it is stopped).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	nd := c.nodes[i]
	srv := nd.srv
	nd.srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
	}
}

// Start starts node i at its address; empty gives it a new, empty store,
// as a machine replaced by a new one would have.
func (c *Cluster) Start(i int, empty bool) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.nodes[i]
	if nd.srv != nil {
		c.t.Fatalf("start cluster node %s: already running", nd.name)
	}
	if empty {
		nd.storeDir = c.t.TempDir()
	}
	var logger *slog.Logger
	if os.Getenv("AGENTFLEET_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", nd.name)
	}
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{
		Name: nd.name, Listen: nd.listen, StoreDir: nd.storeDir, Logger: logger,
		Cluster: &bus.EmbeddedCluster{Name: c.Name, Listen: nd.route, Routes: nd.otherRoute},
	})
	if err != nil {
		c.t.Fatalf("start cluster node %s: %v", nd.name, err)
	}
	nd.srv = srv
}

// FreePort is a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ClusterArgs are the nats-server flags that make node name (listening
// for clients on clientPort and for routes on routePort) a member of the
// cluster named cluster whose nodes' route ports are routePorts.
func ClusterArgs(name, cluster string, clientPort, routePort int, routePorts []int) []string {
	var routes []string
	for _, p := range routePorts {
		if p != routePort {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
	}
	return []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(clientPort), "-n", name,
		"--cluster_name", cluster, "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", routePort), "--routes", strings.Join(routes, ",")}
}

// ProcessCluster is a JetStream cluster of nats-server processes (from
// BuildServerBinary) on loopback ports fixed for its lifetime.
type ProcessCluster struct {
	t          testing.TB
	bin        string
	Name       string
	mu         sync.Mutex
	names      []string
	clientPort []int
	routePort  []int
	storeDirs  []string
	procs      []*ServerProcess // nil while down
}

// StartProcessCluster starts an n-node cluster of nats-server processes
// (named n1..nN) and stops it when the test ends.
func StartProcessCluster(t testing.TB, bin string, n int) *ProcessCluster {
	t.Helper()
	c := &ProcessCluster{t: t, bin: bin, Name: "af-test"}
	for i := range n {
		c.names = append(c.names, "n"+strconv.Itoa(i+1))
		c.clientPort = append(c.clientPort, FreePort(t))
		c.routePort = append(c.routePort, FreePort(t))
		c.storeDirs = append(c.storeDirs, t.TempDir())
		c.procs = append(c.procs, nil)
	}
	for i := range n {
		c.Start(i, false)
	}
	return c
}

// URL is every node's client URL, comma-separated.
func (c *ProcessCluster) URL() string {
	urls := make([]string, len(c.names))
	for i, p := range c.clientPort {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	return strings.Join(urls, ",")
}

// Index is the index of the node named name, or -1.
func (c *ProcessCluster) Index(name string) int {
	for i, n := range c.names {
		if n == name {
			return i
		}
	}
	return -1
}

// Kill ends node i with SIGKILL, as a crash would.
func (c *ProcessCluster) Kill(i int) {
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Start starts node i; empty gives it a new, empty store (a replaced
// machine).
func (c *ProcessCluster) Start(i int, empty bool) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] != nil {
		c.t.Fatalf("start cluster node %s: already running", c.names[i])
	}
	if empty {
		c.storeDirs[i] = c.t.TempDir()
	}
	args := ClusterArgs(c.names[i], c.Name, c.clientPort[i], c.routePort[i], c.routePort)
	c.procs[i] = startServerProcess(c.t, c.bin, c.storeDirs[i], args...)
}
