package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"

	"github.com/amdahl-rt/amdahl/chunking"
)

// maxPEMFileBytes bounds a certificate, key or CA file: a chain of a few
// certificates is a few KiB.
const maxPEMFileBytes = 1 << 20

// readBounded reads the file of --flag, refusing one over max bytes.
func readBounded(flag, path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, path, err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("--%s %s: over the bound of %d bytes", flag, path, max)
	}
	return b, nil
}

// readToken reads a bearer token from the file of --flag: at most
// chunking.MaxTokenBytes, white space around it trimmed, not empty, and
// visible ASCII inside.
func readToken(flag, path string) (string, error) {
	b, err := readBounded(flag, path, chunking.MaxTokenBytes)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--%s %s: the file is empty: want a token", flag, path)
	}
	if strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return "", fmt.Errorf("--%s %s: the token has white space, control or non-ASCII characters inside: want visible ASCII only", flag, path)
	}
	return tok, nil
}

// loopbackIP reports whether ip is a loopback address (nil, the
// unspecified address, is every address: not loopback).
func loopbackIP(ip net.IP) bool { return ip != nil && ip.IsLoopback() }

// serverSecurity are the flags of amdahl sidecar that secure it.
type serverSecurity struct {
	cert, key, tokenFile string
	insecure             bool
}

func (s *serverSecurity) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&s.cert, "tls-cert", "", "serve TLS with this certificate (PEM, chain after the leaf; with --tls-key)")
	fl.StringVar(&s.key, "tls-key", "", "the private key (PEM) of --tls-cert")
	fl.BoolVar(&s.insecure, "insecure", false, "allow plaintext on a --listen address that is not loopback (anyone who reaches it can use the sidecar)")
	fl.StringVar(&s.tokenFile, "token-file", "", "require every call to carry \"authorization: Bearer <token>\", the token read from this file (≤ 4 KiB, trimmed)")
}

// apply checks the flags against the --listen address ta and sets cfg's
// token and TLS credentials. Every error is bad usage.
func (s *serverSecurity) apply(listen string, ta *net.TCPAddr, cfg *chunking.SidecarConfig) error {
	if (s.cert == "") != (s.key == "") {
		return errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	tlsOn := s.cert != ""
	if tlsOn && s.insecure {
		return errors.New("--insecure with --tls-cert: the sidecar serves TLS; drop --insecure")
	}
	if !tlsOn && !s.insecure && !loopbackIP(ta.IP) {
		return fmt.Errorf("--listen %s is not a loopback address: serving there needs TLS (--tls-cert FILE --tls-key FILE) or an explicit --insecure", listen)
	}
	if s.tokenFile != "" {
		tok, err := readToken("token-file", s.tokenFile)
		if err != nil {
			return err
		}
		cfg.Token = tok
	}
	if tlsOn {
		certPEM, err := readBounded("tls-cert", s.cert, maxPEMFileBytes)
		if err != nil {
			return err
		}
		keyPEM, err := readBounded("tls-key", s.key, maxPEMFileBytes)
		if err != nil {
			return err
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", s.cert, s.key, err)
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	return nil
}

// clientSecurity are the flags of amdahl run that secure --sidecar.
type clientSecurity struct {
	tls       bool
	ca        string
	tokenFile string
}

func (c *clientSecurity) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&c.tls, "sidecar-tls", false, "dial --sidecar with TLS, verifying its certificate against the system roots (or --sidecar-ca)")
	fl.StringVar(&c.ca, "sidecar-ca", "", "dial --sidecar with TLS, verifying its certificate against the CA certificates (PEM) in this file")
	fl.StringVar(&c.tokenFile, "sidecar-token-file", "", "send \"authorization: Bearer <token>\" to --sidecar, the token read from this file (≤ 4 KiB, trimmed); over plaintext only to a loopback address")
}

// apply sets cfg's sidecar credentials and token from the flags for the
// sidecar at addr ("" when there is none). Every error is bad usage.
func (c *clientSecurity) apply(addr string, creds *credentials.TransportCredentials, token *string) error {
	if addr == "" {
		for _, f := range []struct {
			name string
			set  bool
		}{{"sidecar-tls", c.tls}, {"sidecar-ca", c.ca != ""}, {"sidecar-token-file", c.tokenFile != ""}} {
			if f.set {
				return fmt.Errorf("--%s without --sidecar: it secures an external sidecar", f.name)
			}
		}
		return nil
	}
	tlsOn := c.tls || c.ca != ""
	if tlsOn {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12} // nil RootCAs: the system roots
		if c.ca != "" {
			pem, err := readBounded("sidecar-ca", c.ca, maxPEMFileBytes)
			if err != nil {
				return err
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--sidecar-ca %s: no PEM certificate in it", c.ca)
			}
		}
		*creds = credentials.NewTLS(cfg)
	}
	if c.tokenFile != "" {
		tok, err := readToken("sidecar-token-file", c.tokenFile)
		if err != nil {
			return err
		}
		if !tlsOn {
			host, _, _ := net.SplitHostPort(addr)
			if !strings.EqualFold(host, "localhost") && !loopbackIP(net.ParseIP(host)) {
				return fmt.Errorf("--sidecar-token-file over plaintext to %s, not a loopback address: the token would travel in clear; add --sidecar-tls or --sidecar-ca FILE", addr)
			}
		}
		*token = tok
	}
	return nil
}
