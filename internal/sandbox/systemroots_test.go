package sandbox

import (
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// systemRootsChildURL, set in the environment, makes
// TestScriptsTrustTheSystemRoots the child that fetches it.
const systemRootsChildURL = "AGENTFLEET_TEST_SYSTEM_ROOTS_URL"

// Scripts' HTTPS trusts the system roots the way Go does, so
// SSL_CERT_FILE pointing at a test CA reaches a private HTTPS API from a
// worker or dev mode, with no RootCAs configured. A pool's roots are read
// once per process, so each case is a fresh process: this test binary
// run again as a child.
func TestScriptsTrustTheSystemRoots(t *testing.T) {
	if u := os.Getenv(systemRootsChildURL); u != "" {
		p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
		res := execute(t, p, agentfleet.ExecRequest{Script: fmt.Sprintf(`function run() { return fetch(%q).status }`, u)})
		if res.Err != nil {
			fmt.Println("fetch failed:", res.Err)
			os.Exit(3)
		}
		fmt.Println("fetched:", ok(t, res))
		return
	}
	srv := newCredServer(t, true, "X-Api-Key")
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	child := func(certFile string) (string, error) {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestScriptsTrustTheSystemRoots$", "-test.count", "1")
		cmd.Env = append(os.Environ(), systemRootsChildURL+"="+srv.URL+"/roots", "SSL_CERT_FILE="+certFile)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := child(ca)
	require.NoError(t, err, out)
	require.Contains(t, out, "fetched: 200")
	require.Equal(t, []string{"/roots "}, srv.requests())

	out, err = child(filepath.Join(t.TempDir(), "none.pem"))
	require.Error(t, err, "without the test CA the certificate is not trusted")
	require.Contains(t, out, "certificate")
}
