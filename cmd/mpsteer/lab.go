package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/yamlcfg"
)

func labCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "lab",
		Short: "Build multipath worlds in network namespaces and measure MPTCP in them",
	}
	c.AddCommand(labUpCmd(), labDownCmd(), labExecCmd(), labSetCmd(), labLsCmd(), labEmulateCmd())
	for _, add := range extraLabCommands {
		c.AddCommand(add())
	}
	return c
}

var extraLabCommands []func() *cobra.Command

// signalContext is cancelled by Ctrl-C or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func labUpCmd() *cobra.Command {
	var name, variant string
	var asJSON bool
	c := &cobra.Command{
		Use:   "up FILE",
		Short: "Build the world of a scenario and leave it running",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := scenario.Load(args[0])
			if err != nil {
				return err
			}
			v, err := pickVariant(s, variant)
			if err != nil {
				return err
			}
			if name == "" {
				name = defaultLabName(s.Name)
			}
			plan, err := world.NewPlan(name, s, v)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			w, err := world.Up(ctx, plan, world.Options{})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(w.Summary())
			}
			printWorld(w)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "lab name (default: derived from the scenario name)")
	c.Flags().StringVar(&variant, "variant", "", "variant whose world to build (default: the first mptcp variant)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the world as JSON")
	return c
}

func pickVariant(s *scenario.Scenario, name string) (*scenario.Variant, error) {
	if name != "" {
		v := s.Variant(name)
		if v == nil {
			var names []string
			for _, v := range s.Variants {
				names = append(names, v.Name)
			}
			return nil, fmt.Errorf("scenario %s has no variant %q (variants: %s)", s.Name, name, strings.Join(names, ", "))
		}
		return v, nil
	}
	for _, v := range s.Variants {
		if v.Kind == scenario.KindMPTCP {
			return v, nil
		}
	}
	return s.Variants[0], nil
}

// defaultLabName turns a scenario name into a valid lab name.
func defaultLabName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	n := strings.Trim(b.String(), "-")
	if len(n) > 24 {
		n = n[:24]
	}
	if n == "" {
		n = "lab"
	}
	return n
}

func printWorld(w *world.World) {
	fmt.Printf("lab %s is up (scenario %s, variant %s)\n", w.Name, w.Scenario, w.Variant)
	roles := make([]string, 0)
	for _, h := range w.Hosts {
		roles = append(roles, fmt.Sprintf("%s=%s", h.Role, h.NetNS))
	}
	fmt.Printf("  hosts: %s\n", strings.Join(roles, " "))
	for _, p := range w.Paths {
		fmt.Printf("  path %-8s client %s %-12s server %s %-12s up: %s %s, down: %s %s", p.Name,
			p.Client.Dev, p.Client.Addr, p.Server.Dev, p.Server.Addr, rateOf(p.Up), p.Up.Delay, rateOf(p.Down), p.Down.Delay)
		if p.Veth {
			fmt.Printf(" [veth]")
		}
		if p.EPFlags != "" {
			fmt.Printf(" [endpoint %s]", p.EPFlags)
		}
		if p.ServerEPFlags != "" {
			fmt.Printf(" [server endpoint %s]", p.ServerEPFlags)
		}
		fmt.Println()
	}
	if t := w.Tenants; t != nil {
		printTenants(w)
	} else if n := len(w.CoreLinks); n > 0 {
		fmt.Printf("  core: %d links, spread %s (%s … %s)\n", n, w.Spread, w.CoreLinks[0].Name, w.CoreLinks[n-1].Name)
	}
	fmt.Printf("  run a command in a host: mpsteer lab exec %s %s -- ss -tni\n", w.Name, w.ClientRole())
	fmt.Printf("  remove it: mpsteer lab down %s\n", w.Name)
}

