package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
)

// series parses Prometheus text: "name{labels}" → value, for one family.
func series(body, name string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err == nil {
			out[l[:i]] = v
		}
	}
	return out
}

func sfKey(name string, sf observe.Subflow, extra string) string {
	k := fmt.Sprintf(`%s{local="%s",remote="%s"`, name, sf.Local, sf.Remote)
	if extra != "" {
		k += "," + extra
	}
	return k + fmt.Sprintf(`,token="%08x"}`, sf.Token)
}

// The metrics a lab host's daemon serves match the kernel's own numbers
// for each subflow while an upload runs, and the subflows' series are gone
// once the connection is.
func TestMetricsMatchTheKernel(t *testing.T) {
	w := newWorld(t)
	// A free port: the daemon says which.
	d := testutil.StartDaemonWith(t, w.h.Client, "policies: [{name: backup, paths: ["+w.h.Dev(2)+"]}]\n", "--metrics", "127.0.0.1:0")
	logText, _ := os.ReadFile(d.Log)
	m := regexp.MustCompile(`metrics on (http://\S+/metrics)`).FindSubmatch(logText)
	if m == nil {
		t.Fatalf("the daemon does not say where its metrics are:\n%s", logText)
	}
	url := string(m[1])
	sampler := testutil.Sampler(t, w.h.Client)
	established := func() []observe.Subflow {
		sfs, err := sampler.Subflows()
		if err != nil {
			t.Fatal(err)
		}
		var out []observe.Subflow
		for _, s := range sfs {
			if s.MPTCP && s.State == 1 && s.Local.Port() != 5201 {
				out = append(out, s)
			}
		}
		return out
	}
	scrape := func() string {
		t.Helper()
		body, err := testutil.HTTPGetIn(w.h.Client, url)
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	sampledRounds := func() float64 {
		t.Helper()
		return series(scrape(), "mpsteer_round_duration_seconds_count")["mpsteer_round_duration_seconds_count"]
	}
	u := startUploadIn(t, w.h.Client, w.h.Server, netip.AddrPortFrom(w.h.ServerAddr(1), 5201))
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := len(established()); n < 2 {
			return fmt.Errorf("the kernel shows %d established subflows, want 2", n)
		}
		return nil
	})
	// The kernel's numbers, then a scrape of what the daemon read after
	// them, then the kernel's again. Each round takes the newest sample
	// and the sampler reads one at a time: the fourth sampled round after
	// the kernel was read is one whose sample was read after it.
	before := established()
	rounds := sampledRounds()
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := sampledRounds() - rounds; n < 4 {
			return fmt.Errorf("the daemon ran %v sampled rounds since the kernel was read, want 4", n)
		}
		return nil
	})
	body := scrape()
	after := established()
	if err := compareWithKernel(body, before, after); err != nil {
		b, _ := os.ReadFile(d.Log)
		t.Fatalf("%v\ndaemon log:\n%s", err, b)
	}
	u.stop()
	// The connection is gone: so are its subflows' series.
	subflowSeries := []string{"mpsteer_subflow_srtt_seconds", "mpsteer_subflow_cwnd_packets", "mpsteer_subflow_bytes_acked_total", "mpsteer_subflow_backup"}
	testutil.Eventually(t, 5*time.Second, func() error {
		body = scrape()
		for _, name := range subflowSeries {
			if s := series(body, name); len(s) > 0 {
				return fmt.Errorf("%s still has series after the connection closed: %v", name, s)
			}
		}
		return nil
	})
	if v := series(body, "mpsteer_policy_actions_total")[`mpsteer_policy_actions_total{kind="backup",policy="backup",result="applied"}`]; v < 1 {
		t.Errorf("no applied backup action counted:\n%s", body)
	}
	if v := series(body, "mpsteer_pm_events_total")[`mpsteer_pm_events_total{event="sub_established"}`]; v < 1 {
		t.Errorf("no sub_established event counted")
	}
	if v := series(body, "mpsteer_last_sample_timestamp_seconds")["mpsteer_last_sample_timestamp_seconds"]; time.Since(time.Unix(int64(v), 0)) > 5*time.Second {
		t.Errorf("last sample at %v", v)
	}
}

