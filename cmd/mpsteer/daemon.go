package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"mpsteer/internal/api"
	"mpsteer/internal/config"
	"mpsteer/internal/daemon"
	"mpsteer/internal/yamlcfg"
)

func init() {
	extraCommands = append(extraCommands, daemonCmd, statusCmd, preferCmd, policyCmd)
}

// socketHelp: the default socket depends on the network namespace the
// command runs in (one daemon per namespace).
const socketHelp = "the daemon's unix socket (default: " + api.SocketDir + "/mpsteer.sock in the host's network namespace, " + api.SocketDir + "/netns-INODE.sock in any other)"

func socketFlag(c *cobra.Command, p *string) {
	c.Flags().StringVar(p, "socket", "", socketHelp)
}

func daemonCmd() *cobra.Command {
	var config, socket string
	var extra daemonFlags // daemonflags.go
	c := &cobra.Command{
		Use:   "daemon --config FILE [--socket PATH] [--metrics ADDR]",
		Short: "Run the policy daemon in the foreground (one per network namespace)",
		Long:  daemonLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Root, or any user with the capabilities it needs (it names
			// those missing).
			if err := daemon.CheckCapabilities(); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			return daemon.Run(ctx, extra.options(daemon.Options{ConfigFile: config, Socket: socket}))
		},
	}
	c.Flags().StringVar(&config, "config", "", "YAML config (policies: [] is valid)")
	c.MarkFlagRequired("config")
	socketFlag(c, &socket)
	extra.add(c)
	return c
}

func statusCmd() *cobra.Command {
	var socket string
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show connections, subflows, and what each policy decided and why",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := api.NewClient(socket).Status()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(st)
			}
			printStatus(st)
			return nil
		},
	}
	socketFlag(c, &socket)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func printStatus(st *api.Status) {
	fmt.Printf("daemon pid %d in netns %s, config %s, %s path manager, backup via %s, every %.0f ms\n",
		st.PID, st.NetNS, st.Config, st.PathManager, st.BackupVia, st.IntervalMs)
	if len(st.Hint) > 0 {
		fmt.Printf("user preference: %s\n", strings.Join(st.Hint, ", then "))
	}
	var names []string
	for _, p := range st.Policies {
		names = append(names, p.Name)
	}
	fmt.Printf("policies: %s\n", strings.Join(names, ", "))
	for _, p := range st.Policies {
		if p.Name == "spread" {
			printSpreadStatus(p)
		}
	}
	if m := st.Mptcpize; m != nil {
		var cgs []string
		for _, c := range m.Cgroups {
			if c.Present {
				cgs = append(cgs, c.Path)
			} else {
				cgs = append(cgs, c.Path+" (not there now)")
			}
		}
		fmt.Printf("applications switched to MPTCP in: %s (%d of %d stream sockets)\n", strings.Join(cgs, ", "), m.Program["switched"], m.Program["streams"])
		if m.Error != "" {
			fmt.Printf("  mptcpize: %s\n", m.Error)
		}
	}
	if len(st.Connections) == 0 {
		fmt.Println("no MPTCP connections")
	}
	for _, c := range st.Connections {
		side := "client side"
		if c.ServerSide {
			side = "server side"
		}
		fmt.Printf("connection %s  %s → %s  (%s)\n", c.Token, c.Local, c.Remote, side)
		if c.Cgroup != "" {
			fmt.Printf("  cgroup %s\n", c.Cgroup)
		}
		if len(c.RemoteAddrs) > 0 {
			fmt.Printf("  peer announced: %s\n", strings.Join(c.RemoteAddrs, ", "))
		}
		for _, s := range c.Steering {
			fmt.Printf("  %s\n", s)
		}
		for _, s := range c.Subflows {
			flags := ""
			if s.State != "established" {
				flags += " " + s.State
			}
			if s.BackupLocal {
				flags += " backup(local)"
			}
			if s.BackupRemote {
				flags += " backup(peer)"
			}
			fmt.Printf("  %s → %s  id %d/%d  srtt %.1f ms  cwnd %d pkts  delivery %.1f Mbit/s  acked %d B%s\n",
				s.Local, s.Remote, s.LocalID, s.RemoteID, s.SRTTMs, s.Cwnd, s.DeliveryMbit, s.BytesAcked, flags)
			if s.Decision != nil {
				verdict := "active"
				if s.Decision.Backup {
					verdict = "backup"
				}
				fmt.Printf("      %s: %s — %s\n", s.Decision.Policy, verdict, s.Decision.Reason)
			}
			if s.Cap != nil {
				fmt.Printf("      %s: capped at %s — %s\n", s.Cap.Policy, s.Cap.Rate, s.Cap.Reason)
			}
			printSubflowHealth(s.Health)
		}
		if n := len(c.Actions); n > 0 {
			fmt.Println("  subflows and addresses the policies changed:")
			for _, a := range c.Actions[max(0, n-8):] {
				fmt.Printf("    %s %s\n", a.At.Format("15:04:05.000"), a)
			}
		}
	}
	printHealthStatus(st.Health)
	if st.Reaction.Count > 0 {
		fmt.Printf("reaction to new subflows: %d, median %.0f µs, p99 %.0f µs\n", st.Reaction.Count, st.Reaction.MedianUs, st.Reaction.P99Us)
	}
	if n := len(st.Actions); n > 0 {
		fmt.Println("recent actions:")
		for _, a := range st.Actions[max(0, n-5):] {
			fmt.Printf("  %s %s\n", a.At.Format("15:04:05.000"), a)
		}
	}
}

func preferCmd() *cobra.Command {
	var socket string
	var clear, asJSON bool
	c := &cobra.Command{
		Use:   "prefer IFACE|ADDR... | --clear",
		Short: "Set the user's path preference at run time (turns the prefer policy on)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if clear == (len(args) > 0) {
				return errors.New("name the interfaces or addresses to prefer, in order, or use --clear")
			}
			r, err := api.NewClient(socket).Prefer(api.PreferRequest{Targets: args, Clear: clear})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(r)
			}
			fmt.Println(r.Message)
			return nil
		},
	}
	socketFlag(c, &socket)
	c.Flags().BoolVar(&clear, "clear", false, "take the preference back")
	c.Flags().BoolVar(&asJSON, "json", false, "print the daemon's answer as JSON")
	return c
}

func policyCmd() *cobra.Command {
	c := &cobra.Command{Use: "policy", Short: "Manage the daemon's policies"}
	var socket string
	var applyJSON bool
	apply := &cobra.Command{
		Use:   "apply FILE",
		Short: "Replace the daemon's policies with those of FILE, without touching live connections",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The daemon records the file (status shows it, SIGHUP reloads
			// it): an absolute path names the same file from any directory.
			file, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			data, err := yamlcfg.ReadFile(file)
			if err != nil {
				return err
			}
			// Checked here first, so that errors name the file on this side.
			if _, err := config.Parse(args[0], data, daemon.Env()); err != nil {
				return err
			}
			r, err := api.NewClient(socket).Apply(api.ApplyRequest{File: file, Config: string(data)})
			if err != nil {
				return err
			}
			if applyJSON {
				return printJSON(r)
			}
			fmt.Println(r.Message)
			return nil
		},
	}
	socketFlag(apply, &socket)
	apply.Flags().BoolVar(&applyJSON, "json", false, "print the daemon's answer as JSON")
	c.AddCommand(apply)
	return c
}
