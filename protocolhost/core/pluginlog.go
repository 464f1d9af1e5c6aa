// SPDX-License-Identifier: MIT

package core

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fledgehq/fledge/ui"
)

// A server's stderr (an MCP server's, a JSON-RPC 2.0 plugin's behind `fledge tools` and
// `fledge serve`) is no word to the user: a usage banner, a stack trace at close. It goes
// to a bounded log of the plugin's in fledge's state dir (where no plugin is granted
// anything), shown when the server fails, with -v, and by `fledge plugins logs NAME`. A
// fledge-v1 or legacy plugin's stderr is the plugin talking to its user: it passes through.
const (
	// PluginLogDir is the directory of the logs under the state dir.
	PluginLogDir = "plugin-logs"
	// PluginLogCap bounds one log file; past it the file becomes NAME.log.1 (replacing the
	// one before) and a new one starts: at most twice this per plugin on disk.
	PluginLogCap = 256 << 10
	// pluginLogTail is how much of one session's stderr is kept to show when it fails.
	pluginLogTail = 4 << 10
)

// ErrNoStateDir: fledge has no state dir to keep plugin logs in.
var ErrNoStateDir = errors.New("fledge has no state directory")

// PluginLogPaths are the current and the previous log of plugin name.
func (e *Env) PluginLogPaths(name string) (current, previous string, err error) {
	if e.StateDir == "" {
		return "", "", ErrNoStateDir
	}
	p := filepath.Join(e.StateDir, PluginLogDir, name+".log")
	return p, p + ".1", nil
}

// PluginLog is one server session's stderr on its way to its plugin's log. Writes never
// fail to the caller: a log that cannot be written (a full disk) stops, the server's
// stderr is still drained.
type PluginLog struct {
	mu     sync.Mutex
	root   *os.Root
	name   string // the file's name in the log dir
	plugin string
	f      *os.File
	size   int64
	tee    io.Writer
	tail   []byte
	err    error
}

// OpenPluginLog starts a session's entry in plugin name's log; tee, when set, gets every
// byte too (-v: the user asked to see servers' stderr).
func (e *Env) OpenPluginLog(name string, tee io.Writer) *PluginLog {
	l := &PluginLog{name: name + ".log", plugin: name, tee: tee}
	if e.StateDir == "" {
		l.err = ErrNoStateDir
		return l
	}
	dir := filepath.Join(e.StateDir, PluginLogDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		l.err = err
		return l
	}
	// Opened beneath the log dir: no link in it leads a write elsewhere.
	l.root, l.err = os.OpenRoot(dir)
	if l.err == nil {
		l.err = l.open(false)
	}
	if l.err == nil {
		l.write(fmt.Appendf(nil, "--- %s: %s started ---\n", time.Now().UTC().Format(time.RFC3339), name))
	}
	return l
}

func (l *PluginLog) open(fresh bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if fresh {
		flags |= os.O_TRUNC
	}
	f, err := l.root.OpenFile(l.name, flags, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("%s is not a regular file", l.name)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// write appends b, rotating first when the file would pass its cap. Called with mu held.
func (l *PluginLog) write(b []byte) {
	if l.err != nil || len(b) == 0 {
		return
	}
	for len(b) > 0 {
		if l.size >= PluginLogCap {
			l.f.Close()
			if err := l.root.Rename(l.name, l.name+".1"); err != nil {
				l.err = err
				return
			}
			if l.err = l.open(true); l.err != nil {
				return
			}
		}
		n := min(int64(len(b)), PluginLogCap-l.size)
		k, err := l.f.Write(b[:n])
		l.size += int64(k)
		if err != nil {
			l.err = err
			return
		}
		b = b[n:]
	}
}

// Write logs p (and passes it to tee). It always reports success: see PluginLog.
func (l *PluginLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(p)
	l.tail = append(l.tail, p...)
	if over := len(l.tail) - pluginLogTail; over > 0 {
		l.tail = append(l.tail[:0], l.tail[over:]...)
	}
	if l.tee != nil {
		_, _ = l.tee.Write(p)
	}
	return len(p), nil
}

// Tail is the end of what this session wrote (at most 4 KiB), unsanitised: for the
// caller to show through ui.Sanitize when the server failed.
func (l *PluginLog) Tail() string {
	if l == nil { // a run that keeps no log (an install probe)
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.tail)
}

// Err is why the log is not being written (nil: it is).
func (l *PluginLog) Err() error {
	if l == nil { // a run that keeps no log (an install probe)
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close closes the log file.
func (l *PluginLog) Close() error {
	if l == nil { // a run that keeps no log (an install probe)
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	if l.root != nil {
		l.root.Close()
		l.root = nil
	}
	if l.err == nil {
		l.err = os.ErrClosed
	}
	return nil
}

// OpenServerLog is OpenPluginLog for a server's session: w (the user's stderr) gets the
// bytes live only with -v (Env.ServerStderr).
func (e *Env) OpenServerLog(name string, w io.Writer) *PluginLog {
	var tee io.Writer
	if e.ServerStderr {
		tee = w
	}
	return e.OpenPluginLog(name, tee)
}

// ShowTail writes the end of this session's stderr to w, each line sanitised and framed,
// after a line of fledge's naming the whole log: for a server that failed. Nothing when
// it wrote nothing, or when -v showed it live.
func (l *PluginLog) ShowTail(w io.Writer) {
	if l == nil { // a run that keeps no log (an install probe)
		return
	}
	l.mu.Lock()
	tail, live := strings.TrimRight(string(l.tail), "\n"), l.tee != nil
	l.mu.Unlock()
	if tail == "" || live || w == nil {
		return
	}
	where := "'fledge plugins logs " + l.plugin + "' shows all of it"
	if l.Err() != nil {
		where = "its log could not be written: " + l.Err().Error()
	}
	_ = ui.HostLine(w, fmt.Sprintf("fledge: plugin %s failed; the end of its stderr (%s):", l.plugin, where))
	lines := strings.Split(tail, "\n")
	if len(lines) > pluginLogTailLines {
		lines = lines[len(lines)-pluginLogTailLines:]
	}
	for _, s := range lines {
		_ = ui.HostLine(w, ui.FramePrefix+ui.PlainText(strings.TrimRight(s, "\r")))
	}
}

// pluginLogTailLines bounds the lines ShowTail prints.
const pluginLogTailLines = 20
