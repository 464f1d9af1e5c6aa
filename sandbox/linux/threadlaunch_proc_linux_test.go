// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// hostTasksProgram watches the threads of fledge (argv[1]) and tries every door /proc has
// into each: /proc/PID/task/TID/{mem,environ,fd} and /proc/TID/{mem,environ,fd} (a thread
// id is a /proc entry of its own), mem read at the program's break. It prints one line per
// door that opened and exits, or exits 0 once "stop" appears in its working directory (or
// after 60 s). It writes "ready" first.
const hostTasksProgram = `#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static int hits;
static void door(const char *base) {
	char p[160], l[256];
	snprintf(p, sizeof p, "%s/mem", base);
	int fd = open(p, O_RDONLY);
	if (fd >= 0) { printf("reached %s\n", p); hits++; close(fd); }
	snprintf(p, sizeof p, "%s/environ", base);
	fd = open(p, O_RDONLY);
	if (fd >= 0) { char b[16]; if (read(fd, b, sizeof b) >= 0) { printf("reached %s\n", p); hits++; } close(fd); }
	snprintf(p, sizeof p, "%s/fd", base);
	DIR *d = opendir(p);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.') continue;
			char f[200];
			snprintf(f, sizeof f, "%s/fd/%s", base, e->d_name);
			ssize_t n = readlink(f, l, sizeof l - 1);
			if (n > 0) { l[n] = 0; printf("reached %s: %s\n", f, l); hits++; break; }
		}
		closedir(d);
	}
}
int main(int argc, char **argv) {
	char task[64];
	snprintf(task, sizeof task, "/proc/%s/task", argv[1]);
	close(open("ready", O_WRONLY | O_CREAT, 0644));
	time_t end = time(NULL) + 60;
	for (long round = 0; !hits; round++) {
		if (round % 64 == 0 && (access("stop", F_OK) == 0 || time(NULL) > end)) break;
		DIR *d = opendir(task);
		if (!d) return 3;
		struct dirent *e;
		while ((e = readdir(d)) && !hits) {
			if (e->d_name[0] == '.') continue;
			char base[128];
			snprintf(base, sizeof base, "%s/%s", task, e->d_name);
			door(base);
			snprintf(base, sizeof base, "/proc/%s", e->d_name);
			door(base);
		}
		closedir(d);
	}
	fflush(stdout);
	return 0;
}
`

// TestLaunchThreadProcDoorsShut: a launch thread shares fledge's memory and holds a copy of
// its fd table (unshare(CLONE_FILES)); it takes the command's uid and groups, and lives a
// moment past the command's start. A command that sees fledge's threads (no pid
// namespace) and that Landlock's ptrace scoping does not hold back (Landlock absent), uid 0
// without capabilities, watches fledge's threads while 100 other commands are launched:
// no thread's mem, environ or fds opens to it (the launch thread keeps its capabilities
// until the child's execve, so the command's are never a superset).
func TestLaunchThreadProcDoorsShut(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLandlock: true, DisablePidNS: true})
	e := newEnv(t)
	bin := buildStatic(t, e.project, "tasks", hostTasksProgram)
	spec := e.spec("")
	spec.Path, spec.Args = bin, []string{"tasks", strconv.Itoa(os.Getpid())}
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
	launched := 0
loop:
	for range 100 {
		select {
		case <-done:
			break loop
		default:
		}
		res, o, eo := run(t, sb, e.spec(`true`))
		require.Equal(t, 0, res.ExitCode, "%s%s", o, eo)
		launched++
	}
	require.NoError(t, os.WriteFile(filepath.Join(e.project, "stop"), nil, 0o644))
	select {
	case <-done:
	case <-time.After(waitBound):
		_ = p.Kill()
		t.Fatal("the command did not stop")
	}
	require.Equal(t, 0, code, "the watching command failed: %s%s", out.String(), errOut.String())
	t.Logf("%d commands launched beside it", launched)
	assert.Empty(t, strings.TrimSpace(out.String()), "a command reached a thread of fledge through /proc")
}
