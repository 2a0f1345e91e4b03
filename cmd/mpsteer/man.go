package main

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func init() { extraCommands = append(extraCommands, manCmd) }

// manCmd writes the manual pages (section 8, one per command) from the
// command tree itself, so that they say exactly what --help says: `make
// install` and the .deb install them.
func manCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:    "man --dir DIR",
		Short:  "Write mpsteer's manual pages (section 8) into DIR",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // the same pages from the same tree
			return doc.GenManTree(root, &doc.GenManHeader{Title: "MPSTEER", Section: "8", Source: "mpsteer " + versionInfo().Version, Manual: "mpsteer manual"}, dir)
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "directory to write the pages into")
	c.MarkFlagRequired("dir")
	return c
}
