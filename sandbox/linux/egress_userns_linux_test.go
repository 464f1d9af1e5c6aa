// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/netstack"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// Network by destination from an unprivileged fledge: the helper runs as uid 65534
// (prepareNobody), builds its Sandbox as an ordinary user's fledge does and runs real
// clients (curl, python3 urllib, node fetch) as a plugin and as its commands, all of one
// plugin session's grant "localhost:OK". Each run's stub builds the run's namespace in the
// user namespace it is born in and hands it to the session's engine.

// egressClients are the scenarios: name -> program and arguments (OK, BAD are the ports).
func egressClients(ok, bad string) map[string][]string {
	py := `import socket, sys, urllib.request
for port in sys.argv[1:3]:
    try:
        print(port, urllib.request.urlopen("http://localhost:%s/" % port, timeout=5).read().decode())
    except Exception as e:
        print(port, "refused", type(e).__name__)
try:
    socket.getaddrinfo("not-granted.example", 80)
    print("dns resolved")
except Exception as e:
    print("dns refused")
try:
    socket.create_connection(("10.1.2.3", 80), timeout=5)
    print("ip connected")
except Exception as e:
    print("ip refused")
for label, a in (("icmp-ping", (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)),
                 ("icmp-raw", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
                 ("packet", (socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)))):
    try:
        socket.socket(*a); print(label, "created")
    except OSError:
        print(label, "refused")
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
    s.settimeout(5)
    s.connect(("192.0.2.7", 80))
    print("mptcp connected")
except OSError:
    print("mptcp refused")
`
	js := `(async () => {
  for (const port of process.argv.slice(1, 3)) {
    try { const r = await fetch("http://localhost:" + port + "/"); console.log(port, await r.text()); }
    catch (e) { console.log(port, "refused"); }
  }
})()`
	curl := `for p in "$1" "$2"; do printf '%s ' "$p"; curl -sS --max-time 5 "http://localhost:$p/" 2>/dev/null || printf refused; echo; done`
	return map[string][]string{
		"curl":   {"/bin/sh", "sh", "-c", curl, "sh", ok, bad},
		"python": {"/usr/bin/python3", "python3", "-c", py, ok, bad},
		"node":   {"/usr/bin/node", "node", "-e", js, ok, bad},
	}
}

// runEgressUserNSHelper is the unprivileged host: argv[1] the tree, argv[2] and argv[3]
// the granted and the other port. It prints one nsRun per run, then "report" (the doctor
// line) and "records" (the session's records, JSON in Stdout).
func runEgressUserNSHelper(root, ok, bad string) int {
	e := newNSEnv(root)
	out := json.NewEncoder(os.Stdout)
	sb, err := New(Options{})
	if err != nil {
		fmt.Println("new:", err)
		return 1
	}
	defer sb.Close()
	pol, err := egress.NewPolicy(false, []string{"localhost:" + ok})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	eg := egress.NewSession(pol, egress.Limits{})
	var mu sync.Mutex
	var recs []egress.Event
	eg.SetRecord(func(ev egress.Event) { mu.Lock(); recs = append(recs, ev); mu.Unlock() })
	for name, argv := range egressClients(ok, bad) {
		if _, err := os.Stat(argv[0]); err != nil {
			continue
		}
		for _, kind := range []sandbox.Kind{sandbox.KindPlugin, sandbox.KindExec} {
			d, err := os.Open(e.project)
			if err != nil {
				fmt.Println(err)
				return 1
			}
			var so, se bytes.Buffer
			spec := &sandbox.Spec{Kind: kind, Name: "egress", Path: argv[0], Args: argv[1:], Dir: d, DirPath: e.project,
				Env:    []string{"PATH=/usr/bin:/bin", "HOME=" + e.home},
				Access: sandbox.Access{ReadWrite: []string{e.project}, ReadExec: SystemReadExec},
				Limits: sandbox.Limits{Timeout: 60 * time.Second}, Egress: eg, Stdout: &so, Stderr: &se}
			r := nsRun{Name: name + "/" + string(kind)}
			p, err := sb.Start(context.Background(), spec)
			if err == nil {
				res, werr := p.Wait()
				if werr != nil {
					r.Err = werr.Error()
				} else {
					r.Exit, r.Degraded = res.ExitCode, res.Mode.Degraded
				}
			} else {
				r.Err = err.Error()
			}
			d.Close()
			r.Stdout, r.Stderr = so.String(), se.String()
			_ = out.Encode(r)
		}
	}
	_ = eg.Close() // flushes what the limiter held back
	_ = out.Encode(nsRun{Name: "report", Stdout: sb.Report().NetworkEgress})
	mu.Lock()
	b, _ := json.Marshal(recs)
	mu.Unlock()
	_ = out.Encode(nsRun{Name: "records", Stdout: string(b)})
	return 0
}

