package runner_test

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

const short = `
name: short
paths:
  - {name: a, rate: 20mbit, delay: 5ms}
  - {name: b, rate: 20mbit, delay: 5ms}
traffic:
  - {type: bulk, duration: 3s}
  - {type: flows, sizes: [20KiB, 200KiB], count: 5, interval: 200ms, start: 500ms}
events:
  - {at: 1500ms, path: b, set: {rate: 5mbit}}
variants: [tcp, mptcp]
`

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// labRun runs `mpsteer lab run` once on a scenario given as YAML, in
// worlds named after tag, and returns its output directory and the
// worlds' name.
func labRun(t *testing.T, tag, scenarioYAML string) (out, name string) {
	t.Helper()
	dir := t.TempDir()
	file := writeFile(t, dir, tag+".yaml", scenarioYAML)
	out = filepath.Join(dir, "out")
	name = fmt.Sprintf("t%d-%s", os.Getpid()%100000, tag)
	b, err := exec.Command(testutil.Binary(t), "lab", "run", file, "--out", out, "--name", name).CombinedOutput()
	if err != nil {
		t.Fatalf("lab run: %v\n%s", err, b)
	}
	return out, name
}

func TestLabRunWritesResults(t *testing.T) {
	testutil.RequireLab(t)
	dir := t.TempDir()
	file := writeFile(t, dir, "short.yaml", short)
	out := filepath.Join(dir, "out")
	name := fmt.Sprintf("t%d-run", os.Getpid()%100000)
	cmd := exec.Command(testutil.Binary(t), "lab", "run", file, "--out", out, "--name", name)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lab run: %v\n%s", err, b)
	}
	for _, v := range []string{"tcp", "mptcp"} {
		sum, err := report.ReadSummary(filepath.Join(out, v, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		// 3 s at 20 mbit (tcp) or 2×20 mbit with one path cut to 5 mbit.
		if sum.GoodputMbit < 10 || sum.GoodputMbit > 45 {
			t.Errorf("%s: goodput %.1f Mbit/s is implausible", v, sum.GoodputMbit)
		}
		if sum.CC["client"] == "" || sum.Flows == nil || sum.Flows.Count != 5 || sum.Flows.Failed != 0 {
			t.Errorf("%s: summary %+v", v, sum)
		}
		if v == "mptcp" && (!sum.MPTCPUsed || sum.Paths["a"].Bytes == 0 || sum.Paths["b"].Bytes == 0) {
			t.Errorf("mptcp: used=%v paths=%+v, want bytes on both paths", sum.MPTCPUsed, sum.Paths)
		}
		if v == "tcp" && sum.Paths["b"].Bytes != 0 {
			t.Errorf("tcp variant sent %d bytes on path b", sum.Paths["b"].Bytes)
		}
		// The kernel's own count of the handshakes: one MP_CAPABLE per
		// connection (the bulk's and the flows' 5), and the joins.
		if mc := sum.MPTCPCounters; v == "mptcp" && (mc["client"]["MPCapableSYNTX"] < 6 || mc["server"]["MPJoinAckRx"] == 0) ||
			v == "tcp" && mc["client"]["MPCapableSYNTX"] != 0 {
			t.Errorf("%s: mptcp_counters %v", v, mc)
		}
		want := "5mbit" // the event changed path b …
		if v == "tcp" {
			want = "skipped" // … which the tcp variant does not have
		}
		if len(sum.Events) != 1 || sum.Events[0].Error != "" || !strings.Contains(sum.Events[0].Detail, want) {
			t.Errorf("%s: events %+v, want detail %q", v, sum.Events, want)
		}
		rows := readCSV(t, filepath.Join(out, v, "timeseries.csv"))
		if len(rows) < 25 || rows[0][0] != "time_s" || rows[0][1] != "app_goodput_mbit" {
			t.Errorf("%s: timeseries has %d rows, header %v", v, len(rows), rows[0])
		}
		checkPNG(t, filepath.Join(out, v, "goodput.png"))
	}
	checkPNG(t, filepath.Join(out, "compare.png"))
	rep, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil || !strings.Contains(string(rep), "| tcp |") || !strings.Contains(string(rep), "| mptcp |") {
		t.Fatalf("report.md: %v\n%s", err, rep)
	}
	if left, _ := netnsutil.List(world.NSPrefix + name + "-"); len(left) > 0 {
		t.Fatalf("namespaces left after the run: %v", left)
	}
}

func readCSV(t *testing.T, file string) [][]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func checkPNG(t *testing.T, file string) {
	t.Helper()
	if b := testutil.DecodePNG(t, file).Bounds(); b.Dx() < 400 || b.Dy() < 200 {
		t.Fatalf("%s: %v is too small to look at", file, b)
	}
}

func TestCtrlCRemovesTheWorld(t *testing.T) {
	testutil.RequireLab(t)
	dir := t.TempDir()
	file := writeFile(t, dir, "long.yaml", `
paths: [{name: a, rate: 10mbit, delay: 5ms}, {name: b, rate: 10mbit, delay: 5ms}]
traffic: [{type: bulk, duration: 60s}]
variants: [mptcp]
`)
	name := fmt.Sprintf("t%d-int", os.Getpid()%100000)
	cmd := exec.Command(testutil.Binary(t), "lab", "run", file, "--out", filepath.Join(dir, "out"), "--name", name)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { world.DownByName(name) })
	// Wait until traffic flows (a progress line), then press Ctrl-C.
	sc := bufio.NewScanner(stderr)
	started := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), "t= 1.0s") {
			started = true
			break
		}
	}
	if !started {
		t.Fatal("lab run never reported progress")
	}
	cmd.Process.Signal(syscall.SIGINT)
	go func() {
		for sc.Scan() {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("lab run did not stop within 30 s of Ctrl-C")
	}
	if left, _ := netnsutil.List(world.NSPrefix + name + "-"); len(left) > 0 {
		t.Fatalf("namespaces left after Ctrl-C: %v", left)
	}
	if _, err := os.Stat(filepath.Join(world.StateRoot, name)); err == nil {
		t.Fatal("state directory left after Ctrl-C")
	}
}
