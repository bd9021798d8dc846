// Command kubectl-mcs is the operator's tool for an mcsd clusterset, as a
// kubectl plugin (kubectl mcs ...) or on its own: install the broker, join
// and remove member clusters, show the clusterset's and a service's state,
// diagnose a member, and gather what a bug report needs.
package main

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func main() {
	err := newRoot(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}).Execute()
	if err == nil {
		return
	}
	var exit exitError
	if errors.As(err, &exit) {
		os.Exit(exit.code)
	}
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}

// exitError ends the command with an exit code and nothing more to say:
// what went wrong was printed already.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
