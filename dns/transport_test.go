package dns

import (
	"net"
	"testing"
)

// loopback is a transport the serving tests run over: the server listens on
// its address, over UDP and TCP, and the client asks there.
type loopback struct {
	name string // the subtest's name: the family
	host string
}

var loopbacks = []loopback{{name: "IPv4", host: "127.0.0.1"}, {name: "IPv6", host: "::1"}}

// eachLoopback runs test once per loopback, as subtests named for its
// family. A host without IPv6 loopback skips the IPv6 one.
func eachLoopback(t *testing.T, test func(t *testing.T, host string)) {
	t.Helper()
	for _, lo := range loopbacks {
		t.Run(lo.name, func(t *testing.T) {
			pc, err := net.ListenPacket("udp", net.JoinHostPort(lo.host, "0"))
			if err != nil {
				t.Skipf("no %s loopback: %v", lo.name, err)
			}
			_ = pc.Close()
			test(t, lo.host)
		})
	}
}