// compareWithKernel checks each subflow the kernel reported before and
// after the scrape against the scrape: counters between the two, flags
// equal, gauges plausible.
func compareWithKernel(body string, before, after []observe.Subflow) error {
	if len(after) < 2 {
		return fmt.Errorf("the kernel shows %d established subflows, want 2", len(after))
	}
	prev := map[string]observe.Subflow{}
	for _, s := range before {
		prev[s.Key()] = s
	}
	acked, cwnd, srtt := series(body, "mpsteer_subflow_bytes_acked_total"), series(body, "mpsteer_subflow_cwnd_packets"), series(body, "mpsteer_subflow_srtt_seconds")
	retr, backup := series(body, "mpsteer_subflow_retransmits_total"), series(body, "mpsteer_subflow_backup")
	for _, k := range after {
		b, ok := prev[k.Key()]
		if !ok {
			continue
		}
		a, ok := acked[sfKey("mpsteer_subflow_bytes_acked_total", k, "")]
		if !ok {
			return fmt.Errorf("no bytes_acked series for %s→%s:\n%s", k.Local, k.Remote, body)
		}
		if a < float64(b.BytesAcked) || a > float64(k.BytesAcked) {
			return fmt.Errorf("%s: bytes_acked %v outside the kernel's %d … %d", k.Local, a, b.BytesAcked, k.BytesAcked)
		}
		if r := retr[sfKey("mpsteer_subflow_retransmits_total", k, "")]; r < float64(b.TotalRetrans) || r > float64(k.TotalRetrans) {
			return fmt.Errorf("%s: retransmits %v outside the kernel's %d … %d", k.Local, r, b.TotalRetrans, k.TotalRetrans)
		}
		if c := cwnd[sfKey("mpsteer_subflow_cwnd_packets", k, "")]; c < 1 || c > float64(2*max(b.Cwnd, k.Cwnd)+10) {
			return fmt.Errorf("%s: cwnd %v, the kernel's %d and %d", k.Local, c, b.Cwnd, k.Cwnd)
		}
		if s := srtt[sfKey("mpsteer_subflow_srtt_seconds", k, "")]; s <= 0 || s > 1 {
			return fmt.Errorf("%s: srtt %v s (the kernel's %v, %v)", k.Local, s, b.SRTT, k.SRTT)
		}
		want := 0.0
		if k.BackupLocal {
			want = 1
		}
		if v := backup[sfKey("mpsteer_subflow_backup", k, `side="local"`)]; v != want {
			return fmt.Errorf("%s: backup %v, the kernel says %v", k.Local, v, k.BackupLocal)
		}
	}
	return nil
}

// `mpsteer monitor --json` streams the path manager's events and the
// daemon's decisions and actions, one JSON object per line.
func TestMonitorStreamsEventsDecisionsAndActions(t *testing.T) {
	w := newWorld(t)
	// The policy comes once the monitor listens: backup flags its
	// interface's endpoint as soon as it runs, before any connection.
	d := w.startDaemon(t, "policies: []\n")
	mon := exec.Command("ip", "netns", "exec", w.h.Client, testutil.Binary(t), "monitor", "--json", "--socket", d.Socket)
	out, err := mon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { mon.Process.Kill(); mon.Wait() }()
	lines := make(chan api.MonitorEvent, 1000)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev api.MonitorEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("not JSON: %q", sc.Text())
				continue
			}
			lines <- ev
		}
		close(lines)
	}()
	select {
	case ev := <-lines:
		if ev.Type != api.MonitorHello || ev.PID == 0 {
			t.Fatalf("first line %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no hello line")
	}
	if _, err := d.Client.Apply(api.ApplyRequest{File: filepath.Join(d.Dir, "backup.yaml"), Config: "policies: [{name: backup, paths: [" + w.h.Dev(2) + "]}]\n"}); err != nil {
		t.Fatal(err)
	}
	w.upload(t, time.Second, nil)
	seen := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for !(seen["pm/sub_established"] && seen["pm/closed"] && seen["action/backup"] && seen["decision/backup"]) {
		select {
		case ev, ok := <-lines:
			if !ok {
				t.Fatalf("stream ended; seen %v", seen)
			}
			switch ev.Type {
			case api.MonitorPM:
				seen["pm/"+ev.Event] = true
				if ev.Token == "" {
					t.Errorf("pm event without a token: %+v", ev)
				}
			case api.MonitorAction:
				if ev.Action != nil && ev.Action.Policy == "backup" && ev.Action.Result == "applied" {
					seen["action/"+ev.Action.Kind] = true
				}
			case api.MonitorDecision:
				if ev.Policy == "backup" {
					seen["decision/"+ev.Decision] = true
				}
			}
		case <-deadline:
			t.Fatalf("within 5s saw only %v", seen)
		}
	}
	// The daemon stops: the stream ends and monitor exits 0.
	d.Stop(os.Interrupt)
	for range lines {
	}
	if err := mon.Wait(); err != nil {
		t.Fatalf("monitor after the daemon stopped: %v", err)
	}
}

