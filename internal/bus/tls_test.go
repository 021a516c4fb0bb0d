package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/bus"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files in a temp dir.
type testPKI struct {
	caFile, clientCert, clientKey string
	server                        tls.Certificate
	pool                          *x509.CertPool
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	writePEM := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return path
	}
	caKey := key()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentfleet test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	issue := func(serial int64, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "agentfleet test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		require.NoError(t, err)
		return der, k
	}
	p := testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.caFile = writePEM("ca.pem", "CERTIFICATE", caDER)
	srvDER, srvKey := issue(2, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.server = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
	cliDER, cliKey := issue(3, x509.ExtKeyUsageClientAuth, nil)
	p.clientCert = writePEM("client.pem", "CERTIFICATE", cliDER)
	keyDER, err := x509.MarshalECPrivateKey(cliKey)
	require.NoError(t, err)
	p.clientKey = writePEM("client-key.pem", "EC PRIVATE KEY", keyDER)
	return p
}

// A server that requires TLS and client certificates: the fleet connects
// with tls://, the CA and its certificate, and is refused without them.
func TestTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{
		Listen: "127.0.0.1:0",
		TLS: &tls.Config{
			Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
		},
	})
	require.NoError(t, err)
	t.Cleanup(e.Shutdown)
	url := e.ClientURL()
	require.True(t, strings.HasPrefix(url, "tls://"), url)

	ctx := testCtx(t)
	b, err := bus.Connect(ctx, bus.Config{URL: url, TLSCA: pki.caFile, TLSCert: pki.clientCert, TLSKey: pki.clientKey})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, b.Ready(ctx))

	refused := map[string]bus.Config{
		"no client certificate": {URL: url, TLSCA: pki.caFile},
		"server not trusted":    {URL: url, TLSCert: pki.clientCert, TLSKey: pki.clientKey},
		"plain nats://":         {URL: "nats://" + e.Listen()},
	}
	for name, cfg := range refused {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := bus.Connect(cctx, cfg)
		cancel()
		require.Error(t, err, name)
	}
	_, err = bus.Connect(ctx, bus.Config{URL: url, TLSCert: pki.clientCert})
	require.ErrorContains(t, err, "TLSCert and TLSKey go together")
}