// printTenants describes a tenants world: its links and VMs.
func printTenants(w *world.World) {
	t := w.Tenants
	for i, l := range t.Links {
		lp := w.Links[i]
		def := ""
		if i == 0 {
			def = " [default route]"
		}
		fmt.Printf("  link %-8s %s %s — %s %s  %s→%s: %s %s, back: %s %s%s\n", l.Name, t.Hypervisors[0], l.A, t.Hypervisors[1], l.B,
			t.Hypervisors[0], t.Hypervisors[1], lp.Up.Rate, lp.Up.Delay, lp.Down.Rate, lp.Down.Delay, def)
	}
	pairs := t.Pairs
	if len(pairs) == 0 {
		pairs = [][2]string{{t.Client, t.Server}}
	}
	for _, v := range t.VMs {
		role := ""
		for i, pr := range pairs {
			n := ""
			if len(pairs) > 1 {
				n = fmt.Sprintf(" %d", i+1)
			}
			switch v.Name {
			case pr[0]:
				role = fmt.Sprintf(" [measured client%s, %d subflows]", n, t.Subflows)
			case pr[1]:
				role = fmt.Sprintf(" [measured server%s]", n)
			}
		}
		fmt.Printf("  vm %-10s on %s (%s %s, gateway %s via %s)%s\n", v.Name, v.On, v.Dev, v.Addr, v.Gateway, v.HostDev, role)
	}
}

func rateOf(p world.PathParams) string {
	if p.Trace != "" {
		return "trace " + p.Trace
	}
	return p.Rate
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func labDownCmd() *cobra.Command {
	var all, asJSON bool
	c := &cobra.Command{
		Use:   "down NAME | --all",
		Short: "Remove a lab (namespaces, emulator, state), also after a crash",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := world.Preflight(); err != nil {
				return err
			}
			if all {
				if len(args) > 0 {
					return errors.New("give either a name or --all")
				}
				names, _ := world.List()
				if err := world.DownAll(); err != nil {
					return err
				}
				return printDown(asJSON, names)
			}
			if len(args) != 1 {
				return errors.New("name the lab to remove, or use --all")
			}
			if err := world.DownByName(args[0]); err != nil {
				return err
			}
			return printDown(asJSON, args)
		},
	}
	c.Flags().BoolVar(&all, "all", false, "remove every lab and every leftover mps-* namespace")
	c.Flags().BoolVar(&asJSON, "json", false, "print the labs removed as JSON")
	return c
}

func labLsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls",
		Short: "List the labs that are up",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			names, err := world.List()
			if err != nil {
				return err
			}
			out := []world.Summary{} // [] in JSON when no lab is up
			for _, n := range names {
				if w, err := world.Load(n); err == nil {
					out = append(out, w.Summary())
				}
			}
			if asJSON {
				return printJSON(out)
			}
			for _, s := range out {
				fmt.Printf("%-20s scenario %s, variant %s, %d paths\n", s.Name, s.Scenario, s.Variant, len(s.Paths))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the labs as JSON (a list, empty when none is up)")
	return c
}

func labExecCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "exec NAME HOST -- CMD...",
		Short: "Run a command inside a host of a lab",
		Args:  cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := world.Load(args[0])
			if err != nil {
				return err
			}
			c, err := w.Command(args[1], args[2:]...)
			if err != nil {
				return err
			}
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			if err := c.Run(); err != nil {
				var ee interface{ ExitCode() int }
				if errors.As(err, &ee) {
					os.Exit(ee.ExitCode())
				}
				return err
			}
			return nil
		},
	}
}

