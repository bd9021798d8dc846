package main

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

func TestMetricsTLS(t *testing.T) {
	t.Run("without files, a self-signed certificate for the listen address", func(t *testing.T) {
		cfg, err := metricsTLS(&options{}, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		leaf := leafOf(t, &cfg.Certificates[0])
		if len(leaf.IPAddresses) == 0 || !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) || cfg.MinVersion != tls.VersionTLS12 {
			t.Fatalf("certificate for %v %v, TLS from %#x", leaf.IPAddresses, leaf.DNSNames, cfg.MinVersion)
		}
	})
	t.Run("the files' certificate, read again when they change, the last good one kept", func(t *testing.T) {
		dir := t.TempDir()
		o := &options{metricsCertFile: filepath.Join(dir, "tls.crt"), metricsKeyFile: filepath.Join(dir, "tls.key")}
		write := func(host string, at time.Time) {
			certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for path, data := range map[string][]byte{o.metricsCertFile: certPEM, o.metricsKeyFile: keyPEM} {
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(path, at, at); err != nil {
					t.Fatal(err)
				}
			}
		}
		served := func(cfg *tls.Config) string {
			cert, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
			if err != nil {
				t.Fatal(err)
			}
			return leafOf(t, cert).DNSNames[0]
		}
		start := time.Now().Add(-time.Hour)
		write("first.example", start)
		cfg, err := metricsTLS(o, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := served(cfg); got != "first.example" {
			t.Fatalf("serves %q, want first.example", got)
		}
		write("renewed.example", start.Add(time.Minute))
		if got := served(cfg); got != "renewed.example" {
			t.Fatalf("after the renewal serves %q, want renewed.example", got)
		}
		if err := os.WriteFile(o.metricsKeyFile, []byte("half written"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := served(cfg); got != "renewed.example" {
			t.Fatalf("with a broken key serves %q, want the last good renewed.example", got)
		}
	})
}

func leafOf(t *testing.T, cert *tls.Certificate) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}
