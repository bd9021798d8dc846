//go:build tools

// Package coredns pins the CoreDNS release that make bench-dns compares
// mcsd's DNS server with. It is its own module so that CoreDNS and its
// dependencies never enter mcsd's go.mod.
package coredns

import _ "github.com/coredns/coredns"