// Run as an unprivileged user with the three capabilities, the daemon
// works and answers root and its own user, and no one else; with one of
// them missing it refuses to start and names it.
func TestDaemonAsItsOwnUserWithCapabilities(t *testing.T) {
	w := newWorld(t)
	testutil.RequireTool(t, "setpriv")
	testutil.RequireTool(t, "nsenter")
	const uid = 61235
	dir, err := os.MkdirTemp("", "mpsteer-caps")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	os.Chown(dir, uid, uid)
	cfg := filepath.Join(dir, "c.yaml")
	// Endpoint flags (backup) and a sockops program attached to the cgroup
	// root (limit's pacing).
	os.WriteFile(cfg, []byte("policies: [{name: backup, paths: ["+w.h.Dev(2)+"]}, {name: limit, rates: {"+w.h.Dev(2)+": 1gbit}}]\n"), 0o644)
	socket := filepath.Join(dir, "d.sock")
	run := func(caps string, extra ...string) *exec.Cmd {
		args := append([]string{"--net=/run/netns/" + w.h.Client, "setpriv", "--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid), "--clear-groups",
			"--inh-caps=-all," + caps, "--ambient-caps=-all," + caps, "--bounding-set=-all," + caps, testutil.Binary(t)}, extra...)
		return exec.Command("nsenter", args...)
	}
	// One missing: named.
	out, err := run("+net_admin,+bpf", "daemon", "--config", cfg, "--socket", socket, "--state-dir", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "lacks CAP_PERFMON") {
		t.Fatalf("without CAP_PERFMON: %v: %s", err, out)
	}
	// All three: it runs.
	d := run("+net_admin,+bpf,+perfmon", "daemon", "--config", cfg, "--socket", socket, "--state-dir", dir)
	var log strings.Builder
	d.Stdout, d.Stderr = &log, &log
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { d.Wait(); close(done) }()
	defer func() {
		d.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			d.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", log.String())
		}
	}()
	c := api.NewClient(socket)
	testutil.Eventually(t, 10*time.Second, func() error {
		select {
		case <-done:
			return fmt.Errorf("the daemon exited")
		default:
		}
		if _, err := c.Status(); err != nil {
			return fmt.Errorf("the daemon does not answer root: %v", err)
		}
		return nil
	})
	acked := w.upload(t, 2*time.Second, nil)
	if s := share(acked, w.h.ClientAddr(1)); s < 0.9 {
		t.Fatalf("the path that is not backup carried %.0f%% (%v): the capabilities did not suffice", s*100, acked)
	}
	if st, err := c.Status(); err != nil || len(st.RateProgram) == 0 {
		t.Fatalf("the rate program is not loaded: %+v, %v", st.RateProgram, err)
	}
	if strings.Contains(log.String(), "not enforced") || strings.Contains(log.String(), "cannot") || strings.Contains(log.String(), "permission") {
		t.Fatalf("a feature failed without root:\n%s", log.String())
	}
	// Its own user is answered; another user is not, and is told why.
	as := func(u int) (string, error) {
		out, err := exec.Command("setpriv", "--reuid="+strconv.Itoa(u), "--regid="+strconv.Itoa(u), "--clear-groups", testutil.Binary(t), "status", "--socket", socket).CombinedOutput()
		return string(out), err
	}
	if out, err := as(uid); err != nil || !strings.Contains(out, "daemon pid") {
		t.Fatalf("status as the daemon's own user: %v: %s", err, out)
	}
	os.Chmod(socket, 0o666) // only the daemon's check stands in the way
	out2, err := as(65534)
	if err == nil || !strings.Contains(out2, "answers root only, and the daemon's own user uid 61235 (this request came from uid 65534)") {
		t.Fatalf("status as nobody: %v: %s", err, out2)
	}
}

// A preset in the user's terms (per-interface backup, OpenMPTCProuter's
// mode) does what it says on a live transfer: the backup interface's
// subflow carries (almost) nothing while the other works, and status
// shows the policy it expanded into.
func TestModeBackupInterfaceInTheLab(t *testing.T) {
	w := newWorld(t)
	d := w.startDaemon(t, "mode:\n  service: aggregate\n  interfaces: {"+w.h.Dev(1)+": on, "+w.h.Dev(2)+": backup}\n")
	// The backup interface's endpoint is backup before any connection
	// uses it, so that the join from it carries the B bit from its first
	// packet (it once took the daemon's first round after the join, and a
	// loaded CPU let the join carry a fifth of the upload first).
	waitFor(t, 5*time.Second, "the backup interface's endpoint flagged backup before any connection", func() (bool, string) {
		eps, err := w.cli.Endpoints()
		if err != nil {
			return false, err.Error()
		}
		for _, e := range eps {
			if e.Addr == w.h.ClientAddr(2) {
				return e.Flags&pm.FlagBackup != 0, fmt.Sprintf("%q", e.Flags)
			}
		}
		return false, "no endpoint"
	})
	acked := w.upload(t, 2*time.Second, nil)
	if s := share(acked, w.h.ClientAddr(2)); s > 0.1 {
		t.Fatalf("the backup interface carried %.0f%% (%v)", s*100, acked)
	}
	st, err := d.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Policies) != 1 || st.Policies[0].Name != "backup" {
		t.Fatalf("policies %+v, want the backup policy the mode expands into", st.Policies)
	}
}
