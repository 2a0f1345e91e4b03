package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// userKeys are what a user must say in any case (which paths, which
// uplinks, which cgroup, limit's caps): not tuning, so not listed.
var userKeys = map[string]bool{"name": true, "paths": true, "interfaces": true, "shared": true, "from": true, "via": true, "cgroup": true, "rates": true}

// TestScenarioKeysAreDocumented: every policy key a shipped scenario sets
// (beyond what the user must give) has its row in docs/daemon.md's
// "Defaults, and the keys the scenarios change", so that no scenario wins
// on a setting a user is never told about.
func TestScenarioKeysAreDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "daemon.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedKeys(t, string(doc))
	files, err := filepath.Glob(filepath.Join(root, "scenarios", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var n yaml.Node
		if err := yaml.Unmarshal(b, &n); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, pk := range policyKeys(&n) {
			if !documented[policyKey{policy: pk.policy, key: pk.key}] {
				t.Errorf("%s:%d: policy %s sets %s, which docs/daemon.md's table of keys the scenarios change does not list", f, pk.line, pk.policy, pk.key)
			}
		}
	}
}

type policyKey struct {
	policy, key string
	line        int
}

// documentedKeys reads the table: a row's first cell names the policy,
// its second the keys (`key: value`, …).
func documentedKeys(t *testing.T, doc string) map[policyKey]bool {
	const head = "## Defaults, and the keys the scenarios change"
	i := strings.Index(doc, head)
	if i < 0 {
		t.Fatalf("docs/daemon.md has no section %q", head)
	}
	sec := doc[i+len(head):]
	if j := strings.Index(sec, "\n## "); j >= 0 {
		sec = sec[:j]
	}
	out := map[policyKey]bool{}
	key := regexp.MustCompile("`([a-z_]+):")
	for _, l := range strings.Split(sec, "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		pol := strings.Trim(strings.TrimSpace(cells[1]), "`")
		for _, m := range key.FindAllStringSubmatch(cells[2], -1) {
			out[policyKey{policy: pol, key: m[1]}] = true
		}
	}
	if len(out) == 0 {
		t.Fatal("the section's table lists no keys")
	}
	return out
}

// policyKeys finds every mapping under a `policies` sequence, anywhere.
func policyKeys(n *yaml.Node) []policyKey {
	var out []policyKey
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if k.Value == "policies" && v.Kind == yaml.SequenceNode {
					for _, p := range v.Content {
						out = append(out, keysOf(p)...)
					}
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return out
}

func keysOf(p *yaml.Node) []policyKey {
	if p.Kind != yaml.MappingNode {
		return nil
	}
	name := ""
	for i := 0; i+1 < len(p.Content); i += 2 {
		if p.Content[i].Value == "name" {
			name = p.Content[i+1].Value
		}
	}
	var out []policyKey
	for i := 0; i+1 < len(p.Content); i += 2 {
		if k := p.Content[i]; !userKeys[k.Value] {
			out = append(out, policyKey{policy: name, key: k.Value, line: k.Line})
		}
	}
	return out
}
