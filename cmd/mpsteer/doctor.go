package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"mpsteer/internal/kernelfeat"
)

func init() { extraCommands = append(extraCommands, doctorCmd) }

func doctorCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor [--json]",
		Short: "Say which of mpsteer's kernel features this host's kernel offers",
		Long: `doctor probes the running kernel once for each feature mpsteer uses (it
loads small BPF programs, attaches them in a throwaway network namespace,
reads the sysctl names and asks the path manager's netlink family for its
commands) and prints, per feature, whether it works, why not, the Linux
version that introduced it, and the fallback mpsteer uses instead where
there is one. Run it as root: most probes need CAP_NET_ADMIN and CAP_BPF.
Where switching applications to MPTCP (mptcpize) is impossible it names
the other ways (systemd's SocketProtocol=mptcp, GODEBUG=multipathtcp=1, an
LD_PRELOAD wrapper). docs/kernels.md has the same table for the kernels
mpsteer is tested on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r := kernelfeat.Probe()
			if asJSON {
				return printJSON(r)
			}
			fmt.Print(r.Table())
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"kernel\", \"features\": [{\"name\", \"available\", \"reason\", \"since\", ...}]}")
	return c
}
