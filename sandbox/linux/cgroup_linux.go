// SPDX-License-Identifier: MIT

package linux

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
)

// Only the root cgroups package is used (mode detection, /proc/self/cgroup parsing): its
// cgroup1/cgroup2 managers pull systemd/dbus into every binary (and so into the stub's
// start-up) and create groups in every hierarchy; a run needs a handful of file writes.

// Cgroup modes as reported in Mode.Cgroup / Report.CgroupMode.
const (
	CgroupV2     = "v2"
	CgroupHybrid = "hybrid"
	CgroupV1     = "v1"
	CgroupNone   = "none"
)

// Tree-kill methods (Mode.TreeKill).
const (
	KillCgroup  = "cgroup.kill"
	KillFreezer = "freezer"
	KillPgroup  = "pgroup"
)

const (
	cgroupRoot = "/sys/fs/cgroup"
	emptyWait  = 5 * time.Second // bound on waiting for a killed cgroup to empty
	// freezeWait bounds one freeze of a v1 group. Past it the kill goes on without the
	// freezer (repeated SIGKILL passes until the group is empty), so it bounds a delay,
	// never decides whether the tree dies.
	freezeWait       = 2 * time.Second
	cpuPeriodMicros  = 100000
	v1ControllerList = "memory,pids,cpu,freezer"
)

// ErrCgroupNotEmpty: a cgroup still had processes after being killed and waited for.
var ErrCgroupNotEmpty = errors.New("cgroup not empty after kill")

// errNotFrozen: a v1 freezer group stayed FREEZING past freezeWait. Internal: the kill
// falls back to SIGKILL passes, and only a group still populated after them and after
// waitEmpty is an error (ErrCgroupNotEmpty, with the task states at that bound).
var errNotFrozen = errors.New("freezer did not reach FROZEN")

// cgEnv is what the host found at probe time.
type cgEnv struct {
	mode     string
	unified  string            // parent dir for run cgroups in the unified tree; "" = unusable
	v2Ctl    map[string]bool   // controllers enabled for children of unified (pure v2)
	v1       map[string]string // controller -> parent dir (hybrid/legacy), writable ones only
	ownV1    map[string]string // controller -> the host's own v1 group (to leave a run group)
	scope    string            // the systemd user manager's delegated scope it is in ("": none)
	warnings []string
}

func (e *cgEnv) writable() bool { return e.unified != "" || len(e.v1) > 0 }

// killMethod is how a whole tree dies in this environment.
func (e *cgEnv) killMethod() string {
	switch {
	case e.unified != "":
		return KillCgroup
	case e.v1["freezer"] != "":
		return KillFreezer
	}
	return KillPgroup
}

func probeCgroups(parent string) *cgEnv {
	e := &cgEnv{mode: CgroupNone, v1: map[string]string{}, v2Ctl: map[string]bool{}, ownV1: map[string]string{}}
	var unifiedMount string
	switch cgroups.Mode() {
	case cgroups.Unified:
		e.mode, unifiedMount = CgroupV2, cgroupRoot
	case cgroups.Hybrid:
		e.mode, unifiedMount = CgroupHybrid, filepath.Join(cgroupRoot, "unified")
	case cgroups.Legacy:
		e.mode = CgroupV1
	default:
		return e
	}
	own, ownUnified, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		e.warnings = append(e.warnings, "cannot read /proc/self/cgroup: "+err.Error())
		return e
	}
	pick := func(ownPath string) string {
		if parent != "" {
			return parent
		}
		return ownPath
	}
	if unifiedMount != "" {
		dir := filepath.Join(unifiedMount, pick(ownUnified))
		if canCreate(dir) {
			e.unified = dir
			if e.mode == CgroupV2 {
				e.v2Ctl = enableControllers(dir)
			}
		} else {
			e.warnings = append(e.warnings, "cannot create cgroups under "+dir)
		}
	}
	if e.mode != CgroupV2 {
		for _, ctl := range strings.Split(v1ControllerList, ",") {
			p, ok := own[ctl]
			if !ok {
				continue
			}
			e.ownV1[ctl] = filepath.Join(cgroupRoot, ctl, p)
			dir := filepath.Join(cgroupRoot, ctl, pick(p))
			if canCreate(dir) {
				e.v1[ctl] = dir
			} else {
				e.warnings = append(e.warnings, "cannot create cgroups under "+dir)
			}
		}
	}
	return e
}

