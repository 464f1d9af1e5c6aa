// SPDX-License-Identifier: MIT

package audit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A witness keeps the log's checkpoints where the plugin's user cannot rewrite them: the
// system journal, syslog (which root owns and may ship off the machine), or a program of the
// user's choice (one that signs and uploads, say). The head file beside the log catches a
// careless truncation; only a witness catches a user who rewrites both.

// Witness receives checkpoints. Checkpoint is called under the log's lock after each durable
// append, so it must be quick; Close is called once, when the Log closes.
type Witness interface {
	Checkpoint(log string, h Head) error
	Close() error
}

// ErrWitness wraps every failure to reach a witness, and a witness spec that is not valid.
var ErrWitness = errors.New("audit: witness")

// Witness kinds, as `[audit] witness` names them.
const (
	WitnessJournald = "journald"
	WitnessSyslog   = "syslog"
	WitnessExec     = "exec"
)

// Default sockets of the system journal (native protocol) and of syslog.
const (
	JournaldSocket = "/run/systemd/journal/socket"
	SyslogSocket   = "/dev/log"
)

// CheckpointTag is the syslog identifier of checkpoint messages and the prefix of each
// checkpoint line: `journalctl -t fledge-audit -o cat` prints them.
const CheckpointTag = "fledge-audit"

// witnessTimeout bounds one send to a socket and one run of an exec witness.
const witnessTimeout = 5 * time.Second

// socketTimeout bounds one datagram to a busy journal or syslog daemon: the send runs under
// the log lock, so a stalled daemon must not stall every append for long.
const socketTimeout = 200 * time.Millisecond

// CheckpointLine is the text of a checkpoint: what every witness receives, and what
// ParseCheckpoints reads back from a witness's store.
func CheckpointLine(log string, h Head) string {
	return fmt.Sprintf("%s checkpoint v1 log=%s seq=%d hash=%s time=%s", CheckpointTag,
		strconv.Quote(log), h.Seq, h.Hash, h.Time.UTC().Format(time.RFC3339Nano))
}

// ParseWitness returns the witness spec names: "journald" or "journald:SOCKET" (the
// journal's native protocol), "syslog" or "syslog:SOCKET" (RFC 3164 datagrams to /dev/log,
// as logger(1) sends them), "exec:PROGRAM ARGS..." (PROGRAM, an absolute path, run with the
// last checkpoint line on stdin when the log closes; arguments split on spaces, no shell).
// "" is no witness (nil).
func ParseWitness(spec string) (Witness, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "":
		if spec == "" {
			return nil, nil
		}
	case WitnessJournald:
		if arg == "" {
			arg = JournaldSocket
		}
		return &socketWitness{path: arg, journald: true}, nil
	case WitnessSyslog:
		if arg == "" {
			arg = SyslogSocket
		}
		return &socketWitness{path: arg}, nil
	case WitnessExec:
		argv := strings.Fields(arg)
		if len(argv) == 0 || !strings.HasPrefix(argv[0], "/") {
			return nil, fmt.Errorf("%w: %q: exec needs an absolute program path (exec:/path/to/program args)", ErrWitness, spec)
		}
		return &execWitness{argv: argv}, nil
	}
	return nil, fmt.Errorf("%w: %q: want journald, syslog or exec:/path/to/program", ErrWitness, spec)
}

// socketWitness sends one datagram per checkpoint to a unix datagram socket: the journal's
// native socket or syslog's.
type socketWitness struct {
	path     string
	journald bool
	mu       sync.Mutex
	conn     *net.UnixConn
}

func (w *socketWitness) Checkpoint(log string, h Head) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := w.message(log, h)
	for attempt := 0; attempt < 2; attempt++ {
		if w.conn == nil {
			c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: w.path, Net: "unixgram"})
			if err != nil {
				return fmt.Errorf("%w: %s: %w", ErrWitness, w.path, err)
			}
			w.conn = c
		}
		_ = w.conn.SetWriteDeadline(time.Now().Add(socketTimeout))
		if _, err := w.conn.Write(msg); err != nil {
			// The daemon may have restarted: dial again once.
			w.conn.Close()
			w.conn = nil
			if attempt == 1 {
				return fmt.Errorf("%w: %s: %w", ErrWitness, w.path, err)
			}
			continue
		}
		return nil
	}
	return nil
}

