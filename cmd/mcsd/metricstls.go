package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// metricsTLS is the TLS configuration of the secure /metrics: the
// certificate and key of --metrics-tls-cert-file and
// --metrics-tls-private-key-file, read again when either file changes (a
// Secret's projection renewed by cert-manager), or else a self-signed one
// made at start, as kube-scheduler makes one without --tls-cert-file.
// Scrapers of a self-signed certificate skip its verification: it is the
// bearer token, reviewed by the API server, that guards the metrics.
func metricsTLS(o *options, host string) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Scrapes need nothing of HTTP/2, and HTTP/1.1 alone keeps its
		// stream-level attacks (CVE-2023-44487) off an open port.
		NextProtos: []string{"http/1.1"},
	}
	if o.metricsCertFile == "" {
		cert, err := selfSignedCert(host)
		if err != nil {
			return nil, fmt.Errorf("--metrics-tls-cert-file not given, and no self-signed certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, nil
	}
	kp := &keyPairFiles{certFile: o.metricsCertFile, keyFile: o.metricsKeyFile}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() }
	return cfg, nil
}

// selfSignedCert is a serving certificate for host (and, when host is an
// address, that address), signed by a CA made for it alone.
func selfSignedCert(host string) (tls.Certificate, error) {
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = append(ips, ip)
	}
	if host == "" || net.ParseIP(host) != nil {
		if name, err := os.Hostname(); err == nil {
			host = name
		} else {
			host = "localhost"
		}
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, ips, nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// keyPairFiles is a certificate and key read from files, read again when
// either file's modification time changes.
type keyPairFiles struct {
	certFile, keyFile string

	mu                sync.Mutex
	certTime, keyTime time.Time
	cert              *tls.Certificate
}

// get is the key pair; a pair that no longer loads keeps the last good one
// serving, so that a renewal caught between its two files' writes does not
// break the handshakes.
func (k *keyPairFiles) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	certInfo, certErr := os.Stat(k.certFile)
	keyInfo, keyErr := os.Stat(k.keyFile)
	if k.cert != nil && (certErr != nil || keyErr != nil ||
		(certInfo.ModTime().Equal(k.certTime) && keyInfo.ModTime().Equal(k.keyTime))) {
		return k.cert, nil
	}
	if certErr != nil {
		return nil, fmt.Errorf("--metrics-tls-cert-file: %w", certErr)
	}
	if keyErr != nil {
		return nil, fmt.Errorf("--metrics-tls-private-key-file: %w", keyErr)
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("--metrics-tls-cert-file, --metrics-tls-private-key-file: %w", err)
	}
	k.cert, k.certTime, k.keyTime = &cert, certInfo.ModTime(), keyInfo.ModTime()
	return k.cert, nil
}
