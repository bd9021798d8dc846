// Command echo is the harness pods' echo server as a program, for pods on
// real kubelets (the image test/lib/images.Echo): on each of the pod's
// addresses and ports it answers every TCP connection and UDP datagram with
// "<pod-ip> <cluster> <pod-name>\n", as test/lib/echo does inside a simulated
// pod. It reads its identity from flags or, as a pod spec sets them through
// the downward API, the environment: POD_IPS (status.podIPs), POD_NAME
// (metadata.name), CLUSTER and ECHO_PORTS (default 8080).
package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/mcsd-io/mcsd/test/lib/echo"
)

func main() {
	ips := flag.String("ips", os.Getenv("POD_IPS"), "the pod's addresses, comma-separated, each answered on with itself as the identity (env POD_IPS)")
	ports := flag.String("ports", envOr("ECHO_PORTS", "8080"), "ports to answer on, TCP and UDP, comma-separated (env ECHO_PORTS)")
	cluster := flag.String("cluster", os.Getenv("CLUSTER"), "the cluster's name in the reply (env CLUSTER)")
	pod := flag.String("pod", os.Getenv("POD_NAME"), "the pod's name in the reply (env POD_NAME)")
	flag.Parse()

	addrs, err := parseList("-ips", *ips, func(s string) (netip.Addr, error) { return netip.ParseAddr(s) })
	if err != nil {
		fail(err)
	}
	portList, err := parseList("-ports", *ports, func(s string) (uint16, error) {
		p, err := strconv.ParseUint(s, 10, 16)
		if err == nil && p == 0 {
			err = fmt.Errorf("port 0")
		}
		return uint16(p), err
	})
	if err != nil {
		fail(err)
	}
	if *cluster == "" || *pod == "" {
		fail(fmt.Errorf("-cluster and -pod (or CLUSTER and POD_NAME) are required: they are the reply"))
	}

	var servers []*echo.Server
	for _, ip := range addrs {
		id := echo.Identity{IP: ip.String(), Cluster: *cluster, Pod: *pod}
		for _, port := range portList {
			addr := netip.AddrPortFrom(ip, port).String()
			tcp, err := net.Listen("tcp", addr)
			if err != nil {
				fail(err)
			}
			udp, err := net.ListenPacket("udp", addr)
			if err != nil {
				fail(err)
			}
			servers = append(servers, echo.Serve(id, tcp, udp))
			fmt.Printf("echo: answering %q on %s (tcp, udp)\n", id.String(), addr)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	for _, s := range servers {
		s.Close()
	}
}

// parseList parses a comma-separated, non-empty flag value.
func parseList[T any](flagName, value string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(value, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, fmt.Errorf("flag %s: %q: %w", flagName, f, err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("flag %s is empty", flagName)
	}
	return out, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "echo:", err)
	os.Exit(2)
}
