package docblocks

import (
	"fmt"

	"github.com/spf13/cobra"
)

// CheckCommand parses args (a command's words after the program's name,
// as `mcs join --broker-context B` gives `join --broker-context B`)
// against root's command tree, as cobra would when run: an unknown
// subcommand or flag, a flag's value of the wrong type, or positional
// arguments the command refuses are an error. Nothing runs. root is
// consumed: build a new one per call.
func CheckCommand(root *cobra.Command, args []string) error {
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if !cmd.Runnable() {
		return fmt.Errorf("%s is not a command on its own: it wants a subcommand", cmd.CommandPath())
	}
	return cmd.ValidateRequiredFlags()
}
