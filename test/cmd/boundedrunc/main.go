// Command boundedrunc is an OCI runtime for Docker on machines whose
// capability bounding set lacks capabilities a privileged container asks
// for (some CI sandboxes drop CAP_SYS_RESOURCE). runc refuses such a spec
// ("unable to apply caps: operation not permitted"), so privileged
// containers, kind's nodes among them, cannot start at all. boundedrunc
// removes from the spec every capability this process's bounding set lacks,
// then executes runc with the same arguments: for create and run the spec is
// the bundle's config.json, for exec the --process file. Every other
// command goes to runc untouched. It is registered with dockerd as
// --add-runtime NAME=PATH --default-runtime NAME; RUNC names the runc to
// execute (default: runc on PATH).
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	if err := prepare(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "boundedrunc: %v\n", err)
		os.Exit(1)
	}
	runc := os.Getenv("RUNC")
	if runc == "" {
		runc = "runc"
	}
	path, err := exec.LookPath(runc)
	if err != nil {
		fmt.Fprintf(os.Stderr, "boundedrunc: %v\n", err)
		os.Exit(1)
	}
	argv := append([]string{path}, os.Args[1:]...)
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "boundedrunc: executing %s: %v\n", path, err)
		os.Exit(1)
	}
}

// prepare bounds the capabilities of the spec that the runc command line
// args would read, if it reads one.
func prepare(args []string) error {
	cmd, err := parseCommand(args)
	if err != nil || cmd.specFile == "" {
		return err
	}
	bounding, err := boundingSet()
	if err != nil {
		return err
	}
	return boundSpecFile(cmd.specFile, cmd.processOnly, bounding)
}