// canCreate proves write access by creating and removing a probe group.
func canCreate(dir string) bool {
	probe := filepath.Join(dir, "fledge-probe-"+randomID())
	if err := os.Mkdir(probe, 0o755); err != nil {
		return false
	}
	return os.Remove(probe) == nil
}

// enableControllers turns on memory/pids/cpu for children of dir (pure v2). The kernel's
// "no internal processes" rule refuses this when dir itself holds processes (EBUSY) unless
// it is the root; limits are then reported as degraded.
func enableControllers(dir string) map[string]bool {
	got := map[string]bool{}
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return got
	}
	for _, c := range strings.Fields(string(avail)) {
		if c != "memory" && c != "pids" && c != "cpu" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0); err == nil {
			got[c] = true
		}
	}
	return got
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runCgroup is the set of groups of one run.
type runCgroup struct {
	// killMu serialises kill: the watchdog's kill and the one after the main process is
	// reaped (or a caller's Kill) can overlap, and one's THAWED must not land inside the
	// other's freeze (a group left FREEZING keeps its killed tasks from dying).
	killMu  sync.Mutex
	env     *cgEnv
	unified string            // run group in the unified tree ("" = none)
	fd      *os.File          // open unified group for CLONE_INTO_CGROUP
	v1      map[string]string // controller -> run group
}

// newRunCgroup creates the run's groups and writes limits. degraded lists limits that
// could not be applied.
func newRunCgroup(env *cgEnv, name string, lim *sandbox.Limits) (rc *runCgroup, degraded []string, err error) {
	rc = &runCgroup{env: env, v1: map[string]string{}}
	leaf := "fledge-" + sandbox.SafeName(name) + "-" + randomID()
	defer func() {
		if err != nil {
			rc.remove()
			rc = nil
		}
	}()
	if env.unified != "" {
		dir := filepath.Join(env.unified, leaf)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return rc, nil, fmt.Errorf("create cgroup: %w", err)
		}
		rc.unified = dir
		if rc.fd, err = os.Open(dir); err != nil {
			return rc, nil, fmt.Errorf("open cgroup: %w", err)
		}
		if env.mode == CgroupV2 {
			degraded = append(degraded, rc.limitV2(lim)...)
			return rc, degraded, nil
		}
	}
	want := map[string]bool{
		"memory":  lim.MemoryBytes > 0,
		"pids":    lim.Pids > 0,
		"cpu":     lim.CPU > 0,
		"freezer": env.unified == "", // only needed to kill without cgroup.kill
	}
	for ctl, need := range want {
		if !need {
			continue
		}
		parent, ok := env.v1[ctl]
		if !ok {
			if ctl != "freezer" {
				degraded = append(degraded, ctl+" limit (no writable v1 "+ctl+" cgroup)")
			}
			continue
		}
		dir := filepath.Join(parent, leaf)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return rc, nil, fmt.Errorf("create %s cgroup: %w", ctl, err)
		}
		rc.v1[ctl] = dir
	}
	if d := rc.v1["memory"]; d != "" {
		v := strconv.FormatInt(lim.MemoryBytes, 10)
		if err := writeFile(d, "memory.limit_in_bytes", v); err != nil {
			return rc, nil, err
		}
		// Swap accounting may be off (no memsw files); the plain limit still holds RAM.
		_ = writeFile(d, "memory.memsw.limit_in_bytes", v)
	}
	if d := rc.v1["pids"]; d != "" {
		if err := writeFile(d, "pids.max", strconv.FormatInt(lim.Pids, 10)); err != nil {
			return rc, nil, err
		}
	}
	if d := rc.v1["cpu"]; d != "" {
		if err := writeFile(d, "cpu.cfs_period_us", strconv.Itoa(cpuPeriodMicros)); err != nil {
			return rc, nil, err
		}
		if err := writeFile(d, "cpu.cfs_quota_us", strconv.Itoa(int(lim.CPU*cpuPeriodMicros))); err != nil {
			return rc, nil, err
		}
	}
	return rc, degraded, nil
}

