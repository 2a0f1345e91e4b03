package daemon

import (
	"context"
	"errors"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mpsteer/internal/config"
	"mpsteer/internal/policy"
	"mpsteer/internal/testutil"
)

// testDaemon is a daemon without a kernel: what the ops read and reload.
func testDaemon(t *testing.T, file, src string) *Daemon {
	t.Helper()
	cfg, err := config.Parse(file, []byte(src), policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	// A kernel with every feature: reloads are checked against it.
	standIn(t, kernelLike("test", nil, true))
	d := &Daemon{log: log.New(io.Discard, "", 0), cfg: cfg, engine: &policy.Engine{Policies: cfg.Policies}, in: newInbox(), joins: newJoinWatch()}
	d.records.init()
	d.ops = newOps(d, Options{MetricsSubflows: -1})
	// No kernel: caps by rwnd chains, whose actuator loads nothing until
	// a subflow is capped.
	noKernel := *cfg
	noKernel.RateVia = config.RateRwnd
	d.apply = newApplier(nil, nil, 0, nil, &noKernel, "kernel", nil)
	return d
}

// A change of the config file reloads it the way SIGHUP does; a broken
// edit is refused and the old config stays; a ConfigMap-style symlink
// swap counts as a change.
func TestConfigFileChangeReloads(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mpsteer.yaml")
	os.WriteFile(file, []byte("interval: 100ms\n"), 0o644)
	d := testDaemon(t, file, "interval: 100ms\n")
	var mu sync.Mutex
	var logs strings.Builder
	d.log = log.New(&lockedWriter{w: &logs, mu: &mu}, "", 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := d.watchConfig(ctx)
	defer stop()
	interval := func() time.Duration {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.cfg.Interval
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		if testutil.WaitFor(5*time.Second, func() error {
			if !ok() {
				return errors.New(what)
			}
			return nil
		}) != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s: not within 5s; log:\n%s", what, logs.String())
		}
	}
	following := func(file string) func() bool {
		return func() bool { f := d.watched.Load(); return f != nil && *f == file }
	}
	waitFor("the watch in place", following(file))
	os.WriteFile(file, []byte("interval: 50ms\n"), 0o644)
	waitFor("an edit applied", func() bool { return interval() == 50*time.Millisecond })
	// An editor's save: write a new file, rename it over the old one.
	tmp := filepath.Join(dir, ".mpsteer.yaml.swp")
	os.WriteFile(tmp, []byte("interval: 70ms\n"), 0o644)
	os.Rename(tmp, file)
	waitFor("a rename applied", func() bool { return interval() == 70*time.Millisecond })
	// A broken edit: refused, logged, the old config stays.
	os.WriteFile(file, []byte("interval: 70\n"), 0o644)
	waitFor("a broken edit refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "config file changed: config not applied, the old one stays") && strings.Contains(logs.String(), "has no unit")
	})
	if iv := interval(); iv != 70*time.Millisecond {
		t.Fatalf("after a broken edit the interval is %v, want 70ms (the old config)", iv)
	}
	mfs, err := d.ops.metrics.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "mpsteer_config_reloads_total" {
			continue
		}
		for _, m := range mf.Metric {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			res[l["trigger"]+"/"+l["result"]] = m.Counter.GetValue()
		}
	}
	if res["config file changed/applied"] != 2 || res["config file changed/refused"] != 1 {
		t.Fatalf("reload counters %v", res)
	}
	// A Kubernetes ConfigMap volume: the file is a symlink through ..data,
	// and an update swaps ..data.
	cm := t.TempDir()
	v1, v2 := filepath.Join(cm, "..v1"), filepath.Join(cm, "..v2")
	os.Mkdir(v1, 0o755)
	os.Mkdir(v2, 0o755)
	os.WriteFile(filepath.Join(v1, "mpsteer.yaml"), []byte("interval: 100ms\n"), 0o644)
	os.WriteFile(filepath.Join(v2, "mpsteer.yaml"), []byte("interval: 30ms\n"), 0o644)
	os.Symlink("..v1", filepath.Join(cm, "..data"))
	cmFile := filepath.Join(cm, "mpsteer.yaml")
	os.Symlink("..data/mpsteer.yaml", cmFile)
	if _, err := d.reload(cmFile, nil); err != nil { // as `policy apply` would switch files
		t.Fatal(err)
	}
	waitFor("the watcher following the new file", following(cmFile))
	os.Symlink("..v2", filepath.Join(cm, "..data_tmp"))
	os.Rename(filepath.Join(cm, "..data_tmp"), filepath.Join(cm, "..data"))
	waitFor("a ConfigMap update applied", func() bool { return interval() == 30*time.Millisecond })
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func TestCapabilitiesNameWhatIsMissing(t *testing.T) {
	old := effectiveCaps
	defer func() { effectiveCaps = old }()
	effectiveCaps = func() (uint64, error) { return 1 << unix.CAP_NET_ADMIN, nil }
	err := CheckCapabilities()
	if err == nil || !strings.Contains(err.Error(), "lacks CAP_BPF (BPF programs and maps), CAP_PERFMON") || strings.Contains(err.Error(), "lacks CAP_NET_ADMIN") ||
		!strings.Contains(err.Error(), "AmbientCapabilities=CAP_NET_ADMIN CAP_BPF CAP_PERFMON") {
		t.Fatalf("only CAP_NET_ADMIN: %v", err)
	}
	effectiveCaps = func() (uint64, error) {
		return 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON, nil
	}
	if err := CheckCapabilities(); err != nil {
		t.Fatalf("with the three: %v", err)
	}
}
