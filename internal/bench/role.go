// The roles: what a fleet process of the bench's own binary runs
// (agentctl __serve nats|dispatcher|worker) and the readiness lines it
// prints for the bench to wait on.

package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/fleet"
)

// RoleCommand is the hidden agentctl subcommand that makes the binary one
// process of a fleet: `agentctl __serve nats|dispatcher|worker`. The bench
// re-executes its own binary this way to run a fleet of processes on a
// machine that has no Go toolchain and no nats-server.
const RoleCommand = "__serve"

// Readiness lines the roles print (the dispatcher and worker lines are
// their log messages; the dispatcher's names its API and metrics URLs).
const (
	natsReadyLine       = "nats ready "
	dispatcherReadyLine = "dispatcher listening"
	workerReadyLine     = "worker running"
)

// EnvRoleCPUProfile, set for a role, makes it write a CPU profile of
// itself to that file (agentctl bench --profile-dir).
const EnvRoleCPUProfile = "AGENTFLEET_BENCH_CPUPROFILE"

// ServeRole runs one fleet process until ctx ends (SIGTERM):
//
//	nats --listen HOST:PORT --store-dir DIR   a NATS server with JetStream
//	                                          (the server the fleet embeds, as a process);
//	     [--name N --cluster-name C           a node of cluster C, its routes on HOST:PORT
//	      --cluster HOST:PORT --routes URLS]
//	dispatcher                                fleet.RunDispatcher, configured by the environment
//	worker                                    fleet.RunWorker (SIGTERM drains), ditto
//
// The environment is the one docs/configuration.md lists, as for cmd/dispatcher and cmd/worker.
func ServeRole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(RoleCommand + ": name a role: nats, dispatcher or worker")
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if path := os.Getenv(EnvRoleCPUProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	switch args[0] {
	case "nats":
		fs := flag.NewFlagSet("nats", flag.ContinueOnError)
		fs.SetOutput(stderr)
		listen := fs.String("listen", "127.0.0.1:0", "client address")
		dir := fs.String("store-dir", "", "JetStream store directory")
		name := fs.String("name", "", "server name (a cluster node needs one)")
		clusterName := fs.String("cluster-name", "", "the cluster's name: makes the server a cluster node")
		clusterListen := fs.String("cluster", "", "this node's route address host:port")
		routes := fs.String("routes", "", "the other nodes' route URLs, comma-separated")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *dir == "" {
			return errors.New("nats: --store-dir is required")
		}
		ecfg := bus.EmbeddedConfig{Name: *name, Listen: *listen, StoreDir: *dir, Logger: logger.With("role", "nats")}
		if *clusterName != "" {
			ecfg.Cluster = &bus.EmbeddedCluster{Name: *clusterName, Listen: *clusterListen, Routes: strings.Split(*routes, ",")}
		}
		emb, err := bus.StartEmbedded(ecfg)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, natsReadyLine+emb.ClientURL())
		<-ctx.Done()
		emb.Shutdown()
		return nil
	case "dispatcher", "worker":
		cfg, err := fleet.ConfigFromEnv()
		if err != nil {
			return err
		}
		if args[0] == "dispatcher" {
			return fleet.RunDispatcher(ctx, cfg, logger)
		}
		return fleet.RunWorker(ctx, cfg, logger)
	}
	return fmt.Errorf("%s: unknown role %q: want nats, dispatcher or worker", RoleCommand, args[0])
}
