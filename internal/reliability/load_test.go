package reliability

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// loadLinks: 1 initial subflow and one per endpoint of the 8 others.
const loadLinks = 9

// TestLoadSubflows grows the number of MPTCP connections the daemon
// observes at its 100 ms interval (each with 9 subflows) through 10, 100,
// 1 000 and 10 000 subflows and measures at each level the daemon's CPU,
// memory and the duration of its rounds (sample, decide, act). Nothing is
// asserted on the figures: they are the record. The namespaces have small
// TCP hashes of their own (tcp_child_ehash_entries) so the samples
// reflect the work, not the host's hash.
func TestLoadSubflows(t *testing.T) {
	testutil.RequireLab(t)
	start := time.Now()
	levels := pick([]int{10, 100}, []int{10, 100, 1000, 10000})
	window := pick(2*time.Second, 5*time.Second)
	w := newSmallHashWorld(t, loadLinks, 16384)
	for _, ns := range []string{w.h.Client, w.h.Server} {
		// The default SYN backlog and orphan limits are for one host's
		// traffic; 10 000 joins in a burst are not.
		netnsutil.Sysctl(ns, "net.core.somaxconn", "65535")
		netnsutil.Sysctl(ns, "net.ipv4.tcp_max_syn_backlog", "65535")
	}
	srv := holdServer(t, w)
	d := testutil.StartDaemonWith(t, w.h.Client, "interval: 100ms\npolicies: [{name: prefer, paths: [veth1]}]\n", "--metrics", "127.0.0.1:9900")
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	type level struct {
		Want, Conns, Subflows  int
		CPUPct, RSSMiB         float64
		RSSPreScrapeMiB        float64
		RoundMeanMs, RoundP99  float64
		UsPerSubflow, Settled  float64
		ReactionP99Ms, Rounds  float64
		Events, BackupActions  float64
		ByEvent                map[string]float64
		SampleErrors, Refused  float64
		DaemonAnswers, Backups int
	}
	var out []level
	var errs []string
	for _, want := range levels {
		nconn := (want + loadLinks - 1) / loadLinks
		t0 := time.Now()
		for len(conns) < nconn {
			c, err := dialHold(w)
			if err != nil {
				errs = append(errs, fmt.Sprintf("connection %d: %v", len(conns)+1, err))
				break
			}
			conns = append(conns, c)
		}
		// Wait for the subflows to join (as the daemon counts them).
		target := nconn * loadLinks
		var have float64
		waitUntil(60*time.Second, func() bool {
			have = metric(t, metricsText(t, w.h.Client), "mpsteer_subflows", "state=established")
			return int(have) >= target
		})
		settled := time.Since(t0)
		// The ramp-up is over: ten sampled rounds in a row without a
		// path-manager event.
		quiet := func() (events, rounds float64) {
			m := metricsText(t, w.h.Client)
			e, _ := Metric(m, "mpsteer_pm_events_total")
			return e, metric(t, m, "mpsteer_round_duration_seconds_count")
		}
		e0, r0 := quiet()
		waitUntil(60*time.Second, func() bool {
			e, r := quiet()
			if e != e0 {
				e0, r0 = e, r
			}
			return r-r0 >= 10
		})
		if Soak() {
			// Under soak, what the ramp-up left behind ages out too
			// (prefer keeps 5 s of RTT samples per subflow) before the
			// steady state is measured.
			<-time.After(6 * time.Second)
		}
		m0 := metricsText(t, w.h.Client)
		p0, _ := ReadProc(pid(d))
		w0 := time.Now()
		<-time.After(window) // the measurement window
		// RSS before the scrape too: building a scrape's per-subflow series
		// (9 per subflow) takes memory of its own.
		pre, _ := ReadProc(pid(d))
		m1 := metricsText(t, w.h.Client)
		p1, _ := ReadProc(pid(d))
		el := time.Since(w0)
		cnt := metric(t, m1, "mpsteer_round_duration_seconds_count") - metric(t, m0, "mpsteer_round_duration_seconds_count")
		sum := metric(t, m1, "mpsteer_round_duration_seconds_sum") - metric(t, m0, "mpsteer_round_duration_seconds_sum")
		sfs := metric(t, m1, "mpsteer_subflows", "state=established")
		ev0, _ := Metric(m0, "mpsteer_pm_events_total")
		ev1, _ := Metric(m1, "mpsteer_pm_events_total")
		byEvent := map[string]float64{}
		for _, e := range []string{"created", "established", "closed", "announced", "removed", "sub_established", "sub_closed", "sub_priority"} {
			a, _ := Metric(m0, "mpsteer_pm_events_total", "event="+e)
			b, _ := Metric(m1, "mpsteer_pm_events_total", "event="+e)
			if b > a {
				byEvent[e] = b - a
			}
		}
		ep0, _ := Metric(m0, "mpsteer_policy_actions_total", "kind=backup")
		ep1, _ := Metric(m1, "mpsteer_policy_actions_total", "kind=backup")
		refused, _ := Metric(m1, "mpsteer_policy_actions_total", "kind=backup", "policy=prefer", "result=refused")
		_, stErr := d.Client.Status()
		answers := 0
		if stErr == nil {
			answers = 1
		}
		l := level{Want: want, Conns: len(conns), Subflows: int(sfs),
			CPUPct:          100 * float64(p1.CPUTicks-p0.CPUTicks) / ClockTick / el.Seconds(),
			RSSMiB:          float64(p1.RSSKiB) / 1024,
			RSSPreScrapeMiB: float64(pre.RSSKiB) / 1024,
			Rounds:          cnt,
			RoundMeanMs:     1000 * sum / math.Max(cnt, 1),
			RoundP99:        1000 * histQuantile(m0, m1, "mpsteer_round_duration_seconds", 0.99),
			Settled:         settled.Seconds(),
			ReactionP99Ms:   1000 * summaryQuantile(m1, "mpsteer_reaction_latency_seconds", "0.99"),
			SampleErrors:    metric(t, m1, "mpsteer_sample_errors_total"),
			Refused:         refused,
			DaemonAnswers:   answers,
			Events:          ev1 - ev0,
			ByEvent:         byEvent,
			BackupActions:   ep1 - ep0,
		}
		l.UsPerSubflow = 1000 * l.RoundMeanMs / math.Max(sfs, 1)
		t.Logf("level %d: %+v", want, l)
		out = append(out, l)
		if int(sfs) < target {
			errs = append(errs, fmt.Sprintf("level %d: %d of %d subflows established", want, int(sfs), target))
		}
		if stErr != nil {
			errs = append(errs, fmt.Sprintf("level %d: status: %v", want, stErr))
		}
	}
	srv.stop()
	lost := lostText(errs)
	if len(errs) > 0 {
		t.Error(lost)
	}
	measured := map[string]any{}
	for _, l := range out {
		measured[fmt.Sprintf("%05d_subflows", l.Want)] = map[string]any{
			"conns": l.Conns, "subflows": l.Subflows, "cpu_pct_one_core": round2(l.CPUPct), "rss_mib": round2(l.RSSMiB), "rss_mib_before_scrape": round2(l.RSSPreScrapeMiB),
			"round_mean_ms": round2(l.RoundMeanMs), "round_p99_ms_le": round2(l.RoundP99), "us_per_subflow": round2(l.UsPerSubflow),
			"rounds": l.Rounds, "sample_errors": l.SampleErrors, "refused_actions": l.Refused, "ramp_up_s": round2(l.Settled),
			"pm_events_in_window": l.Events, "pm_events_by_kind": fmt.Sprint(l.ByEvent), "backup_actions_in_window": l.BackupActions,
		}
	}
	survived := 0
	for _, l := range out {
		if l.DaemonAnswers == 1 && l.SampleErrors == 0 {
			survived++
		}
	}
	record(t, Record{Case: "load-subflows", Fault: fmt.Sprintf("MPTCP connections with 9 subflows each, observed at 100 ms (prefer policy, endpoint mode): levels %v subflows, measured over %v each; namespaces with their own 16384-bucket TCP hash", levels, window),
		Tried: len(out), Survived: survived, Lost: lost, Measured: measured}, start)
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// holdServer accepts MPTCP connections in the server namespace, writes one
// byte on each (so that both ends are fully established) and holds them.
type holder struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func holdServer(t *testing.T, w *world) *holder {
	t.Helper()
	h := &holder{}
	if err := netnsutil.Do(w.h.Server, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		h.ln, err = lc.Listen(context.Background(), "tcp", "0.0.0.0:5301")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := h.ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte{1})
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *holder) stop() {
	h.ln.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

func dialHold(w *world) (net.Conn, error) {
	var c net.Conn
	err := netnsutil.Do(w.h.Client, func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		d.SetMultipathTCP(true)
		var err error
		c, err = d.Dial("tcp", netip.AddrPortFrom(w.h.ServerAddr(1), 5301).String())
		return err
	})
	if err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// histQuantile estimates a quantile of a Prometheus histogram's
// observations between two scrapes: the upper bound of the bucket it
// falls in.
func histQuantile(m0, m1, name string, q float64) float64 {
	buckets := func(m string) map[float64]float64 {
		out := map[float64]float64{}
		for _, l := range strings.Split(m, "\n") {
			if !strings.HasPrefix(l, name+`_bucket{le="`) {
				continue
			}
			rest := l[len(name+`_bucket{le="`):]
			i := strings.IndexByte(rest, '"')
			le, err := strconv.ParseFloat(rest[:i], 64)
			if err != nil {
				le = math.Inf(1)
			}
			v, _ := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
			out[le] = v
		}
		return out
	}
	b0, b1 := buckets(m0), buckets(m1)
	var les []float64
	for le := range b1 {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return 0
	}
	total := b1[les[len(les)-1]] - b0[les[len(les)-1]]
	for _, le := range les {
		if b1[le]-b0[le] >= q*total {
			return le
		}
	}
	return les[len(les)-1]
}

// summaryQuantile is a summary's quantile q (e.g. "0.99") in Prometheus
// text; 0 when it has none or no observation.
func summaryQuantile(m, name, q string) float64 {
	want, err := strconv.ParseFloat(q, 64)
	if err != nil {
		return 0
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(m))
	if err != nil || fams[name] == nil {
		return 0
	}
	for _, s := range fams[name].Metric {
		if s.Summary == nil {
			continue
		}
		for _, qv := range s.Summary.Quantile {
			if qv.GetQuantile() == want && !math.IsNaN(qv.GetValue()) {
				return qv.GetValue()
			}
		}
	}
	return 0
}
