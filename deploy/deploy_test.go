// Package deploy holds what puts mpsteer on hosts and fleets: the systemd
// unit, the default config, the .deb's scripts, the Grafana dashboard and
// the Kubernetes manifests. Its tests check them with the tools that read
// them (systemd-analyze, kubernetes-validate, dpkg-deb) and run the
// packaged daemon the way its unit says.
package deploy

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/api"
	"mpsteer/internal/config"
	"mpsteer/internal/policy"
	"mpsteer/internal/testutil"
)

// unitFor writes the unit as `make install` would, its binary being bin.
func unitFor(t *testing.T, dir, bin string) string {
	t.Helper()
	src, err := os.ReadFile("systemd/mpsteer.service.in")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "mpsteer.service")
	src = bytes.ReplaceAll(src, []byte("@SYSCONFDIR@"), []byte("/etc"))
	if err := os.WriteFile(file, bytes.ReplaceAll(src, []byte("@BINDIR@"), []byte(filepath.Dir(bin))), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// The unit passes systemd-analyze verify (offline: no running systemd
// needed), man pages it names included.
func TestSystemdUnitVerifies(t *testing.T) {
	testutil.RequireTool(t, "systemd-analyze")
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "mpsteer")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	if out, err := exec.Command("cp", testutil.Binary(t), bin).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	man := filepath.Join(dir, "man", "man8")
	if out, err := exec.Command(bin, "man", "--dir", man).CombinedOutput(); err != nil {
		t.Fatalf("mpsteer man: %v: %s", err, out)
	}
	unit := unitFor(t, dir, bin)
	cmd := exec.Command("systemd-analyze", "verify", unit)
	cmd.Env = append(os.Environ(), "MANPATH="+filepath.Join(dir, "man"))
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Exposure (systemd-analyze security, 0 safest to 10): the unit must
	// stay at 4.5 or better (it is 3.7, "OK", with DynamicUser and three
	// capabilities).
	out, err = exec.Command("systemd-analyze", "security", "--offline=true", "--threshold=45", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`Overall exposure level for mpsteer.service: [0-4]\.`).Match(out) {
		t.Fatalf("exposure above 4.x:\n%s", out)
	}
}

// The Kubernetes manifests validate against the Kubernetes schemas (of
// the oldest and newest versions kubernetes-validate ships that the
// DaemonSet's fields exist in), strictly: an unknown field is an error.
func TestKubernetesManifestsValidate(t *testing.T) {
	kv := filepath.Join(testutil.RepoRoot(), ".cache", "venv", "bin", "kubernetes-validate")
	if _, err := os.Stat(kv); err != nil {
		testutil.Unavailable(t, "kubernetes-validate is not installed in .cache/venv (`make deps` installs it)")
	}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) < 3 {
		t.Fatalf("manifests: %v", files)
	}
	for _, v := range []string{"1.30.0", "1.37.0"} {
		args := append([]string{"--strict", "-k", v}, files...)
		out, err := exec.Command(kv, args...).CombinedOutput()
		if err != nil || bytes.Contains(out, []byte("ERROR")) || bytes.Count(out, []byte("passed")) != len(files) {
			t.Fatalf("kubernetes-validate -k %s: %v\n%s", v, err, out)
		}
	}
	// The validator does validate: a field the schema lacks fails.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	ds, _ := os.ReadFile("kubernetes/daemonset.yaml")
	os.WriteFile(bad, bytes.Replace(ds, []byte("hostNetwork: true"), []byte("hostNetwork: true\n      hostNetwrok: true"), 1), 0o644)
	if out, err := exec.Command(kv, "--strict", bad).CombinedOutput(); err == nil {
		t.Fatalf("a misspelt field passed:\n%s", out)
	}
}

// The ConfigMap's config is one the daemon accepts, and the DaemonSet
// asks for the capabilities the daemon checks for, no more.
func TestKubernetesConfigAndCapabilities(t *testing.T) {
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	b, _ := os.ReadFile("kubernetes/configmap.yaml")
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse("configmap.yaml", []byte(cm.Data["mpsteer.yaml"]), policy.Env{}); err != nil {
		t.Fatalf("the ConfigMap's config: %v", err)
	}
	ds, _ := os.ReadFile("kubernetes/daemonset.yaml")
	if !bytes.Contains(ds, []byte("drop: [ALL]")) || !bytes.Contains(ds, []byte("add: [NET_ADMIN, BPF, PERFMON]")) || bytes.Contains(ds, []byte("privileged: true")) {
		t.Fatal("the DaemonSet must drop every capability but NET_ADMIN, BPF and PERFMON, and not be privileged")
	}
	unit, _ := os.ReadFile("systemd/mpsteer.service.in")
	if !bytes.Contains(unit, []byte("AmbientCapabilities=CAP_NET_ADMIN CAP_BPF CAP_PERFMON\n")) {
		t.Fatal("the unit's capabilities differ from the DaemonSet's")
	}
}

// unitFile is what the test reads from the installed unit.
type unitFile map[string]string

func readUnit(t *testing.T, file string) unitFile {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[") {
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		u[k] = v
	}
	return u
}

