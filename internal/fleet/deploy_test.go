package fleet_test

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/natsauth"
)

const repoRoot = "../.."

// runtimeEnv are variables the Go runtime reads in every binary.
var runtimeEnv = []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC"}

// envRead is every environment variable name the dispatcher and worker
// binaries' source spells out (agentctl's and the bench's apart): what
// the deploy files may set.
func envRead(t *testing.T) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`"((?:AGENTFLEET|OPENAI|OTEL)_[A-Z0-9_]+)"`)
	read := map[string]bool{}
	for _, v := range runtimeEnv {
		read[v] = true
	}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() && (rel == filepath.Join("cmd", "agentctl") || rel == filepath.Join("internal", "bench") || strings.HasPrefix(d.Name(), ".")) && rel != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllSubmatch(src, -1) {
			read[string(m[1])] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, read["AGENTFLEET_NATS_REPLICAS"], "the scan finds the fleet's variables")
	return read
}

// composeDefault resolves compose's ${VAR:-default} to its default, as
// on a host where VAR is unset.
var composeDefault = regexp.MustCompile(`\$\{[A-Z0-9_]+:-([^}]*)\}`)

// requireEnvAccepted asserts every variable of env is one the binaries
// read, and that together their values parse.
func requireEnvAccepted(t *testing.T, where string, env map[string]string, read map[string]bool) {
	t.Helper()
	require.NotEmpty(t, env, where)
	for k, v := range env {
		require.True(t, read[k], "%s sets %s, which no fleet binary reads", where, k)
		t.Setenv(k, composeDefault.ReplaceAllString(v, "$1"))
	}
	_, err := fleet.ConfigFromEnv()
	require.NoError(t, err, "%s: the fleet's configuration refuses its environment", where)
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Deploy struct {
		Replicas int `yaml:"replicas"`
	} `yaml:"deploy"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

// mount is where s mounts the named volume vol ("" when it does not),
// and whether read-only.
func (s composeService) mount(vol string) (path string, ro bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[0] == vol {
			return parts[1], len(parts) == 3 && parts[2] == "ro"
		}
	}
	return "", false
}

// docker-compose.yml cannot be run here (no Docker engine); what can be
// checked is: every variable it gives the fleet is read and parses, the
// NATS nodes form a JetStream cluster (each with a server name, routes to
// the others), the fleet is given every node and R3, and the topology is
// two dispatchers and two workers.
func TestComposeFile(t *testing.T) {
	read := envRead(t)
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(raw, &c))

	var natsNodes, dispatchers []string
	workers := 0
	for name, s := range c.Services {
		switch {
		case strings.HasPrefix(s.Image, "nats:"):
			natsNodes = append(natsNodes, name)
			args := strings.Join(s.Command, " ")
			require.Contains(t, args, "--name "+name, "%s: a JetStream cluster node needs its server_name", name)
			require.Contains(t, args, "-js", name)
			require.Contains(t, args, "--cluster_name", name)
		case len(s.Entrypoint) == 1 && s.Entrypoint[0] == "/usr/local/bin/dispatcher":
			dispatchers = append(dispatchers, name)
			requireEnvAccepted(t, name, s.Environment, read)
		case len(s.Entrypoint) == 1 && s.Entrypoint[0] == "/usr/local/bin/worker":
			workers += max(1, s.Deploy.Replicas)
			requireEnvAccepted(t, name, s.Environment, read)
		}
	}
	slices.Sort(natsNodes)
	require.Equal(t, []string{"nats-1", "nats-2", "nats-3"}, natsNodes)
	require.Len(t, dispatchers, 2)
	require.Equal(t, 2, workers)
	for _, n := range natsNodes {
		args := strings.Join(c.Services[n].Command, " ")
		for _, o := range natsNodes {
			if o != n {
				require.Contains(t, args, "nats://"+o+":6222", "%s routes to %s", n, o)
			}
		}
	}
	env := c.Services[dispatchers[0]].Environment
	require.Equal(t, "3", env["AGENTFLEET_NATS_REPLICAS"])
	for _, n := range natsNodes {
		require.Contains(t, env["AGENTFLEET_NATS_URL"], "nats://"+n+":4222", "the fleet is given every node")
	}
	prom, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "prometheus.yml"))
	require.NoError(t, err)
	for _, d := range dispatchers {
		require.Contains(t, string(prom), d+":9463", "Prometheus scrapes %s", d)
	}
	requireComposeNATSAuth(t, c, natsNodes, dispatchers)
}

// requireComposeNATSAuth: a one-shot agentctl nats-auth writes the trust
// chain into a named volume (keeping it on later starts); every NATS node
// and fleet process waits for it to complete and reads it: the nodes
// start from its server.conf (their command line, with the volume's files
// in place, parses into a server in JWT mode with the node's name), the
// fleet connects with its fleet.creds, the dispatchers sign with its
// signing.nk.
func requireComposeNATSAuth(t *testing.T, c composeFile, natsNodes, dispatchers []string) {
	t.Helper()
	var authSvc string
	for name, s := range c.Services {
		if len(s.Entrypoint) >= 2 && s.Entrypoint[0] == "/usr/local/bin/agentctl" && s.Entrypoint[1] == "nats-auth" {
			authSvc = name
		}
	}
	require.NotEmpty(t, authSvc, "a one-shot agentctl nats-auth service")
	auth := c.Services[authSvc]
	args := auth.Entrypoint[2:]
	require.Contains(t, args, "--if-missing", "a restarted stack keeps its trust chain (and the creds issued with it)")
	require.NotContains(t, args, "--force")
	dir := args[len(args)-1]
	vol := ""
	for _, v := range auth.Volumes {
		if p := strings.Split(v, ":"); len(p) >= 2 && p[1] == dir {
			vol = p[0]
		}
	}
	require.NotEmpty(t, vol, "%s writes %s into a volume", authSvc, dir)
	require.Contains(t, c.Volumes, vol, "a named volume")
	if _, ro := auth.mount(vol); ro {
		t.Fatalf("%s mounts %s read-only", authSvc, vol)
	}
	resolverDir := ""
	for i, a := range args {
		if a == "--resolver-dir" && i+1 < len(args) {
			resolverDir = args[i+1]
		}
	}
	require.True(t, filepath.IsAbs(resolverDir), "--resolver-dir %q: absolute, on each node's own volume", resolverDir)

	dependsOnAuth := func(name string) {
		t.Helper()
		dep, ok := c.Services[name].DependsOn[authSvc]
		require.True(t, ok, "%s depends on %s", name, authSvc)
		require.Equal(t, "service_completed_successfully", dep.Condition, "%s waits for %s to complete", name, authSvc)
	}
	workers := 0
	for name, s := range c.Services {
		if len(s.Entrypoint) == 1 && s.Entrypoint[0] == "/usr/local/bin/worker" {
			workers++
			dependsOnAuth(name)
			at, _ := s.mount(vol)
			require.NotEmpty(t, at, "%s mounts %s", name, vol)
			require.Equal(t, at+"/"+natsauth.FileFleetCreds, s.Environment["AGENTFLEET_NATS_CREDS"], name)
			require.Empty(t, s.Environment["AGENTFLEET_NATS_SIGNING_KEY"], "%s: only dispatchers sign tenants' creds", name)
		}
	}
	require.Positive(t, workers)
	for _, name := range dispatchers {
		s := c.Services[name]
		dependsOnAuth(name)
		at, _ := s.mount(vol)
		require.NotEmpty(t, at, "%s mounts %s", name, vol)
		require.Equal(t, at+"/"+natsauth.FileFleetCreds, s.Environment["AGENTFLEET_NATS_CREDS"], name)
		require.Equal(t, at+"/"+natsauth.FileSigningKey, s.Environment["AGENTFLEET_NATS_SIGNING_KEY"], name)
	}

	// What the one-shot writes, in a stand-in for the volume; each node's
	// paths mapped onto stand-ins of its mounts.
	authDir := t.TempDir()
	setup, err := natsauth.Generate(natsauth.GenerateConfig{ResolverDir: resolverDir})
	require.NoError(t, err)
	require.NoError(t, setup.WriteDir(authDir, false))
	for _, name := range natsNodes {
		s := c.Services[name]
		dependsOnAuth(name)
		at, ro := s.mount(vol)
		require.NotEmpty(t, at, "%s mounts %s", name, vol)
		require.True(t, ro, "%s mounts %s read-only", name, vol)
		data := ""
		for _, v := range s.Volumes {
			if p := strings.Split(v, ":"); len(p) >= 2 && p[0] != vol && strings.HasPrefix(resolverDir, p[1]+"/") {
				data = p[1]
			}
		}
		require.NotEmpty(t, data, "%s keeps the resolver's %s on a volume of its own", name, resolverDir)
		nodeData := t.TempDir()
		var argv []string
		for _, a := range s.Command {
			a = strings.Replace(a, at+"/", authDir+"/", 1)
			if a == data {
				a = nodeData
			}
			argv = append(argv, a)
		}
		opts, err := server.ConfigureOptions(flag.NewFlagSet(name, flag.ContinueOnError), argv, func() {}, func() {}, func() {})
		require.NoError(t, err, "%s: nats-server %s", name, strings.Join(argv, " "))
		if opts.AccountResolver != nil {
			opts.AccountResolver.Close() // parsing opened the full resolver's store
		}
		require.NotEmpty(t, opts.TrustedOperators, "%s runs in JWT mode (the operator of %s)", name, natsauth.FileServerConf)
		require.Equal(t, name, opts.ServerName)
		require.True(t, opts.JetStream, name)
		require.NotEmpty(t, opts.SystemAccount, name)
	}
}

// The Kubernetes manifest: the variables of the Secret and of every
// agentfleet container are read and parse, and the NATS cluster of the
// Helm values holds the replicas the fleet asks for.
func TestKubernetesManifests(t *testing.T) {
	read := envRead(t)
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "agentfleet.yaml"))
	require.NoError(t, err)
	type container struct {
		Name    string `yaml:"name"`
		Image   string `yaml:"image"`
		EnvFrom []struct {
			SecretRef struct {
				Name string `yaml:"name"`
			} `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Env []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
	}
	type doc struct {
		Kind       string                `yaml:"kind"`
		Metadata   struct{ Name string } `yaml:"metadata"`
		StringData map[string]string     `yaml:"stringData"`
		Spec       struct {
			Template struct {
				Spec struct {
					Containers []container `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	secrets := map[string]map[string]string{}
	var containers []container
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var d doc
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if d.Kind == "Secret" {
			secrets[d.Metadata.Name] = d.StringData
		}
		containers = append(containers, d.Spec.Template.Spec.Containers...)
	}
	require.Len(t, containers, 2, "a dispatcher and a worker")
	replicas := ""
	for _, c := range containers {
		require.True(t, strings.HasPrefix(c.Image, "agentfleet:"), c.Image)
		env := map[string]string{}
		for _, ef := range c.EnvFrom {
			require.Contains(t, secrets, ef.SecretRef.Name, "%s reads a Secret the manifest defines", c.Name)
			for k, v := range secrets[ef.SecretRef.Name] {
				env[k] = v
			}
		}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		requireEnvAccepted(t, c.Name, env, read)
		replicas = env["AGENTFLEET_NATS_REPLICAS"]
		require.Equal(t, 3, strings.Count(env["AGENTFLEET_NATS_URL"], "nats://"), "%s is given every NATS node", c.Name)
	}
	require.Equal(t, "3", replicas)

	raw, err = os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "nats-values.yaml"))
	require.NoError(t, err)
	var values struct {
		Config struct {
			Cluster struct {
				Enabled  bool `yaml:"enabled"`
				Replicas int  `yaml:"replicas"`
			} `yaml:"cluster"`
			JetStream struct {
				Enabled bool `yaml:"enabled"`
			} `yaml:"jetstream"`
		} `yaml:"config"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &values))
	require.True(t, values.Config.Cluster.Enabled && values.Config.JetStream.Enabled, "a JetStream cluster")
	require.Equal(t, 3, values.Config.Cluster.Replicas)
}
