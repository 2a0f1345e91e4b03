package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"mpsteer/internal/docs"
	"mpsteer/internal/docs/legacy"
)

func init() { extraCommands = append(extraCommands, docsCmd) }

func docsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "docs",
		Short: "Render the documents' figures from docs/data (render), and convert the data recorded before results.json had provenance (legacy)",
	}
	c.AddCommand(docsRenderCmd(), docsLegacyCmd())
	return c
}

func docsRenderCmd() *cobra.Command {
	var root string
	var check bool
	c := &cobra.Command{
		Use:   "render [--check]",
		Short: "Render every figure, table and paper quote of README.md and docs/results.md from docs/data (--check: change nothing, exit 1 naming each figure that differs)",
		Long: `Renders what stands between the markers of README.md and docs/results.md
(<!-- fig: … -->…<!-- /fig -->, <!-- table: NAME -->…<!-- /table -->,
<!-- paper: ID -->…<!-- /paper -->) from the data under docs/data, the
tables of docs/figures.yaml and the quotes of docs/papers.yaml, and writes
the documents back (make docs).

--check (make docs-check, part of make test) writes nothing; it exits 1 when
a figure's text is not what the data give (naming the figure and both
texts), when a data file a figure needs is missing, when a data file has no
provenance (commit, command, kernel, date) or its stored figures are not
what its runs give, when a file converted from docs/data/archive is not what
its sources give or the archive holds a file docs/data/legacy.yaml does not
account for, and when a number with a unit is typed into a document's text
outside the markers (docs/figures.yaml allows phrases that are not
measurements).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			site := docs.Default(root)
			res, err := site.Render()
			if err != nil {
				return err
			}
			if check {
				for _, d := range res.Differ {
					fmt.Fprintln(os.Stderr, d)
				}
				for _, p := range res.Problems {
					fmt.Fprintln(os.Stderr, p)
				}
				if !res.OK() {
					return fmt.Errorf("docs check: %d figure(s) differ from their data, %d other problem(s) (make docs renders the figures)", len(res.Differ), len(res.Problems))
				}
				fmt.Println("docs check: every figure is what its data give")
				return nil
			}
			written, err := site.Write(res)
			for _, f := range written {
				fmt.Println("rendered", f)
			}
			if err != nil {
				return err
			}
			for _, p := range res.Problems {
				fmt.Fprintln(os.Stderr, p)
			}
			if len(res.Problems) > 0 {
				return fmt.Errorf("docs: %d problem(s) (above)", len(res.Problems))
			}
			return nil
		},
	}
	c.Flags().StringVar(&root, "root", ".", "the repository")
	c.Flags().BoolVar(&check, "check", false, "change nothing; exit 1 if a figure is not what its data give (or anything else is wrong)")
	return c
}

func docsLegacyCmd() *cobra.Command {
	var root string
	c := &cobra.Command{
		Use:   "legacy",
		Short: "Convert the data in docs/data/archive recorded before results.json had provenance, as docs/data/legacy.yaml says, into docs/data/<scenario>/results.json and docs/data/bench/<name>.json",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			site := docs.Default(root)
			mf, err := legacy.LoadManifest(filepath.Join(root, site.Legacy))
			if err != nil {
				return err
			}
			out, err := mf.Convert(filepath.Join(root, site.Data), filepath.Join(root, site.Scenarios))
			if err != nil {
				return err
			}
			for _, rel := range slices.Sorted(maps.Keys(out)) {
				p := filepath.Join(root, site.Data, rel)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(p, out[rel], 0o644); err != nil {
					return err
				}
				fmt.Println(filepath.Join(site.Data, rel))
			}
			return nil
		},
	}
	c.Flags().StringVar(&root, "root", ".", "the repository")
	return c
}
