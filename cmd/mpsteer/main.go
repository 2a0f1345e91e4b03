// Command mpsteer steers Linux MPTCP with policies, and measures what they do
// in a lab of network namespaces.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "mpsteer:", err)
		os.Exit(1)
	}
}

// newRootCmd builds the whole command tree afresh (tests run it in-process).
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "mpsteer",
		Short:         "Steer Linux Multipath TCP with policies, and measure them in a lab",
		Long:          rootLong, // version.go
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(labCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	return root
}

// extraCommands are registered by the files that implement them.
var extraCommands []func() *cobra.Command
