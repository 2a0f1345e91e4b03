package reliability

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/testutil"
)

// TestAPIConcurrentClients: 100 clients ask for status at once, over and
// over, while the daemon steers a transfer.
func TestAPIConcurrentClients(t *testing.T) {
	testutil.RequireLab(t)
	start := time.Now()
	clients, each := 100, pick(5, 50)
	w := newWorld(t, 2, false)
	d := testutil.StartDaemon(t, w.h.Client, "interval: 100ms\npolicies: [{name: prefer, paths: [veth1]}]\n")
	tr := startTransfer(t, w, 20e6)
	steering(t, d, tr, 2)
	before, _ := ReadProc(pid(d))
	var mu sync.Mutex
	var lat []time.Duration
	var errs []string
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := api.NewClient(d.Socket)
			defer c.CloseIdleConnections()
			for j := 0; j < each; j++ {
				t0 := time.Now()
				st, err := c.Status()
				el := time.Since(t0)
				mu.Lock()
				if err != nil {
					errs = append(errs, err.Error())
				} else if st.PID == 0 {
					errs = append(errs, "status without a pid")
				}
				lat = append(lat, el)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// The daemon closes the clients' connections after they did: its
	// file descriptors come back (or the record shows that they did not).
	var after Proc
	fdsBack := waitUntil(5*time.Second, func() bool {
		after, _ = ReadProc(pid(d))
		return after.FDs <= before.FDs
	})
	res := tr.stop()
	if !res.intact() {
		errs = append(errs, "transfer: "+res.String())
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	lost := "nothing"
	if len(errs) > 0 {
		lost = fmt.Sprintf("%d of %d requests failed: %s", len(errs), clients*each, errs[0])
		t.Error(lost)
	}
	record(t, Record{Case: "api-concurrent-clients", Fault: fmt.Sprintf("%d API clients at once, %d status requests each, during a transfer", clients, each),
		Tried: clients * each, Survived: clients*each - len(errs), Lost: lost, Measured: map[string]any{
			"p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": q(1),
			"fds_before_after": []int{before.FDs, after.FDs}, "fds_back_within_5s": fdsBack, "rss_kib_before_after": []uint64{before.RSSKiB, after.RSSKiB},
		}}, start)
}

// rawRequest writes raw bytes to the daemon's socket and reads the
// status line of the answer ("" when the daemon closed the connection
// without one).
func rawRequest(t *testing.T, socket string, req []byte) string {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() { c.Write(req) }()
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

func post(path string, body []byte) []byte {
	return append([]byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: mpsteer\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, len(body))), body...)
}

// TestAPIHostileInput sends the daemon's API malformed, oversized and slow
// requests and a request from a user other than root: each is answered
// with an error or cut off, the daemon keeps answering others, and its
// memory and file descriptors come back.
func TestAPIHostileInput(t *testing.T) {
	testutil.RequireLab(t)
	start := time.Now()
	w := newWorld(t, 1, false)
	d := testutil.StartDaemon(t, w.h.Client, "interval: 100ms\npolicies: []\n")
	before, _ := ReadProc(pid(d))
	big := make([]byte, 64<<20)
	for i := range big {
		big[i] = 'x'
	}
	cases := []struct {
		name string
		req  []byte
		want string // prefix of the status line
	}{
		{"garbage", []byte("\x00\x01\x02 hello\r\n\r\n"), "HTTP/1.1 400"},
		{"unknown-method", []byte("BREW /v1/status HTTP/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 405"},
		{"unknown-path", []byte("GET /v1/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"), "HTTP/1.1 "},
		{"truncated-json", post("/v1/policies", []byte(`{"file": "/x.yaml", "config": "pol`)), "HTTP/1.1 400"},
		{"wrong-types", post("/v1/prefer", []byte(`{"targets": 5, "clear": "yes"}`)), "HTTP/1.1 400"},
		{"deep-json", post("/v1/policies", []byte(strings.Repeat("[", 100000))), "HTTP/1.1 400"},
		{"config-bomb", post("/v1/policies", []byte(`{"file": "/x.yaml", "config": "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"}`)), "HTTP/1.1 400"},
		{"chain-nonsense", post("/v1/chains", []byte(`{"dev": "lo", "hook": "sideways", "select": "((((", "act": "explode"}`)), "HTTP/1.1 400"},
		{"oversized-body-64MiB", post("/v1/policies", big), "HTTP/1.1 4"},
		{"oversized-header-2MiB", []byte("GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + string(big[:2<<20]) + "\r\n\r\n"), "HTTP/1.1 431"},
	}
	tried, survived := 0, 0
	var lost []string
	answers := map[string]string{}
	// Twice: what the first round sets up once (the chains' BPF maps, on
	// the first chain request) is not a leak; what the second adds is.
	var fdsAfter []int
	for round := 0; round < 2; round++ {
		for _, c := range cases {
			tried++
			got := rawRequest(t, d.Socket, c.req)
			answers[c.name] = got
			_, err := d.Client.Status()
			if !strings.HasPrefix(got, c.want) || err != nil {
				t.Errorf("%s: answer %q (want %q…), status afterwards: %v", c.name, got, c.want, err)
				lost = append(lost, fmt.Sprintf("%s: %q", c.name, got))
				continue
			}
			survived++
		}
		// Connections the daemon closes after the client did go
		// asynchronously: let the count settle.
		var p Proc
		waitUntil(3*time.Second, func() bool {
			p, _ = ReadProc(pid(d))
			return round == 1 && p.FDs <= fdsAfter[0]
		})
		fdsAfter = append(fdsAfter, p.FDs)
	}
	if fdsAfter[1] > fdsAfter[0] {
		t.Errorf("file descriptors %v after two rounds of hostile requests: a leak", fdsAfter)
		lost = append(lost, fmt.Sprintf("fds grew from %d to %d in the second round", fdsAfter[0], fdsAfter[1]))
	}
	// Slow requests: a header trickled a byte at a time, and a body that
	// never comes. Others are served meanwhile.
	tried++
	var slowMu sync.Mutex
	slowDone := map[string]time.Duration{}
	var wg, started sync.WaitGroup
	for _, kind := range []string{"slow-header", "slow-body"} {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("unix", d.Socket)
			if err != nil {
				started.Done()
				return
			}
			defer c.Close()
			t0 := time.Now()
			c.SetDeadline(time.Now().Add(pick(3*time.Second, 40*time.Second)))
			if kind == "slow-body" {
				c.Write([]byte("POST /v1/policies HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"))
				started.Done()
				io.ReadAll(c) // until the daemon gives up (or our deadline)
			} else {
				for i, b := range []byte("GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow: ") {
					if _, err := c.Write([]byte{b}); err != nil {
						if i == 0 {
							started.Done()
						}
						break
					}
					if i == 0 {
						started.Done()
					}
					// A byte every 100 ms: the slow client's pace.
					time.Sleep(100 * time.Millisecond)
				}
				io.ReadAll(c)
			}
			slowMu.Lock()
			slowDone[kind] = time.Since(t0)
			slowMu.Unlock()
		}()
	}
	// Both slow requests are under way (connected, their first bytes
	// sent): the status requests are served meanwhile.
	started.Wait()
	served := 0
	for i := 0; i < 10; i++ {
		if _, err := d.Client.Status(); err == nil {
			served++
		}
	}
	wg.Wait()
	if served != 10 {
		lost = append(lost, fmt.Sprintf("slow requests: %d of 10 status requests served meanwhile", served))
	} else {
		survived++
	}
	// Not root: refused, with the reason.
	tried++
	os.Chmod(d.Dir, 0o755)
	os.Chmod(d.Socket, 0o666)
	searchable := true
	for dir := filepath.Dir(d.Socket); dir != "/"; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
			searchable = false
		}
	}
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", testutil.Binary(t), "status", "--socket", d.Socket).CombinedOutput()
	if !searchable || err == nil || !strings.Contains(string(out), "answers root only") {
		t.Errorf("status as nobody: %v: %s", err, out)
		lost = append(lost, "non-root: "+string(out))
	} else {
		survived++
	}
	// The slow and the refused connections are closed: the daemon's file
	// descriptors come back to what they were after the second round (or
	// the record shows that they did not).
	var after Proc
	waitUntil(5*time.Second, func() bool {
		after, _ = ReadProc(pid(d))
		return after.FDs <= fdsAfter[1]
	})
	d.Stop(syscall.SIGTERM)
	if !d.Cmd.ProcessState.Success() {
		lost = append(lost, "exit: "+d.Cmd.ProcessState.String())
	}
	l := lostText(lost)
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) }
	record(t, Record{Case: "api-hostile-input", Fault: "API requests: garbage, unknown method and path, truncated/mistyped/deeply nested JSON, a YAML alias bomb, a nonsense chain, a 64 MiB body, a 2 MiB header, slow header and body, a non-root client",
		Tried: tried, Survived: survived, Lost: l, Measured: map[string]any{
			"answers":              fmt.Sprint(answers),
			"rss_kib_before_after": []uint64{before.RSSKiB, after.RSSKiB},
			"fds_before_after":     []int{before.FDs, after.FDs},
			"fds_after_round_1_2":  fdsAfter,
			"slow_header_cut_ms":   ms(slowDone["slow-header"]),
			"slow_body_cut_ms":     ms(slowDone["slow-body"]),
		}}, start)
	_ = http.StatusOK
}
