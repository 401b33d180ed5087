// Package testcerts makes the certificates of a TLS test when it runs, so
// that none is committed and none expires in the repository: a CA, a
// server certificate for the host names the test dials (also usable as a
// client certificate, as a NATS route presents it), and a client
// certificate, written as PEM files (ECDSA P-256 keys, PKCS #8).
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files Write made, by absolute path.
type Files struct {
	// CA is the certificate of the CA that signs the two others.
	CA string
	// ServerCert and ServerKey are the server's certificate and key.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are the client's certificate and key.
	ClientCert, ClientKey string
}

// File names in the directory of Write.
const (
	CAName         = "ca.crt"
	ServerCertName = "server.crt"
	ServerKeyName  = "server.key"
	ClientCertName = "client.crt"
	ClientKeyName  = "client.key"
)

// Write makes a CA, a server certificate valid for hosts (host names or IP
// addresses) and a client certificate, valid for a day from an hour ago,
// and writes them into dir under the names above (keys 0600).
func Write(dir string, hosts ...string) (Files, error) {
	f := Files{CA: filepath.Join(dir, CAName), ServerCert: filepath.Join(dir, ServerCertName), ServerKey: filepath.Join(dir, ServerKeyName),
		ClientCert: filepath.Join(dir, ClientCertName), ClientKey: filepath.Join(dir, ClientKeyName)}
	now := time.Now()
	template := func(cn string, serial int64) *x509.Certificate {
		return &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	}
	ca := template("ordertimeout test CA", 1)
	ca.IsCA, ca.BasicConstraintsValid, ca.KeyUsage = true, true, x509.KeyUsageCertSign|x509.KeyUsageCRLSign
	caKey, err := issue(ca, nil, nil, f.CA, "")
	if err != nil {
		return f, err
	}
	server := template(hosts[0], 2)
	server.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else {
			server.DNSNames = append(server.DNSNames, h)
		}
	}
	if _, err := issue(server, ca, caKey, f.ServerCert, f.ServerKey); err != nil {
		return f, err
	}
	client := template("ordertimeout test client", 3)
	client.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	_, err = issue(client, ca, caKey, f.ClientCert, f.ClientKey)
	return f, err
}

// issue makes a key and the certificate of tmpl signed by parent's key
// (self-signed without a parent), writes the certificate to certPath and,
// when keyPath is set, the key, and returns the key.
func issue(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, certPath, keyPath string) (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: %w", tmpl.Subject.CommonName, err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	if keyPath == "" {
		return key, nil
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("key of %s: %w", tmpl.Subject.CommonName, err)
	}
	return key, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600)
}