func labSetCmd() *cobra.Command {
	var dir string
	var asJSON bool
	c := &cobra.Command{
		Use:   "set NAME PATH|CORELINK key=value...|down|up|ifdown|ifup",
		Short: "Change a path or a core link while traffic flows (rate=, delay=, jitter=, loss=, queue=, trace=; up.rate= for one direction; down|up: a silent outage; ifdown|ifup: the client's interface loses its carrier and address)",
		Args:  cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The arguments are checked first: their mistakes show without
			// a lab, and nothing is changed when one of them is wrong.
			d := scenario.Dir(dir)
			if d != scenario.DirBoth && d != scenario.DirUp && d != scenario.DirDown {
				return fmt.Errorf("--dir %q is not valid (valid: both, up, down)", dir)
			}
			upDown := len(args) == 3 && (args[2] == "down" || args[2] == "up")
			ifUpDown := len(args) == 3 && (args[2] == "ifdown" || args[2] == "ifup")
			var reqs []world.Request
			if !upDown && !ifUpDown {
				var err error
				if reqs, err = parseSetArgs(args[2:], d); err != nil {
					return err
				}
			}
			w, err := world.Load(args[0])
			if err != nil {
				return err
			}
			link := args[1]
			if p := w.Path(args[1]); p != nil {
				if p.Link == "" {
					return fmt.Errorf("path %s is via core without link parameters: its access link is a plain veth with nothing to change (change its core links instead)", p.Name)
				}
				link = p.Link
			} else if w.CoreLink(link) == nil {
				var names []string
				for _, p := range w.Paths {
					names = append(names, p.Name)
				}
				msg := fmt.Sprintf("lab %s has no path %q (paths: %s)", w.Name, args[1], strings.Join(names, ", "))
				if len(w.CoreLinks) > 0 {
					var cl []string
					for _, l := range w.CoreLinks {
						cl = append(cl, l.Name)
					}
					msg = fmt.Sprintf("lab %s has no path or core link %q (paths: %s; core links: %s)", w.Name, args[1], strings.Join(names, ", "), strings.Join(cl, ", "))
				}
				return errors.New(msg)
			}
			if ifUpDown {
				if w.Path(args[1]) == nil {
					return fmt.Errorf("%s acts on the client's interface of a path; %s is a core link (valid for core links: down, up, key=value)", args[2], args[1])
				}
				if d != scenario.DirBoth {
					return fmt.Errorf("--dir %s: an interface goes down in both directions", dir)
				}
				detail, err := w.SetInterface(args[1], args[2] == "ifup")
				if err != nil {
					return err
				}
				if asJSON {
					resp, err := world.Control(w.Dir, world.Request{Op: "stats"})
					if err != nil {
						return err
					}
					return printJSON(labSetResult(args[1], link, args[2], resp))
				}
				fmt.Printf("%s: %s\n", args[1], detail)
				return nil
			}
			if upDown {
				resp, err := world.Control(w.Dir, world.Request{Op: args[2], Link: link, Dir: d})
				if err == nil && asJSON {
					return printJSON(labSetResult(args[1], link, args[2], resp))
				}
				return err
			}
			var last *world.Response
			for _, r := range reqs {
				r.Link = link
				resp, err := world.Control(w.Dir, r)
				if err != nil {
					return err
				}
				last = resp
				if asJSON {
					continue
				}
				st := resp.Links[link]
				fmt.Printf("%s: up %s; down %s\n", args[1], st.Up.Params, st.Down.Params)
			}
			if asJSON {
				return printJSON(labSetResult(args[1], link, "set", last))
			}
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "both", "direction: both, up (client→server) or down")
	c.Flags().BoolVar(&asJSON, "json", false, "print the link's state afterwards as JSON")
	return c
}

// parseSetArgs reads key=value words with the scenario file's own parser,
// so that units and errors are exactly those of a scenario.
func parseSetArgs(args []string, d scenario.Dir) ([]world.Request, error) {
	groups := map[scenario.Dir][]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q is not key=value (keys: %s; prefix up. or down. for one direction)", a, strings.Join(scenario.PatchKeys, ", "))
		}
		dir := d
		if rest, ok := strings.CutPrefix(k, "up."); ok {
			dir, k = scenario.DirUp, rest
		} else if rest, ok := strings.CutPrefix(k, "down."); ok {
			dir, k = scenario.DirDown, rest
		}
		if k == "outage" {
			return nil, errors.New("outage schedules are set in the scenario file; use `lab set NAME PATH down|up` by hand")
		}
		groups[dir] = append(groups[dir], fmt.Sprintf("%s: %q", k, v))
	}
	dirs := make([]string, 0, len(groups))
	for d := range groups {
		dirs = append(dirs, string(d))
	}
	sort.Strings(dirs)
	cwd, _ := os.Getwd()
	var reqs []world.Request
	for _, ds := range dirs {
		m, err := yamlcfg.Parse("command line", []byte(strings.Join(groups[scenario.Dir(ds)], "\n")))
		if err != nil {
			return nil, err
		}
		patch := scenario.ParsePatch(m, cwd)
		m.Done()
		if err := m.Err(); err != nil {
			return nil, err
		}
		reqs = append(reqs, world.Request{Op: "set", Dir: scenario.Dir(ds), Patch: &patch})
	}
	return reqs, nil
}

func labEmulateCmd() *cobra.Command {
	var state string
	c := &cobra.Command{
		Use:    "emulate --state DIR",
		Short:  "Run the link emulator of a lab (started by lab up)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			// fd 3 is the readiness pipe from `lab up`.
			ready := os.NewFile(3, "ready")
			return world.RunEmulator(ctx, state, ready)
		},
	}
	c.Flags().StringVar(&state, "state", "", "lab state directory")
	c.MarkFlagRequired("state")
	return c
}
