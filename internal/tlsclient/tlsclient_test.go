package tlsclient_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ordertimeout/ordertimeout/internal/testcerts"
	"github.com/ordertimeout/ordertimeout/internal/tlsclient"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certs, err := testcerts.Write(dir, "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	tests := []struct {
		name    string
		files   tlsclient.Files
		wantNil bool
		wantErr string // the variables the error names, space-separated
	}{
		{name: "none: plaintext", wantNil: true},
		{name: "CA only", files: tlsclient.Files{CAFile: certs.CA}},
		{name: "CA and client certificate", files: tlsclient.Files{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}},
		{name: "client certificate, system roots", files: tlsclient.Files{CertFile: certs.ClientCert, KeyFile: certs.ClientKey}},
		{name: "CA missing", files: tlsclient.Files{CAFile: missing}, wantErr: "X_CA_FILE"},
		{name: "CA not PEM", files: tlsclient.Files{CAFile: notPEM}, wantErr: "X_CA_FILE"},
		{name: "certificate without its key", files: tlsclient.Files{CAFile: certs.CA, CertFile: certs.ClientCert}, wantErr: "X_CERT_FILE X_KEY_FILE"},
		{name: "key without its certificate", files: tlsclient.Files{KeyFile: certs.ClientKey}, wantErr: "X_CERT_FILE X_KEY_FILE"},
		{name: "key of another certificate", files: tlsclient.Files{CertFile: certs.ClientCert, KeyFile: certs.ServerKey}, wantErr: "X_CERT_FILE X_KEY_FILE"},
		{name: "certificate missing", files: tlsclient.Files{CertFile: missing, KeyFile: certs.ClientKey}, wantErr: "X_CERT_FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := tt.files.Config("X_")
			if tt.wantErr != "" {
				for _, v := range strings.Fields(tt.wantErr) {
					if err == nil || !strings.Contains(err.Error(), v) {
						t.Fatalf("err = %v, want one naming %s", err, v)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (c == nil) != tt.wantNil {
				t.Fatalf("config = %v, want nil: %v", c, tt.wantNil)
			}
			opts, err := tt.files.NATS("X_")
			if err != nil || len(opts) != map[bool]int{true: 0, false: 1}[tt.wantNil] {
				t.Fatalf("NATS options = %d, %v", len(opts), err)
			}
		})
	}
}

// TestConfigHandshakes dials a TLS server that verifies its clients: the
// configuration with the CA and the client certificate gets through; one
// without the certificate, or without the CA, is refused.
func TestConfigHandshakes(t *testing.T) {
	t.Parallel()
	certs, err := testcerts.Write(t.TempDir(), "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(caPEM)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: clientCAs, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	tests := []struct {
		name   string
		files  tlsclient.Files
		wantOK bool
	}{
		{"CA and client certificate", tlsclient.Files{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, true},
		{"no client certificate", tlsclient.Files{CAFile: certs.CA}, false},
		{"no CA: the system's roots", tlsclient.Files{CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := tt.files.Config("X_")
			if err != nil {
				t.Fatal(err)
			}
			c.ServerName = "localhost"
			conn, err := tls.Dial("tcp", ln.Addr().String(), c)
			if err == nil {
				// TLS 1.3: a refused client certificate shows at the first read.
				buf := make([]byte, 2)
				_, err = conn.Read(buf)
				conn.Close()
			}
			if (err == nil) != tt.wantOK {
				t.Fatalf("handshake and read: %v, want success %v", err, tt.wantOK)
			}
		})
	}
}
