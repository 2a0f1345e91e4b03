package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set when building for release: go build -ldflags
// "-X main.version=0.1.0" (the Makefile does). Otherwise the module's
// version, or "dev" with the commit the build came from.
var version string

func init() {
	extraCommands = append(extraCommands, versionCmd)
}

// VersionInfo is what `mpsteer version --json` prints.
type VersionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	CommitAt  string `json:"commit_time,omitempty"`
	Modified  bool   `json:"modified,omitempty"` // built from a work tree with changes
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

func versionInfo() VersionInfo {
	v := VersionInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.CommitAt = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

func versionCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print mpsteer's version, the commit it was built from and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := versionInfo()
			if asJSON {
				return printJSON(v)
			}
			s := "mpsteer " + v.Version
			if v.Commit != "" {
				c := v.Commit
				if len(c) > 12 {
					c = c[:12]
				}
				s += " (commit " + c
				if v.Modified {
					s += ", modified"
				}
				s += ")"
			}
			fmt.Printf("%s, %s, %s\n", s, v.GoVersion, v.Platform)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// rootLong is `mpsteer --help` and the head of mpsteer(8).
const rootLong = `mpsteer steers Linux Multipath TCP (MPTCP) with policies, without kernel
patches: a daemon per network namespace (mpsteer daemon, or the systemd
unit mpsteer.service) decides with policies (prefer, dynthresh, fullmesh,
incremental, ecf, limit, backup; presets handover, interactive, aggregate
and per-interface on/off/backup/master) and acts through the path
manager's netlink family and eBPF programs. The other commands talk to it
over its unix socket (status, prefer, policy apply, monitor, chain) or run
the lab: network namespaces joined by a link emulator, where every policy
is measured against the kernel's default.

Files: /etc/mpsteer/mpsteer.yaml (the unit's config, commented),
/etc/default/mpsteer (MPSTEER_OPTS for the unit), /run/mpsteer/ (API
sockets, what to undo after a crash). Every command that reports takes
--json.`
