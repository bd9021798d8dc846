package netns_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

func TestTwoNamespacesTalkOverVethTCPAndUDP(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "sysctl")
	prefix := fmt.Sprintf("mcsdt%d-", os.Getpid())
	a, err := netns.New(prefix + "a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Delete() })
	b, err := netns.New(prefix + "b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Delete() })
	if err := netns.Veth(a, "eth0", b, "eth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.IP("addr", "add", "100.127.0.1/30", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.IP("addr", "add", "100.127.0.2/30", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}

	tcp, err := b.Listen("tcp", "100.127.0.2:8080")
	if err != nil {
		t.Fatal(err)
	}
	udp, err := b.ListenPacket("udp", "100.127.0.2:8080")
	if err != nil {
		t.Fatal(err)
	}
	srv := echo.Serve(echo.Identity{IP: "100.127.0.2", Cluster: "c1", Pod: "b"}, tcp, udp)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, network := range []string{"tcp", "udp"} {
		c, err := a.Dial(ctx, network, "100.127.0.2:8080")
		if err != nil {
			t.Fatalf("%s dial: %v", network, err)
		}
		ask := echo.AskTCP
		if network == "udp" {
			ask = echo.AskUDP
		}
		id, err := ask(ctx, c)
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		if id.Pod != "b" || id.IP != "100.127.0.2" {
			t.Fatalf("%s reached %v, want pod b", network, id)
		}
	}

	// The listener lives in b, not in the test's own namespace.
	if _, err := (&netns.NS{Name: prefix + "a"}).Dial(ctx, "tcp", "127.0.0.1:1"); err == nil {
		t.Fatal("dialing a closed loopback port inside a namespace unexpectedly succeeded")
	}
}
