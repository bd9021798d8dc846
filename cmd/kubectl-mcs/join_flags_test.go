package main

import (
	"context"
	"strings"
	"testing"
)

// Flags that cannot work together are refused before join reads or writes
// anything, naming the flag.
func TestJoinRefusesFlagsThatDoNotFit(t *testing.T) {
	mcs := cli{t: t, kubeconfig: "/nonexistent/kubeconfig"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"an unknown restart policy":      {[]string{"--restart-coredns=sometimes"}, "--restart-coredns"},
		"no timeout":                     {[]string{"--timeout=0s"}, "--timeout"},
		"an image without installing":    {[]string{"--install=false", "--image=registry.example/mcsd:v1"}, "--install"},
		"values without installing":      {[]string{"--install=false", "--set=logVerbosity=4"}, "--install"},
		"a --set that does not parse":    {[]string{"--set=logVerbosity"}, "--set"},
		"a --values file that is absent": {[]string{"--values=/nonexistent/values.yaml"}, "--values"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := mcs.run(context.Background(), append([]string{"join", "--broker-context", "broker"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("join %v: %v, want an error naming %s", tc.args, err, tc.want)
			}
		})
	}
}