func (rc *runCgroup) limitV2(lim *sandbox.Limits) (degraded []string) {
	set := func(ctl, file, val string) {
		if !rc.env.v2Ctl[ctl] {
			degraded = append(degraded, ctl+" limit (controller not enabled for fledge's cgroup)")
			return
		}
		if err := writeFile(rc.unified, file, val); err != nil {
			degraded = append(degraded, ctl+" limit ("+err.Error()+")")
		}
	}
	if lim.MemoryBytes > 0 {
		set("memory", "memory.max", strconv.FormatInt(lim.MemoryBytes, 10))
		if rc.env.v2Ctl["memory"] {
			_ = writeFile(rc.unified, "memory.swap.max", "0")
		}
	}
	if lim.Pids > 0 {
		set("pids", "pids.max", strconv.FormatInt(lim.Pids, 10))
	}
	if lim.CPU > 0 {
		set("cpu", "cpu.max", fmt.Sprintf("%d %d", int(lim.CPU*cpuPeriodMicros), cpuPeriodMicros))
	}
	return degraded
}

// joinFiles are the cgroup.procs files the stub must join itself (v1 controllers; the
// unified group is entered atomically with CLONE_INTO_CGROUP instead).
func (rc *runCgroup) joinFiles() []string {
	var out []string
	for _, d := range rc.v1 {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// v1Dirs are the run's v1 groups (the thread launcher joins them with one tid) and, for
// each, the host's own group in the same controller (where the thread goes back after
// the fork, so the run group can be removed without waiting for the thread to exit).
func (rc *runCgroup) v1Dirs() (run, back []string) {
	for ctl, d := range rc.v1 {
		run = append(run, d)
		back = append(back, rc.env.ownV1[ctl])
	}
	return run, back
}

// membersDir is a group that holds every process of the tree.
func (rc *runCgroup) membersDir() string {
	if rc.unified != "" {
		return rc.unified
	}
	for _, ctl := range []string{"freezer", "pids", "memory", "cpu"} {
		if d := rc.v1[ctl]; d != "" {
			return d
		}
	}
	return ""
}

// members lists the pids in the run's groups, never fledge's own: on v1, cgroup.procs lists
// the thread group of any thread inside, and a launch thread lingering in a run's group
// (it leaves right after the fork) must not make fledge signal itself.
func (rc *runCgroup) members() []int {
	d := rc.membersDir()
	if d == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil && n != self && n > 0 {
			pids = append(pids, n)
		}
	}
	return pids
}

// signal sends sig to every member (SIGTERM stage of a timeout).
func (rc *runCgroup) signal(sig syscall.Signal) []int {
	pids := rc.members()
	for _, p := range pids {
		_ = syscall.Kill(p, sig)
	}
	return pids
}

// kill SIGKILLs the whole tree with no window for a fork to escape: cgroup.kill where the
// unified tree has it, else freeze, kill every member, thaw. It returns the members seen.
func (rc *runCgroup) kill() ([]int, error) {
	pids := rc.members()
	if len(pids) == 0 {
		return nil, nil
	}
	if rc.unified != "" {
		if err := writeFile(rc.unified, "cgroup.kill", "1"); err == nil {
			return pids, nil
		}
		// Kernels before 5.14 lack cgroup.kill: freeze with cgroup.freeze instead.
		if err := writeFile(rc.unified, "cgroup.freeze", "1"); err == nil {
			pids = rc.killAll(syscall.SIGKILL)
			return pids, writeFile(rc.unified, "cgroup.freeze", "0")
		}
		return rc.killAll(syscall.SIGKILL), nil
	}
	if fz := rc.v1["freezer"]; fz != "" {
		return rc.killV1(fz)
	}
	return rc.killAll(syscall.SIGKILL), nil
}

// killV1 is the v1 freezer kill: freeze, SIGKILL every member, thaw. The group is thawed
// on every path, a failed freeze included: a killed task that froze dies only once
// thawed. If the group does not freeze within freezeWait, the members are killed without
// it, pass after pass until none is left (runc's signalAllProcesses does the same after
// a failed freeze); waitEmpty then keeps killing what remains, up to its bound.
func (rc *runCgroup) killV1(fz string) ([]int, error) {
	rc.killMu.Lock()
	defer rc.killMu.Unlock()
	ferr := freezeV1(fz, freezeWait)
	seen := map[int]bool{}
	for _, p := range rc.members() {
		seen[p] = true
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	err := writeFile(fz, "freezer.state", "THAWED")
	if ferr != nil {
		// Not frozen: a member could fork between the listing and its signal.
		for _, p := range rc.killAll(syscall.SIGKILL) {
			seen[p] = true
		}
		if !errors.Is(ferr, errNotFrozen) {
			err = errors.Join(ferr, err) // the freezer refused a write: worth reporting
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	return out, err
}

// killAll kills members repeatedly until none is left or the bound runs out (the path
// without a freezer, where a fork can race the listing).
func (rc *runCgroup) killAll(sig syscall.Signal) []int {
	seen := map[int]bool{}
	for i := 0; i < 100; i++ {
		pids := rc.members()
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			seen[p] = true
			_ = syscall.Kill(p, sig)
		}
		if rc.frozen() {
			break // frozen members cannot fork; one pass reached them all
		}
		time.Sleep(time.Millisecond)
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	return out
}

func (rc *runCgroup) frozen() bool {
	if fz := rc.v1["freezer"]; fz != "" {
		return freezerState(fz) == "FROZEN"
	}
	if rc.unified != "" {
		b, _ := os.ReadFile(filepath.Join(rc.unified, "cgroup.freeze"))
		return strings.TrimSpace(string(b)) == "1"
	}
	return false
}

// freezeV1 freezes a v1 freezer group and waits for FROZEN, bounded by wait.
//
// The kernel tries each task once per write of FROZEN. A task caught on its way into an
// uninterruptible but freezable sleep is only sent a wake-up that sleep ignores, and is
// never tried again: seen under load with a shell's vfork, the parent stuck in its wait
// for the child (D in kernel_clone) unfrozen, the child frozen before its exec, the group
// FREEZING for ever. So FROZEN is written again on every poll, which tries the stragglers
// once more (now asleep, they freeze), and every 50th try thaws for a moment first, so a
// burst of forks can settle: what runc's freezer does (libcontainer cgroups/fs/freezer.go).
func freezeV1(dir string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	delay := 50 * time.Microsecond
	for try := 1; ; try++ {
		if try%50 == 0 {
			if err := writeFile(dir, "freezer.state", "THAWED"); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
		if err := writeFile(dir, "freezer.state", "FROZEN"); err != nil {
			return err
		}
		if freezerState(dir) == "FROZEN" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %v (%d tries): %s", errNotFrozen, wait, try, taskStates(dir))
		}
		time.Sleep(delay)
		delay = min(delay*2, 5*time.Millisecond)
	}
}

func freezerState(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "freezer.state"))
	return strings.TrimSpace(string(b))
}

// taskStates describes the tasks of a v1 group for an error at a bound (which task held
// it up, and in which kernel function it sleeps): "FREEZING; tasks: 439 sh D kernel_clone, 440 sh D __refrigerator".
func taskStates(dir string) string {
	data, _ := os.ReadFile(filepath.Join(dir, "tasks"))
	var tasks []string
	for _, tid := range strings.Fields(string(data)) {
		desc := tid
		stat, _ := os.ReadFile("/proc/" + tid + "/stat")
		// "tid (comm) S ...": comm may hold spaces and parentheses, the last ')' ends it.
		if st := string(stat); strings.Contains(st, "(") {
			open, end := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
			if end > open && end+2 < len(st) {
				desc += " " + st[open+1:end] + " " + st[end+2:end+3]
			}
		}
		if wchan, _ := os.ReadFile("/proc/" + tid + "/wchan"); len(wchan) > 0 && string(wchan) != "0" {
			desc += " " + string(wchan)
		}
		tasks = append(tasks, desc)
	}
	out := "tasks: " + strings.Join(tasks, ", ")
	if st := freezerState(dir); st != "" {
		out = st + "; " + out
	}
	return out
}

// empty reports whether no process is left in the run's groups.
func (rc *runCgroup) empty() bool {
	if rc.unified != "" {
		data, err := os.ReadFile(filepath.Join(rc.unified, "cgroup.events"))
		if err == nil {
			return bytes.Contains(data, []byte("populated 0"))
		}
	}
	return len(rc.members()) == 0
}

// waitEmpty polls until the groups are empty, bounded by emptyWait. Without cgroup.kill
// it SIGKILLs what is left now and then: after a kill without the freezer (see killV1) a
// member may have forked after the last listing.
func (rc *runCgroup) waitEmpty() error {
	deadline := time.Now().Add(emptyWait)
	delay := 100 * time.Microsecond
	lastKill := time.Now()
	for !rc.empty() {
		if time.Now().After(deadline) {
			if d := rc.membersDir(); d != "" && rc.unified == "" {
				return fmt.Errorf("%w after %v: %s", ErrCgroupNotEmpty, emptyWait, taskStates(d))
			}
			return fmt.Errorf("%w after %v: %v", ErrCgroupNotEmpty, emptyWait, rc.members())
		}
		if rc.unified == "" && time.Since(lastKill) > 50*time.Millisecond {
			rc.signal(syscall.SIGKILL)
			lastKill = time.Now()
		}
		time.Sleep(delay)
		delay = min(delay*2, 10*time.Millisecond)
	}
	return nil
}

// stats reads OOM kills and peak memory before removal.
func (rc *runCgroup) stats() (oom bool, peak int64) {
	if rc.unified != "" && rc.env.mode == CgroupV2 {
		oom = keyValue(filepath.Join(rc.unified, "memory.events"), "oom_kill") > 0
		peak = readInt(filepath.Join(rc.unified, "memory.peak"))
		return oom, peak
	}
	if d := rc.v1["memory"]; d != "" {
		oom = keyValue(filepath.Join(d, "memory.oom_control"), "oom_kill") > 0
		peak = readInt(filepath.Join(d, "memory.max_usage_in_bytes"))
	}
	return oom, peak
}

// remove deletes the groups; each must be empty (bounded retry: the kernel can lag a
// moment behind the last exit).
func (rc *runCgroup) remove() error {
	if rc.fd != nil {
		rc.fd.Close()
	}
	var errs []error
	rm := func(dir string) {
		var err error
		for i := 0; i < 50; i++ {
			if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
				return
			}
			if !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		tasks, _ := os.ReadFile(filepath.Join(dir, "tasks"))
		errs = append(errs, fmt.Errorf("remove %s (tasks %q): %w", dir, strings.Fields(string(tasks)), err))
	}
	for _, d := range rc.v1 {
		if fz := rc.v1["freezer"]; fz == d {
			_ = writeFile(d, "freezer.state", "THAWED")
		}
		rm(d)
	}
	if rc.unified != "" {
		rm(rc.unified)
	}
	return errors.Join(errs...)
}

func writeFile(dir, name, val string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

func keyValue(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
