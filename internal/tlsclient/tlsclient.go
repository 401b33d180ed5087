// Package tlsclient turns a client's TLS settings (the CA that signs the
// server's certificate, and a certificate with its key for servers that
// verify their clients) into a crypto/tls configuration and the NATS
// options that use it. Both services and the streams bootstrap read their
// NATS TLS settings through it; Postgres takes its TLS settings in the
// connection URL (sslmode=verify-full&sslrootcert=…), which pgx reads
// itself.
//
// The files are read once, when the client starts: rotating them takes a
// restart (docs/OPERATIONS.md, "TLS").
package tlsclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// Files are a client's TLS settings, PEM files read by [Files.Config]. Its
// env tags are read under a prefix, e.g. `envPrefix:"ORDERS_NATS_"` gives
// ORDERS_NATS_CA_FILE, ORDERS_NATS_CERT_FILE and ORDERS_NATS_KEY_FILE.
// The zero value is plaintext.
type Files struct {
	// CAFile holds the certificates that sign the server's (CA_FILE);
	// default: the system's roots.
	CAFile string `env:"CA_FILE"`
	// CertFile is the client's certificate chain, presented to a server
	// that verifies its clients (CERT_FILE); set with KeyFile.
	CertFile string `env:"CERT_FILE"`
	// KeyFile is CertFile's private key (KEY_FILE).
	KeyFile string `env:"KEY_FILE"`
}

// Enabled reports whether any file is set: the client then requires TLS.
func (f Files) Enabled() bool { return f != Files{} }

// Config reads the files and returns the client configuration, or nil
// when none is set. prefix is the settings' variable prefix (such as
// "ORDERS_NATS_"), for errors that name the variable at fault.
func (f Files) Config(prefix string) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, fmt.Errorf("%sCERT_FILE and %sKEY_FILE must be set together, got cert %q and key %q", prefix, prefix, f.CertFile, f.KeyFile)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%sCA_FILE: %w", prefix, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%sCA_FILE: %s holds no PEM certificate", prefix, f.CAFile)
		}
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%sCERT_FILE, %sKEY_FILE: %w", prefix, prefix, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// NATS returns the NATS options of f: none when no file is set, else
// nats.Secure with f's configuration, so that the connection fails rather
// than go plaintext. nats.go checks each server's certificate against the
// host name of its URL.
func (f Files) NATS(prefix string) ([]nats.Option, error) {
	c, err := f.Config(prefix)
	if err != nil || c == nil {
		return nil, err
	}
	return []nats.Option{nats.Secure(c)}, nil
}
