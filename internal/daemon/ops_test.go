package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"mpsteer/internal/api"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// testDaemon is a daemon without a kernel: what the ops read and reload.
func testDaemon(t *testing.T, file, src string) *Daemon {
	t.Helper()
	cfg, err := ParseConfig(file, []byte(src), policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{log: log.New(io.Discard, "", 0), cfg: cfg, engine: &policy.Engine{Policies: cfg.Policies},
		intervalChanged: make(chan struct{}, 1), connActions: map[uint32][]api.ActionRecord{}, warned: map[string]bool{}}
	d.ops = newOps(d, Options{MetricsSubflows: -1})
	return d
}

func sf(local, remote string, backup bool) observe.Subflow {
	return observe.Subflow{Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort(remote), Token: 0xabcd,
		State: tcpEstablished, MPTCP: true, SRTT: 12 * time.Millisecond, Cwnd: 40, BytesAcked: 1000, TotalRetrans: 3, BackupLocal: backup}
}

// families gathers the registry: name → its metrics.
func families(t *testing.T, reg *prometheus.Registry) map[string][]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.Metric
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Per-subflow series exist while their subflow does: when it goes, its
// series go; counters of actions count by policy, kind and result.
func TestMetricsFollowSubflowsAndCountActions(t *testing.T) {
	d := testDaemon(t, "/c.yaml", "policies: []\n")
	a, b := sf("10.1.0.1:40000", "10.9.0.2:5201", false), sf("10.2.0.1:40001", "10.9.0.2:5201", true)
	d.lastSubflows = []observe.Subflow{a, b}
	d.lastPlan = policy.NewPlan()
	d.lastPlan.Backup[policy.ID(b)] = policy.Action{Kind: policy.Backup, Policy: "prefer", Backup: true}
	d.lastPlan.Backup[policy.ID(a)] = policy.Action{Kind: policy.Backup, Policy: "prefer"}
	d.ops.recorded([]api.ActionRecord{{Kind: "backup", Policy: "prefer", Result: "applied"}, {Kind: "create", Policy: "fullmesh", Result: "refused"}, {Kind: "endpoint", Result: "applied"}})
	f := families(t, d.ops.metrics.reg)
	srtt := f["mpsteer_subflow_srtt_seconds"]
	if len(srtt) != 2 || srtt[0].Gauge.GetValue() != 0.012 {
		t.Fatalf("srtt series %v", srtt)
	}
	var backups []string
	for _, m := range f["mpsteer_subflow_backup"] {
		if m.Gauge.GetValue() == 1 {
			backups = append(backups, label(m, "local")+" "+label(m, "side"))
		}
	}
	if len(backups) != 1 || backups[0] != "10.2.0.1:40001 local" {
		t.Fatalf("backup series set: %v", backups)
	}
	if r := f["mpsteer_subflow_retransmits_total"]; len(r) != 2 || r[0].Counter.GetValue() != 3 {
		t.Fatalf("retransmits %v", r)
	}
	got := map[string]float64{}
	for _, m := range f["mpsteer_policy_actions_total"] {
		got[label(m, "policy")+"/"+label(m, "kind")+"/"+label(m, "result")] = m.Counter.GetValue()
	}
	if got["prefer/backup/applied"] != 1 || got["fullmesh/create/refused"] != 1 || got["daemon/endpoint/applied"] != 1 {
		t.Fatalf("actions %v", got)
	}
	dec := map[string]float64{}
	for _, m := range f["mpsteer_policy_decisions"] {
		dec[label(m, "policy")+"/"+label(m, "decision")] = m.Gauge.GetValue()
	}
	if dec["prefer/backup"] != 1 || dec["prefer/active"] != 1 {
		t.Fatalf("decisions %v", dec)
	}
	// The subflow goes: so do its series.
	d.lastSubflows = []observe.Subflow{a}
	f = families(t, d.ops.metrics.reg)
	for _, name := range []string{"mpsteer_subflow_srtt_seconds", "mpsteer_subflow_cwnd_packets", "mpsteer_subflow_bytes_acked_total"} {
		if n := len(f[name]); n != 1 {
			t.Errorf("%s: %d series after a subflow left, want 1", name, n)
		}
	}
	if n := len(f["mpsteer_subflow_backup"]); n != 2 {
		t.Errorf("backup: %d series, want 2 (local and remote of the one subflow)", n)
	}
}

// metricNames are every metric name the daemon can expose.
func metricNames(t *testing.T) map[string]bool {
	d := testDaemon(t, "/c.yaml", "policies: []\n")
	ch := make(chan *prometheus.Desc, 1000)
	m := d.ops.metrics
	m.Describe(ch)
	for _, c := range []prometheus.Collector{m.actions, m.events, m.reloads, m.lastReload, m.sampleErrors, m.rounds, m.lastSample} {
		c.Describe(ch)
	}
	close(ch)
	re := regexp.MustCompile(`fqName: "([a-z0-9_]+)"`)
	names := map[string]bool{}
	for desc := range ch {
		if s := re.FindStringSubmatch(desc.String()); s != nil {
			names[s[1]] = true
		}
	}
	return names
}

// The Grafana dashboard is well-formed JSON and every mpsteer_ metric it
// queries is one the daemon exposes.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/mpsteer-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) < 6 {
		t.Fatalf("dashboard: title %q uid %q, %d panels", dash.Title, dash.UID, len(dash.Panels))
	}
	known := metricNames(t)
	re := regexp.MustCompile(`mpsteer_[a-z0-9_]+`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range re.FindAllString(tg.Expr, -1) {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && known[b] {
						base = b
					}
				}
				if !known[base] {
					t.Errorf("panel %q queries %s, which the daemon does not expose", p.Title, n)
				}
				used[base] = true
			}
		}
	}
	for _, must := range []string{"mpsteer_subflow_srtt_seconds", "mpsteer_subflow_cwnd_packets", "mpsteer_subflow_bytes_acked_total",
		"mpsteer_subflow_backup", "mpsteer_subflow_retransmits_total", "mpsteer_policy_actions_total", "mpsteer_policy_decisions",
		"mpsteer_chain_packets_selected_total", "mpsteer_chain_packets_modified_total", "mpsteer_chain_packets_dropped_total",
		"mpsteer_last_sample_timestamp_seconds", "mpsteer_pending_outcomes"} {
		if !used[must] {
			t.Errorf("the dashboard shows nothing of %s", must)
		}
	}
}

