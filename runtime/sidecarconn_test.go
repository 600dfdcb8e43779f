package runtime

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/internal/testcert"
)

// selfSigned returns a server certificate for loopback, signed by itself,
// and a pool that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	c := testcert.New(t)
	return c.TLS, c.Pool
}

// serveSidecar serves a sidecar of cfg on 127.0.0.1:0 until the test ends.
func serveSidecar(t *testing.T, cfg chunking.SidecarConfig) (*chunking.Sidecar, string) {
	t.Helper()
	side, err := chunking.NewSidecar(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- side.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := side.Close(ctx); err != nil {
			t.Errorf("sidecar Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("sidecar Serve: %v", err)
		}
	})
	return side, lis.Addr().String()
}

// TestSidecarTLSAndToken: a runtime completes to a sidecar that serves
// TLS and wants a token, given the CA and the token; with another token,
// no token, or no TLS, New fails at once naming the sidecar.
func TestSidecarTLSAndToken(t *testing.T) {
	const token = "tok-3f9a"
	cert, pool := selfSigned(t)
	side, addr := serveSidecar(t, chunking.SidecarConfig{Token: token,
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))}})
	tlsCreds := credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})

	cfg := testConfig(t, testSettings(t), nil)
	cfg.Sidecar.Server, cfg.Sidecar.Addr, cfg.Sidecar.Credentials, cfg.Sidecar.Token = side, addr, tlsCreds, token
	r := startRuntime(t, cfg)
	const n = 4
	submitUnits(t, r, 0, n-1, orchestratedUnit)
	if sum := r.Summary(); sum.OK != n {
		t.Fatalf("ok %d of %d over TLS with the token: %v", sum.OK, sum.Submitted, sum.Examples)
	}

	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		token string
		want  []string
	}{
		{"wrong token", tlsCreds, "tok-0000", []string{addr, "refused this client's token", "Unauthenticated"}},
		{"no token", tlsCreds, "", []string{addr, "refused this client's token", "no authorization metadata"}},
		{"untrusted certificate", credentials.NewTLS(&tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}), token,
			[]string{addr, "not reachable within 500ms", "certificate"}},
		{"plaintext", nil, token, []string{addr, "not reachable within 500ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, testSettings(t), nil)
			cfg.Sidecar.Addr, cfg.Sidecar.Credentials, cfg.Sidecar.Token = addr, tc.creds, tc.token
			cfg.Sidecar.ConnectTimeout = 500 * time.Millisecond
			r, err := New(context.Background(), cfg)
			if err == nil {
				_ = r.Close(context.Background())
				t.Fatalf("New: got no error, want one with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestSidecarUnreachable: New fails, naming the address and the bound,
// when nothing listens at SidecarAddr; it does not leave every unit to
// find out.
func TestSidecarUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	cfg := testConfig(t, testSettings(t), nil)
	cfg.Sidecar.Addr, cfg.Sidecar.ConnectTimeout = addr, 300*time.Millisecond
	r, err := New(context.Background(), cfg)
	if err == nil {
		_ = r.Close(context.Background())
		t.Fatal("New with nothing at SidecarAddr: got no error")
	}
	for _, w := range []string{"sidecar " + addr + " not reachable within 300ms", "Config.Sidecar.ConnectTimeout"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("New: error %q lacks %q", err, w)
		}
	}
}

func TestSidecarConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"token in clear off loopback", func(c *Config) { c.Sidecar.Addr, c.Sidecar.Token = "192.0.2.1:4001", "t" },
			"Config.Sidecar.Token would travel in clear to an address that is not loopback"},
		{"token without address", func(c *Config) { c.Sidecar.Token = "t" }, "without Config.Sidecar.Addr"},
		{"negative timeout", func(c *Config) { c.Sidecar.Addr, c.Sidecar.ConnectTimeout = "127.0.0.1:1", -time.Second },
			"Config.Sidecar.ConnectTimeout is -1s, want ≥ 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, testSettings(t), nil)
			tc.edit(&cfg)
			r, err := New(context.Background(), cfg)
			if err == nil {
				_ = r.Close(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:4001": true, "127.1.2.3:1": true, "[::1]:4001": true, "localhost:4001": true, "LocalHost:1": true,
		"0.0.0.0:4001": false, "[::]:4001": false, ":4001": false, "192.0.2.1:4001": false, "sidecar.example:4001": false,
		"127.0.0.1": false,
	} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