func (w *socketWitness) message(log string, h Head) []byte {
	line := CheckpointLine(log, h)
	if w.journald {
		// Native journal protocol: KEY=value lines; no value here holds a newline (the log
		// path is quoted).
		var b bytes.Buffer
		fmt.Fprintf(&b, "MESSAGE=%s\nSYSLOG_IDENTIFIER=%s\nPRIORITY=6\nFLEDGE_AUDIT_LOG=%s\nFLEDGE_AUDIT_SEQ=%d\nFLEDGE_AUDIT_HASH=%s\n",
			line, CheckpointTag, strconv.Quote(log), h.Seq, h.Hash)
		return b.Bytes()
	}
	// RFC 3164 as logger(1) sends it to /dev/log: facility user (1), severity info (6).
	return []byte(fmt.Sprintf("<14>%s %s[%d]: %s", time.Now().Format(time.Stamp), CheckpointTag, os.Getpid(), line))
}

func (w *socketWitness) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		err := w.conn.Close()
		w.conn = nil
		return err
	}
	return nil
}

// execWitness runs a program once, when the log closes, with the last checkpoint: a fork
// and exec per append would cost more than the append.
type execWitness struct {
	argv []string
	mu   sync.Mutex
	last string
}

func (w *execWitness) Checkpoint(log string, h Head) error {
	w.mu.Lock()
	w.last = CheckpointLine(log, h)
	w.mu.Unlock()
	return nil
}

func (w *execWitness) Close() error {
	w.mu.Lock()
	line := w.last
	w.last = ""
	w.mu.Unlock()
	if line == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), witnessTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.argv[0], w.argv[1:]...)
	cmd.Stdin = strings.NewReader(line + "\n")
	var out limitedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s: %w: %s", ErrWitness, w.argv[0], err, strings.TrimSpace(out.String()))
	}
	return nil
}

// limitedBuffer keeps the first 4 KiB written to it (a witness program's error message).
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := 4096 - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// checkpoint hands h to the witness, if any.
func (l *Log) checkpoint(h Head) {
	if l.opts.Witness == nil {
		return
	}
	if err := l.opts.Witness.Checkpoint(l.path, h); err != nil {
		l.witnessFailed(err)
	}
}

// witnessFailed reports the first head or witness failure of this Log.
func (l *Log) witnessFailed(err error) {
	if l.witnessErr || l.opts.WitnessError == nil {
		return
	}
	l.witnessErr = true
	l.opts.WitnessError(err)
}

// maxCheckpointLines bounds the lines ParseCheckpoints reads.
const maxCheckpointLines = 10_000_000

// ParseCheckpoints reads a witness's store (journalctl output, a syslog file, a file the
// exec witness appends to: any text with checkpoint lines somewhere in its lines) and
// returns the newest checkpoint (highest seq) of the log at path; nil when there is none.
// Lines are bounded by MaxLineBytes; other lines are skipped.
func ParseCheckpoints(r io.Reader, path string) (*Head, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	var best *Head
	for n := 0; sc.Scan(); n++ {
		if n >= maxCheckpointLines {
			return nil, fmt.Errorf("%w: more than %d lines of checkpoints", ErrWitness, maxCheckpointLines)
		}
		h, log, ok := parseCheckpointLine(sc.Text())
		if ok && log == path && (best == nil || h.Seq > best.Seq) {
			best = &h
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: read checkpoints: %w", ErrWitness, err)
	}
	return best, nil
}

func parseCheckpointLine(s string) (Head, string, bool) {
	_, rest, ok := strings.Cut(s, CheckpointTag+" checkpoint v1 log=")
	if !ok {
		return Head{}, "", false
	}
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return Head{}, "", false
	}
	log, _ := strconv.Unquote(q)
	var h Head
	for _, f := range strings.Fields(rest[len(q):]) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "seq":
			if h.Seq, err = strconv.ParseUint(v, 10, 64); err != nil {
				return Head{}, "", false
			}
		case "hash":
			h.Hash = v
		case "time":
			if h.Time, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return Head{}, "", false
			}
		}
	}
	if h.Seq == 0 || len(h.Hash) != len(ZeroHash) {
		return Head{}, "", false
	}
	return h, log, true
}

// WarnWitness returns an Options.WitnessError that tells the user on w: the record was
// written, only its checkpoint is missing from the head or the witness.
func WarnWitness(w io.Writer) func(error) {
	return func(err error) {
		fmt.Fprintf(w, "fledge: warning: %v (the audit record was written; the checkpoint did not reach the head or the witness)\n", err)
	}
}