func TestMonitorHubDropsForSlowClientsAndSaysSo(t *testing.T) {
	h := newMonitorHub()
	s := h.subscribe()
	for i := 0; i < monitorBuffer+10; i++ {
		h.publish(api.MonitorEvent{Type: api.MonitorPM})
	}
	for i := 0; i < monitorBuffer; i++ {
		<-s.ch
	}
	h.publish(api.MonitorEvent{Type: api.MonitorAction})
	if ev := <-s.ch; ev.Type != api.MonitorDropped || ev.Dropped != 10 {
		t.Fatalf("after the buffer drained: %+v, want a dropped notice of 10", ev)
	}
	if ev := <-s.ch; ev.Type != api.MonitorAction {
		t.Fatalf("then %+v, want the action", ev)
	}
	h.close()
	select {
	case <-s.done:
	default:
		t.Fatal("close did not end the subscription")
	}
}

// The stream over HTTP: a hello line, then one JSON object per event.
func TestMonitorStream(t *testing.T) {
	d := testDaemon(t, "/c.yaml", "policies: []\n")
	d.netns = "test-ns"
	srv := httptest.NewServer(http.HandlerFunc(d.serveMonitor))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	next := func() api.MonitorEvent {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		var ev api.MonitorEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		return ev
	}
	if ev := next(); ev.Type != api.MonitorHello || ev.NetNS != "test-ns" {
		t.Fatalf("first line %+v", ev)
	}
	for !d.ops.hub.active() {
		time.Sleep(time.Millisecond)
	}
	bk := true
	d.record(api.ActionRecord{At: time.Now(), Kind: "backup", Policy: "prefer", Target: "10.2.0.1:1→10.9.0.2:5201", Backup: &bk, Result: "applied", Reason: "why"})
	ev := next()
	if ev.Type != api.MonitorAction || ev.Action == nil || ev.Action.Policy != "prefer" || !strings.Contains(ev.String(), "backup=true") {
		t.Fatalf("action line %+v", ev)
	}
	d.ops.reloaded("SIGHUP", "", io.ErrUnexpectedEOF)
	if ev := next(); ev.Type != api.MonitorReload || ev.Applied == nil || *ev.Applied || ev.Trigger != "SIGHUP" {
		t.Fatalf("reload line %+v", ev)
	}
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
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if ok() {
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s: not within 5s; log:\n%s", what, logs.String())
	}
	time.Sleep(100 * time.Millisecond) // the watch is in place
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
	f := families(t, d.ops.metrics.reg)
	res := map[string]float64{}
	for _, m := range f["mpsteer_config_reloads_total"] {
		res[label(m, "trigger")+"/"+label(m, "result")] = m.Counter.GetValue()
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
	time.Sleep(watchRecheck + 300*time.Millisecond) // the watcher follows the new file
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

func TestPeerCheck(t *testing.T) {
	if !peerAllowed(0) || !peerAllowed(uint32(os.Geteuid())) {
		t.Fatal("root and the daemon's own user must be answered")
	}
	if os.Geteuid() == 0 && peerAllowed(65534) {
		t.Fatal("a daemon running as root answered uid 65534")
	}
	if msg := peerRefusal("uid 65534"); !strings.Contains(msg, "answers root only") || !strings.Contains(msg, "uid 65534") {
		t.Fatalf("refusal %q", msg)
	}
}

// Per-subflow series stop at --metrics-subflows; the totals still count
// every subflow and the gauge says how many went without series.
func TestMetricsCapPerSubflowSeries(t *testing.T) {
	d := testDaemon(t, "/c.yaml", "policies: []\n")
	d.ops.metrics.subflowSeries = 1
	d.lastSubflows = []observe.Subflow{sf("10.1.0.1:40000", "10.9.0.2:5201", false), sf("10.2.0.1:40001", "10.9.0.2:5201", true)}
	f := families(t, d.ops.metrics.reg)
	if n := len(f["mpsteer_subflow_srtt_seconds"]); n != 1 {
		t.Errorf("%d srtt series, want 1", n)
	}
	if o := f["mpsteer_subflow_series_omitted"]; len(o) != 1 || o[0].Gauge.GetValue() != 1 {
		t.Errorf("omitted %v, want 1", o)
	}
	for _, m := range f["mpsteer_subflows"] {
		if label(m, "state") == "established" && m.Gauge.GetValue() != 2 {
			t.Errorf("established %v, want 2 (every subflow)", m.Gauge.GetValue())
		}
	}
}
