package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"mpsteer/internal/api"
)

func init() { extraCommands = append(extraCommands, monitorCmd) }

func monitorCmd() *cobra.Command {
	var socket string
	var asJSON bool
	c := &cobra.Command{
		Use:   "monitor [--json]",
		Short: "Stream path-manager events and the daemon's decisions and actions as they happen",
		Long: `Stream, like ip mptcp monitor, what the daemon of this network namespace
sees and does: the kernel's path-manager events (connections and subflows
created, established, closed; addresses announced and removed; priority
changes), the actions the daemon takes and their outcome (applied, refused,
unsupported), the policies' verdicts on subflows when they change, and
config reloads. One line per event; with --json one JSON object per line
(type: hello, pm, action, decision, reload, dropped), for jq:

  mpsteer monitor --json | jq -c 'select(.type == "action")'

It runs until interrupted, and ends when the daemon stops.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			enc := json.NewEncoder(os.Stdout)
			err := api.NewClient(socket).Monitor(ctx, func(ev api.MonitorEvent) error {
				if asJSON {
					return enc.Encode(ev)
				}
				_, err := fmt.Println(ev.String())
				return err
			})
			switch {
			case errors.Is(err, context.Canceled):
				return nil // interrupted: the normal end
			case errors.Is(err, io.EOF):
				if !asJSON {
					fmt.Println("the daemon stopped")
				}
				return nil
			}
			return err
		},
	}
	socketFlag(c, &socket)
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	return c
}
