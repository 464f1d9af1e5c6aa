// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// foreignUserNSProgram watches the host's newest pids (ns_last_pid and the next few) for a
// process in another user namespace than its own, and for each it finds tries the doors a
// uid 0 without capabilities might have into it: /proc/PID/mem, its fds (readlink and
// open), environ. It prints one line per door that opened and exits, or exits 0 once the
// file "stop" appears in its working directory (or after 60 s). It writes "ready" first.
const foreignUserNSProgram = `#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static char self[128];
static int hits;
static void try(int pid) {
	char p[64], ns[128], l[256];
	snprintf(p, sizeof p, "/proc/%d/ns/user", pid);
	ssize_t n = readlink(p, ns, sizeof ns - 1);
	if (n <= 0) return;
	ns[n] = 0;
	if (!strcmp(ns, self)) return;
	snprintf(p, sizeof p, "/proc/%d/mem", pid);
	int fd = open(p, O_RDONLY);
	if (fd >= 0) { printf("reached mem of %d (%s)\n", pid, ns); hits++; close(fd); }
	snprintf(p, sizeof p, "/proc/%d/environ", pid);
	fd = open(p, O_RDONLY);
	if (fd >= 0) { char b[64]; if (read(fd, b, sizeof b) >= 0) { printf("reached environ of %d\n", pid); hits++; } close(fd); }
	snprintf(p, sizeof p, "/proc/%d/fd", pid);
	DIR *d = opendir(p);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.') continue;
			char f[96];
			snprintf(f, sizeof f, "/proc/%d/fd/%s", pid, e->d_name);
			n = readlink(f, l, sizeof l - 1);
			if (n > 0) { l[n] = 0; printf("reached fd %s of %d: %s\n", e->d_name, pid, l); hits++; }
			int o = open(f, O_RDONLY);
			if (o >= 0) { printf("opened fd %s of %d\n", e->d_name, pid); hits++; close(o); break; }
		}
		closedir(d);
	}
}
int main(void) {
	ssize_t n = readlink("/proc/self/ns/user", self, sizeof self - 1);
	if (n <= 0) return 2;
	self[n] = 0;
	close(open("ready", O_WRONLY | O_CREAT, 0644));
	time_t end = time(NULL) + 60;
	for (long round = 0; !hits; round++) {
		if (round % 256 == 0 && (access("stop", F_OK) == 0 || time(NULL) > end)) break;
		char b[32] = {0};
		int fd = open("/proc/sys/kernel/ns_last_pid", O_RDONLY);
		if (fd < 0) return 3;
		read(fd, b, sizeof b - 1);
		close(fd);
		int last = atoi(b);
		for (int pid = last - 2; pid <= last + 6; pid++) if (pid > 1) try(pid);
	}
	fflush(stdout);
	return 0;
}
`

// watchOutput is a watching command's output: written by its run while the test reads it.
type watchOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *watchOutput) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *watchOutput) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestIDMapChildUnreachableWithoutLandlock: the idmapping user namespace is made by a child
// of fledge that shares fledge's memory (kernel.ForkUserNS) and, until it is killed, a copy
// of fledge's fds. Its namespace is owned by fledge's uid, and the owner of a user namespace
// holds every capability in it: a command that is uid 0 without capabilities, seeing the
// host's pids (no pid namespace) and not held back by Landlock's ptrace scoping (Landlock
// absent), must still not open that child's mem, environ or fds while 2000 namespaces are
// made beside it.
func TestIDMapChildUnreachableWithoutLandlock(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "the idmapping namespace is made by a root fledge")
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLandlock: true, DisablePidNS: true})
	e := newEnv(t)
	bin := buildStatic(t, e.project, "u", foreignUserNSProgram)
	spec := e.spec("")
	spec.Path, spec.Args = bin, []string{"u"}
	out := &watchOutput{}
	errOut := &watchOutput{}
	spec.Stdout, spec.Stderr = out, errOut
	p, err := sb.Start(context.Background(), spec)
	require.NoError(t, err)
	done := make(chan struct{})
	code := -1
	go func() {
		defer close(done)
		if r, err := p.Wait(); err == nil {
			code = r.ExitCode
		}
	}()
	deadline := time.Now().Add(waitBound)
	for {
		if _, err := os.Stat(filepath.Join(e.project, "ready")); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "the command never started: %s", errOut.String())
		time.Sleep(5 * time.Millisecond)
	}
	made := 0
loop:
	for range 2000 {
		select {
		case <-done:
			break loop
		default:
		}
		fd, err := newHideRootNS()
		require.NoError(t, err)
		unix.Close(fd)
		made++
	}
	require.NoError(t, os.WriteFile(filepath.Join(e.project, "stop"), nil, 0o644))
	select {
	case <-done:
	case <-time.After(waitBound):
		_ = p.Kill()
		t.Fatal("the command did not stop")
	}
	require.Equal(t, 0, code, "the watching command failed: %s%s", out.String(), errOut.String())
	t.Logf("%d namespaces made", made)
	assert.Empty(t, strings.TrimSpace(out.String()), "a command reached the idmapping child (fledge's memory and fds)")
}
