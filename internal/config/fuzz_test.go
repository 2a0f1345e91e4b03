package config

import (
	"bytes"
	"testing"

	"mpsteer/internal/policy"
)

// Any bytes as a daemon config: an error naming the file, or a config.
func FuzzParse(f *testing.F) {
	f.Add([]byte("interval: 100ms\npolicies:\n  - {name: prefer, paths: [wlan0]}\n  - {name: dynthresh}\n"))
	f.Add([]byte("policies: [{name: fullmesh, subflows_per_pair: 4, interfaces: [a], exclude: [b]}]"))
	f.Add([]byte("policies: [{name: incremental, steps: [200KiB, 2MiB], shared: [[a, b]]}]"))
	f.Add([]byte("policies: [{name: ecf, headroom: 90%}, {name: limit, rates: {wwan0: 5mbit}}]"))
	f.Add([]byte("chains: [{dev: eth0, hook: ingress, select: 'type(data-ack)', act: set_backup}]"))
	f.Add([]byte("interval: 1ms\nbackup_via: magic"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse("c.yaml", b, policy.Env{})
		if err != nil && !bytes.Contains([]byte(err.Error()), []byte("c.yaml")) {
			t.Fatalf("error without the file name: %v", err)
		}
		if err == nil && cfg.Interval < 10e6 {
			t.Fatalf("accepted interval %v", cfg.Interval)
		}
	})
}