// notifySocket is systemd's end of sd_notify: every datagram the daemon
// sends.
type notifySocket struct {
	path string
	conn *net.UnixConn
	msgs chan string
}

func newNotifySocket(t *testing.T, dir string) *notifySocket {
	t.Helper()
	path := filepath.Join(dir, "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o777) // the daemon runs as its own user
	n := &notifySocket{path: path, conn: c, msgs: make(chan string, 1000)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, _, err := c.ReadFromUnix(buf)
			if err != nil {
				close(n.msgs)
				return
			}
			n.msgs <- string(buf[:k])
		}
	}()
	t.Cleanup(func() { c.Close() })
	return n
}

// wait returns the first message containing want (others are skipped).
func (n *notifySocket) wait(t *testing.T, want string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case m, ok := <-n.msgs:
			if !ok {
				t.Fatalf("notify socket closed waiting for %q", want)
			}
			if strings.Contains(m, want) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %q from the daemon within %v", want, within)
		}
	}
}

// The .deb, built by `make deb` from this binary, installed into a
// directory (this machine's PID 1 may not be systemd, and the test must
// not touch the host's /usr and /etc), and its daemon run the way its unit
// says inside a lab host: ExecStart with the EnvironmentFile's options,
// as an unprivileged user holding only AmbientCapabilities (DynamicUser),
// no new privileges, Type=notify readiness on a NOTIFY_SOCKET, ExecReload,
// a config edit, the watchdog, and SIGTERM (systemd's stop). What systemd
// would do that the test does not: the unit's sandboxing (ProtectSystem
// and the rest) and RuntimeDirectory=, stood in for by --socket and
// --state-dir in a directory the user owns.
func TestPackagedDaemonRunsAsItsUnitSays(t *testing.T) {
	testutil.RequireLab(t)
	for _, tool := range []string{"make", "dpkg-deb", "setpriv", "nsenter"} {
		testutil.RequireTool(t, tool)
	}
	// Readable by the daemon's user, all the way down.
	work, err := os.MkdirTemp("", "mpsteer-deb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	os.Chmod(work, 0o755)
	build := filepath.Join(work, "build")
	mk := exec.Command("make", "-C", testutil.RepoRoot(), "deb", "BUILD_DEPS=", "BIN="+testutil.Binary(t), "BUILDDIR="+build, "VERSION=0.0.0-test")
	out, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(build, "mpsteer_0.0.0-test_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("packages: %v", debs)
	}
	// The package: its files, conffiles and maintainer scripts.
	out, err = exec.Command("dpkg-deb", "--info", debs[0]).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("Package: mpsteer")) || !bytes.Contains(out, []byte("postinst")) || !bytes.Contains(out, []byte("prerm")) {
		t.Fatalf("dpkg-deb --info: %v\n%s", err, out)
	}
	ctl := filepath.Join(work, "DEBIAN")
	if out, err := exec.Command("dpkg-deb", "--control", debs[0], ctl).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	conf, _ := os.ReadFile(filepath.Join(ctl, "conffiles"))
	if string(conf) != "/etc/default/mpsteer\n/etc/mpsteer/mpsteer.yaml\n" {
		t.Fatalf("conffiles %q", conf)
	}
	root := filepath.Join(work, "root")
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	for _, f := range []string{"usr/bin/mpsteer", "usr/lib/systemd/system/mpsteer.service", "etc/mpsteer/mpsteer.yaml", "etc/default/mpsteer",
		"usr/share/man/man8/mpsteer.8.gz", "usr/share/man/man8/mpsteer-daemon.8.gz", "usr/share/doc/mpsteer/copyright", "usr/share/doc/mpsteer/LICENSE"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("the package lacks /%s", f)
		}
	}
	u := readUnit(t, filepath.Join(root, "usr/lib/systemd/system/mpsteer.service"))
	if u["Type"] != "notify" || u["DynamicUser"] != "yes" || u["Restart"] != "on-failure" || u["ExecReload"] != "/bin/kill -HUP $MAINPID" {
		t.Fatalf("unit %v", u)
	}

	// Run it in a lab host, as the unit would.
	h := testutil.TwoHosts(t, 2)
	defaults := filepath.Join(root, "etc/default/mpsteer")
	os.WriteFile(defaults, []byte("MPSTEER_OPTS=\"--metrics 127.0.0.1:0\"\n"), 0o644) // a free port, from the log
	env := map[string]string{}
	if b, err := os.ReadFile(strings.TrimPrefix(strings.Replace(u["EnvironmentFile"], "/etc/", root+"/etc/", 1), "-")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && !strings.HasPrefix(k, "#") {
				env[k] = strings.Trim(v, `"`)
			}
		}
	}
	var argv []string
	for _, w := range strings.Fields(u["ExecStart"]) {
		switch {
		case strings.HasPrefix(w, "$"):
			argv = append(argv, strings.Fields(env[w[1:]])...)
		case strings.HasPrefix(w, "/"):
			argv = append(argv, filepath.Join(root, w)) // the installed files
		default:
			argv = append(argv, w)
		}
	}
	if len(argv) < 4 || argv[0] != filepath.Join(root, "usr/bin/mpsteer") || argv[1] != "daemon" || !strings.Contains(strings.Join(argv, " "), "--metrics 127.0.0.1:") {
		t.Fatalf("ExecStart as run: %q", argv)
	}
	// RuntimeDirectory=mpsteer, owned by the service's user.
	const uid = 61234 // in systemd's range for DynamicUser
	run := filepath.Join(work, "run-mpsteer")
	os.Mkdir(run, 0o755)
	os.Chown(run, uid, uid)
	socket := filepath.Join(run, "mpsteer.sock")
	argv = append(argv, "--socket", socket, "--state-dir", run)
	capsList := func(key string) string {
		var out []string
		for _, c := range strings.Fields(u[key]) {
			out = append(out, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
		}
		return strings.Join(out, ",")
	}
	ambient, bounding := capsList("AmbientCapabilities"), capsList("CapabilityBoundingSet")
	notify := newNotifySocket(t, work)
	cmdline := append([]string{"--net=" + filepath.Join("/run/netns", h.Client), "setpriv",
		"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid), "--clear-groups", "--no-new-privs",
		"--inh-caps=-all," + ambient, "--ambient-caps=-all," + ambient, "--bounding-set=-all," + bounding}, argv...)
	d := exec.Command("nsenter", cmdline...)
	d.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify.path, "WATCHDOG_USEC=2000000")
	var logb syncBuffer
	d.Stdout, d.Stderr = &logb, &logb
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- d.Wait() }()
	t.Cleanup(func() {
		d.Process.Kill()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", logb.String())
		}
	})

	// Type=notify: ready once it answers.
	ready := notify.wait(t, "READY=1", 15*time.Second)
	if !strings.Contains(ready, "STATUS=") {
		t.Errorf("READY=1 without a STATUS: %q", ready)
	}
	c := api.NewClient(socket)
	st, err := c.Status()
	if err != nil {
		t.Fatalf("status right after READY=1: %v", err)
	}
	if st.PID != d.Process.Pid || st.Config != filepath.Join(root, "etc/mpsteer/mpsteer.yaml") {
		t.Fatalf("status %+v", st)
	}
	// The watchdog is fed (WatchdogSec= sets WATCHDOG_USEC).
	notify.wait(t, "WATCHDOG=1", 3*time.Second)
	// Its metrics, on the address the EnvironmentFile gave.
	url := regexp.MustCompile(`metrics on (http://\S+/metrics)`).FindStringSubmatch(logb.String())
	if url == nil {
		t.Fatalf("the daemon does not say where its metrics are:\n%s", logb.String())
	}
	if body, err := testutil.HTTPGetIn(h.Client, url[1]); err != nil || !strings.Contains(body, `mpsteer_build_info{version="`) {
		t.Fatalf("metrics: %v\n%.2000s", err, body)
	}

	// ExecReload: /bin/kill -HUP $MAINPID.
	reload := strings.Fields(strings.ReplaceAll(u["ExecReload"], "$MAINPID", strconv.Itoa(d.Process.Pid)))
	cfg := filepath.Join(root, "etc/mpsteer/mpsteer.yaml")
	if out, err := exec.Command(reload[0], reload[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("ExecReload %q: %v: %s", reload, err, out)
	}
	notify.wait(t, "RELOADING=1", 5*time.Second)
	notify.wait(t, "READY=1", 5*time.Second)
	// An edit of the config file reloads it the same way: the operator
	// sets the interval and a policy.
	os.WriteFile(cfg, []byte("interval: 50ms\npolicies: [{name: backup, paths: ["+h.Dev(2)+"]}]\n"), 0o644)
	notify.wait(t, "RELOADING=1", 5*time.Second)
	notify.wait(t, "READY=1", 5*time.Second)
	if st, err := c.Status(); err != nil || st.IntervalMs != 50 || len(st.Policies) != 1 || st.Policies[0].Name != "backup" {
		t.Fatalf("after the edit: %+v, %v", st, err)
	}
	// A broken edit: refused, the old config stays, the daemon stays ready.
	os.WriteFile(cfg, []byte("interval: 50\n"), 0o644)
	notify.wait(t, "READY=1", 5*time.Second)
	if st, err := c.Status(); err != nil || st.IntervalMs != 50 || len(st.Policies) != 1 {
		t.Fatalf("after a broken edit: %+v, %v", st, err)
	}
	if !strings.Contains(logb.String(), "config file changed: config not applied, the old one stays") {
		t.Fatalf("the refused edit is not logged:\n%s", logb.String())
	}

	// Stop: SIGTERM, as systemctl stop sends (KillSignal's default).
	d.Process.Signal(syscall.SIGTERM)
	notify.wait(t, "STOPPING=1", 5*time.Second)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the daemon's exit on SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second): // TimeoutStopSec
		t.Fatal("the daemon did not stop within TimeoutStopSec")
	}
	if !strings.Contains(logb.String(), "stopped; changes undone") {
		t.Fatalf("log:\n%s", logb.String())
	}
}

// syncBuffer is a log both the daemon and the test touch.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
