package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// command is what a runc command line asks for, as far as boundedrunc
// cares: the spec file runc will read, and whether it holds a whole
// container spec (config.json) or only a process (exec --process).
type command struct {
	name        string
	specFile    string
	processOnly bool
}

// globalValueFlags are runc's global flags that take a value, which must be
// skipped to find the command.
var globalValueFlags = map[string]bool{"log": true, "log-format": true, "root": true, "criu": true, "rootless": true}

// commandValueFlags are, per command that reads a spec, the flags that
// take a value; the first one listed names the spec.
var commandValueFlags = map[string][]string{
	"create": {"bundle", "b", "console-socket", "pid-file", "preserve-fds"},
	"run":    {"bundle", "b", "console-socket", "pid-file", "preserve-fds"},
	"exec": {"process", "p", "console-socket", "cwd", "env", "e", "user", "u", "additional-gids", "g",
		"pid-file", "process-label", "apparmor", "cap", "c", "preserve-fds", "cgroup"},
}

// parseCommand reads a runc command line. A create or run without
// --bundle uses the working directory, as runc does; an exec without
// --process takes its process from the container, which was bounded when
// it was created.
func parseCommand(args []string) (command, error) {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		name, _, inline := splitFlag(args[i])
		i++
		if globalValueFlags[name] && !inline {
			i++
		}
	}
	if i >= len(args) {
		return command{}, nil
	}
	cmd := command{name: args[i]}
	valueFlags, ok := commandValueFlags[cmd.name]
	if !ok {
		return cmd, nil
	}
	spec, found, err := flagValue(args[i+1:], valueFlags)
	if err != nil {
		return cmd, fmt.Errorf("runc %s: %w", cmd.name, err)
	}
	switch cmd.name {
	case "exec":
		cmd.specFile, cmd.processOnly = spec, found
	default:
		bundle := spec
		if !found {
			if bundle, err = os.Getwd(); err != nil {
				return cmd, err
			}
		}
		cmd.specFile = filepath.Join(bundle, "config.json")
	}
	return cmd, nil
}

// flagValue returns the value of the flag named by the first two entries
// of valueFlags (long and short name), skipping the values of the others.
func flagValue(args, valueFlags []string) (string, bool, error) {
	for i := 0; i < len(args); i++ {
		if args[i] == "--" || !strings.HasPrefix(args[i], "-") {
			return "", false, nil
		}
		name, value, inline := splitFlag(args[i])
		isValueFlag := false
		for _, f := range valueFlags {
			isValueFlag = isValueFlag || f == name
		}
		if !isValueFlag {
			continue
		}
		if !inline {
			if i+1 >= len(args) {
				return "", false, fmt.Errorf("flag %s has no value", args[i])
			}
			i++
			value = args[i]
		}
		if name == valueFlags[0] || name == valueFlags[1] {
			return value, true, nil
		}
	}
	return "", false, nil
}

// splitFlag splits -name, --name and --name=value.
func splitFlag(arg string) (name, value string, inline bool) {
	name = strings.TrimLeft(arg, "-")
	name, value, inline = strings.Cut(name, "=")
	return name, value, inline
}
