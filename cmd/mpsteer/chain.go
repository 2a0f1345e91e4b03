package main

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
)

func init() { extraCommands = append(extraCommands, chainCmd) }

func chainCmd() *cobra.Command {
	var socket string
	c := &cobra.Command{
		Use:   "chain",
		Short: "eBPF selector–actor chains that rewrite MPTCP options in packets (through the daemon)",
		Long: `Chains run at a device's TC hook. Selectors pick packets:
  tuple(src=ADDR:PORT, dst=ADDR:PORT)  pair(ADDR, ADDR)  src(PREFIX)  dst(PREFIX)
  seq(FROM, TO)  dseq(FROM, TO)  type(mpc-syn|join-syn|join-synack|join-ack|data|data-ack|
  add-addr|remove-addr|mp-prio|mp-fail|fastclose|fin|rst|mptcp)
joined with and, or, not and parentheses. Actors act on them, in order:
  set_backup  clear_backup  strip_add_addr  clamp_rwnd(10mbit|64KiB)  drop
  mark(mark=N, classid=1:10)  count  and actors loaded with chain load.`,
	}
	c.PersistentFlags().StringVar(&socket, "socket", "", socketHelp)
	client := func() *api.Client { return api.NewClient(socket) }

	var spec datapath.ChainSpec
	var hook string
	var addJSON bool
	add := &cobra.Command{
		Use:   "add --dev DEV --hook ingress|egress --select EXPR --act 'ACTOR(args)…'",
		Short: "Attach a chain (the device is left as it was if anything is wrong)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPlacement(cmd, false); err != nil {
				return err
			}
			spec.Hook = datapath.Hook(hook)
			var st datapath.ChainStatus
			if err := client().Do(http.MethodPost, "/v1/chains", spec, &st); err != nil {
				return err
			}
			if addJSON {
				return printJSON(st)
			}
			fmt.Printf("chain %d on %s %s\n", st.ID, st.Dev, st.Hook)
			return nil
		},
	}
	add.Flags().StringVar(&spec.Dev, "dev", "", "network device")
	add.Flags().StringVar(&hook, "hook", "", "ingress or egress")
	add.Flags().StringVar(&spec.Select, "select", "", "selector expression (empty: every TCP packet)")
	add.Flags().StringVar(&spec.Act, "act", "", "actors, in order")
	add.Flags().Uint32Var(&spec.ID, "id", 0, "chain id (default: the first free one)")
	add.Flags().Uint32Var(&spec.Before, "before", 0, "run before this chain")
	add.Flags().Uint32Var(&spec.After, "after", 0, "run after this chain")
	add.Flags().BoolVar(&addJSON, "json", false, "print the new chain's status as JSON")
	add.MarkFlagRequired("dev")
	add.MarkFlagRequired("hook")
	add.MarkFlagRequired("act")

	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List chains with their counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var out []datapath.ChainStatus
			if err := client().Do(http.MethodGet, "/v1/chains", nil, &out); err != nil {
				return err
			}
			if asJSON {
				return printJSON(out)
			}
			if len(out) == 0 {
				fmt.Println("no chains")
			}
			for _, c := range out {
				attach := c.Attach
				if c.TCPriority != 0 {
					attach = fmt.Sprintf("%s, priority %d", attach, c.TCPriority)
				}
				fmt.Printf("chain %d  %s %s (%s)  select %q  act %q\n", c.ID, c.Dev, c.Hook, attach, c.Select, c.Act)
				fmt.Printf("  packets seen %d, selected %d (%d B), modified %d, dropped %d, skipped %d\n",
					c.Seen, c.Selected, c.Bytes, c.Modified, c.Dropped, c.Skipped)
				for i, s := range c.Steps {
					if s.Packets > 0 {
						fmt.Printf("  step %d %s: %d packets, %d B\n", i, s.Text, s.Packets, s.Bytes)
					}
				}
				for _, w := range c.Withheld {
					state := "withheld"
					if w.PutBack {
						state = "released, put back"
					} else if w.Released {
						state = "released, to be put back into the subflow's next packet"
					}
					fmt.Printf("  ADD_ADDR id %d on %s: %s\n", w.AddrID, w.Subflow, state)
				}
			}
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	byID := func(use, short, op string, body func() any) *cobra.Command {
		var asJSON bool
		c := &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				n, err := strconv.ParseUint(args[0], 10, 32)
				if err != nil {
					return fmt.Errorf("chain id %q is not a number", args[0])
				}
				method, path := http.MethodPost, fmt.Sprintf("/v1/chains/%d/%s", n, op)
				if op == "" {
					method, path = http.MethodDelete, fmt.Sprintf("/v1/chains/%d", n)
				}
				var b any
				if body != nil {
					b = body()
				}
				var out map[string]any
				if err := client().Do(method, path, b, &out); err != nil {
					return err
				}
				if asJSON {
					return printJSON(chainOpResult(n, op, out))
				}
				switch op {
				case "":
					fmt.Printf("chain %d removed\n", n)
				case "release":
					fmt.Printf("chain %d: %v ADD_ADDR option(s) released\n", n, out["released"])
				default:
					fmt.Printf("chain %d: %s done\n", n, op)
				}
				return nil
			},
		}
		c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
		return c
	}
	del := byID("del ID", "Detach a chain", "", nil)
	release := byID("release ID", "Put back the ADD_ADDR options a chain withheld", "release", nil)
	var rsel, ract string
	replace := byID("replace ID --select EXPR --act ACTORS", "Swap a chain's selectors and actors atomically", "replace",
		func() any { return map[string]string{"select": rsel, "act": ract} })
	replace.Flags().StringVar(&rsel, "select", "", "new selector expression")
	replace.Flags().StringVar(&ract, "act", "", "new actors")
	var mb, ma uint32
	move := byID("move ID --before ID2 | --after ID2", "Reorder a chain among the chains of its hook", "move",
		func() any { return map[string]uint32{"before": mb, "after": ma} })
	move.Flags().Uint32Var(&mb, "before", 0, "place before this chain")
	move.Flags().Uint32Var(&ma, "after", 0, "place after this chain")
	move.PreRunE = func(cmd *cobra.Command, args []string) error { return checkPlacement(cmd, true) }

	var name string
	var loadJSON bool
	load := &cobra.Command{
		Use:   "load OBJ [--name NAME]",
		Short: "Load a user's actor from a BPF object (checked by the verifier) for use in chains",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			if name == "" {
				name = strings.TrimSuffix(strings.TrimSuffix(filepath.Base(file), ".o"), ".bpf")
			}
			if err := client().Do(http.MethodPost, "/v1/actors", map[string]string{"file": file, "name": name}, nil); err != nil {
				return err
			}
			if loadJSON {
				return printJSON(map[string]string{"actor": name, "file": file})
			}
			fmt.Printf("actor %s loaded: use it as --act '%s(…)'\n", name, name)
			return nil
		},
	}
	load.Flags().StringVar(&name, "name", "", "actor name (default: the file name)")
	load.Flags().BoolVar(&loadJSON, "json", false, "print the loaded actor as JSON")
	c.AddCommand(add, list, del, release, replace, move, load)
	return c
}

// checkPlacement refuses --before together with --after (a chain goes
// next to one other chain), a chain id 0 (ids start at 1), and, when
// required (move), neither of them.
func checkPlacement(cmd *cobra.Command, required bool) error {
	before, after := cmd.Flags().Lookup("before"), cmd.Flags().Lookup("after")
	switch {
	case before.Changed && after.Changed:
		return fmt.Errorf("give either --before %s or --after %s, not both: a chain is placed next to one other chain", before.Value, after.Value)
	case required && !before.Changed && !after.Changed:
		return errors.New("give the chain to place it next to: --before ID or --after ID")
	case before.Changed && before.Value.String() == "0", after.Changed && after.Value.String() == "0":
		return errors.New("chain ids start at 1: --before 0 or --after 0 names no chain")
	}
	return nil
}
