package policy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/yamlcfg"
)

// The policy entries people copy: the commented examples of the packaged
// config and every `policies:` list in the YAML blocks of the docs. Each
// must build without a complaint (the scenarios' daemon sections are
// checked by the scenario package's TestShippedScenariosParse).
func TestShippedPolicyExamplesBuild(t *testing.T) {
	n := 0
	for _, e := range deployExamples(t, "../../deploy/mpsteer.yaml") {
		m, err := yamlcfg.Parse(e.where, []byte(e.text))
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		m.Has("cgroup") // the daemon's key (scope.go), read before Build
		Build(m, Env{})
		if err := m.Err(); err != nil {
			t.Errorf("%s: %s\n%v", e.where, strings.TrimSpace(e.text), err)
		}
		n++
	}
	if n < 4 {
		t.Fatalf("%d policy examples found in deploy/mpsteer.yaml, want its 4 or more", n)
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	docs = append(docs, "../../README.md")
	found := 0
	for _, f := range docs {
		for _, b := range yamlBlocks(t, f) {
			m, err := yamlcfg.Parse(f, []byte(b))
			if err != nil {
				t.Errorf("a yaml block of %v", err)
				continue
			}
			found += buildPolicyLists(m)
			if err := m.Err(); err != nil {
				t.Errorf("%v", err)
			}
		}
	}
	// daemon.md alone shows a dozen policies.
	if found < 12 {
		t.Fatalf("%d policy entries found in the docs' yaml blocks, want 12 or more", found)
	}
}

// buildPolicyLists builds every entry of every `policies:` list anywhere
// in m (a daemon config, or a scenario's daemon sections) and returns how
// many it built.
func buildPolicyLists(m *yamlcfg.Map) int {
	n := 0
	for _, k := range m.Keys() {
		v := yamlcfg.RawNode(m, k)
		switch {
		case k == "atsss":
			// The atsss section builds into one policy of its own.
			if am := m.Map(k); am != nil {
				BuildATSSS(am, Env{})
				n++
			}
		case k == "policies":
			for _, it := range m.List(k) {
				if it.Map != nil {
					it.Map.Has("cgroup") // the daemon's key (scope.go), read before Build
					Build(it.Map, Env{})
					n++
				}
			}
		case v.Kind == yaml.MappingNode:
			n += buildPolicyLists(m.Map(k))
		case v.Kind == yaml.SequenceNode:
			for _, it := range m.List(k) {
				if it.Map != nil {
					n += buildPolicyLists(it.Map)
				}
			}
		}
	}
	return n
}

// yamlBlocks returns the ```yaml blocks of a Markdown file, each padded
// with empty lines so that its line numbers are the file's.
func yamlBlocks(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```yaml" {
			continue
		}
		var b strings.Builder
		b.WriteString(strings.Repeat("\n", i+1))
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			b.WriteString(lines[i] + "\n")
			// An alternative given as a comment ("# - {name: …}") is a
			// block of its own.
			if m := commentedEntry.FindStringSubmatch(strings.TrimSpace(lines[i])); m != nil {
				out = append(out, strings.Repeat("\n", i)+"policies: ["+m[1]+"]\n")
			}
		}
		out = append(out, b.String())
	}
	return out
}

type example struct{ where, text string }

var commentedEntry = regexp.MustCompile(`^#[\s#-]*(\{name:.*\})\s*$`)

// deployExamples returns the policy entries commented out in the
// packaged config ("#  - {name: prefer, …}", and the alternatives given
// as "#  #   {name: prefer, …}"), each with its file and line.
func deployExamples(t *testing.T, file string) []example {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []example
	for i, l := range strings.Split(string(data), "\n") {
		if m := commentedEntry.FindStringSubmatch(l); m != nil {
			// Padded so that its line numbers are the file's.
			out = append(out, example{where: file, text: strings.Repeat("\n", i) + m[1]})
		}
	}
	return out
}