func TestEgressUnprivileged(t *testing.T) {
	testutil.SkipUnlessSupported(t, userNamespaces(), "no user namespaces")
	exe, e := prepareNobody(t)
	var hits [2]atomic.Int64
	port := func(i int) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			fmt.Fprint(w, "answer", i)
		}))
		t.Cleanup(s.Close)
		return s.URL[strings.LastIndex(s.URL, ":")+1:]
	}
	ok, bad := port(0), port(1)
	cmd := exec.Command(exe, e.root, ok, bad)
	cmd.Env = []string{helperEnv + "=egress-userns", "PATH=/usr/bin:/bin"}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	require.NoError(t, err, "helper: %s\n%s", outb, stderr.String())
	runs := map[string]nsRun{}
	dec := json.NewDecoder(bytes.NewReader(outb))
	for {
		var r nsRun
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err, "helper output: %s", outb)
		}
		runs[r.Name] = r
	}
	report := runs["report"].Stdout
	if strings.HasPrefix(report, "none") && (strings.Contains(report, netstack.ErrSetup.Error()) || strings.Contains(report, errEgressNoNetNS.Error())) {
		// The kernel refuses a TUN device or a network namespace in a user namespace.
		testutil.SkipUnlessSupported(t, false, "unprivileged network by destination: "+report)
	}
	assert.Contains(t, report, "unprivileged")
	clients := 0
	for name := range egressClients(ok, bad) {
		for _, kind := range []sandbox.Kind{sandbox.KindPlugin, sandbox.KindExec} {
			r, found := runs[name+"/"+string(kind)]
			if !found {
				continue // the client is not installed
			}
			clients++
			t.Run(name+"/"+string(kind), func(t *testing.T) {
				require.Empty(t, r.Err)
				require.Equal(t, 0, r.Exit, r.Stdout+r.Stderr)
				assert.NotContains(t, strings.Join(r.Degraded, "; "), "network", "the run got its network by destination")
				assert.Contains(t, r.Stdout, ok+" answer0", "the granted destination answers")
				assert.Contains(t, r.Stdout, bad+" refused", "another port of the same host is refused")
				assert.NotContains(t, r.Stdout, "answer1")
				if name == "python" {
					assert.Contains(t, r.Stdout, "dns refused")
					assert.Contains(t, r.Stdout, "ip refused")
					for _, k := range []string{"icmp-ping", "icmp-raw", "packet", "mptcp"} {
						assert.Contains(t, r.Stdout, k+" refused")
					}
				}
			})
		}
	}
	require.NotZero(t, clients)
	assert.Equal(t, int64(clients), hits[0].Load(), "one request per run reached the granted server")
	assert.Zero(t, hits[1].Load(), "nothing reached the other port")

	var recs []egress.Event
	require.NoError(t, json.Unmarshal([]byte(runs["records"].Stdout), &recs))
	var allowed, deniedBad, deniedDNS, deniedIP int
	for _, r := range recs {
		switch {
		case r.Kind == egress.EventConnect && r.Allow && r.Port == mustPort(ok):
			allowed++
		case r.Kind == egress.EventConnect && !r.Allow && r.Port == mustPort(bad):
			deniedBad++
		case r.Kind == egress.EventDNS && !r.Allow:
			deniedDNS++
		case r.Kind == egress.EventConnect && !r.Allow && (r.Address == "10.1.2.3" || r.Address == "192.0.2.7"):
			deniedIP++
		}
	}
	assert.Equal(t, clients, allowed, "%+v", recs)
	assert.Positive(t, deniedDNS, "the refused lookup is recorded: %+v", recs)
	assert.GreaterOrEqual(t, deniedIP, 2, "the refused address (TCP and MPTCP) is recorded: %+v", recs)
	_ = deniedBad // a refused loopback port has no listener in the namespace: the kernel refuses it, no record
}

func mustPort(s string) uint16 {
	var p uint16
	_, _ = fmt.Sscan(s, &p)
	return p
}
