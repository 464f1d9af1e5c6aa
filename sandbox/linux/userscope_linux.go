// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/godbus/dbus/v5"
)

// Resource limits for an ordinary user. A user's processes sit in cgroups systemd owns,
// which the user cannot write, so fledge has no cgroup of its own to put a run's limits
// in. Where a systemd user manager runs it hands one out on request, as it does to rootless
// podman and crun: a transient scope (StartTransientUnit on the user's session bus) with
// Delegate=yes, holding this process, whose subtree the user then owns. fledge moves
// itself into a leaf of it (fledge-host: the kernel lets a group with processes of its
// own have no controllers for its children) and makes each run's group beside that leaf,
// exactly as with a writable cgroup. Elsewhere runs keep their rlimits and the tree kill
// of their pid namespace or process group.

// errNoUserManager: nothing answers for systemd's manager on the user's session bus.
var errNoUserManager = errors.New("no systemd user manager on the session bus")

// errNoSessionBus: no session bus to ask.
var errNoSessionBus = errors.New("no D-Bus session bus")

// scopeWait bounds the whole request (connect, the call, the move).
const scopeWait = 5 * time.Second

// sessionBusAddress is the user's session bus: DBUS_SESSION_BUS_ADDRESS, else the
// socket a systemd user session keeps in XDG_RUNTIME_DIR.
func sessionBusAddress() (string, error) {
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" {
		return a, nil
	}
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = "/run/user/" + strconv.Itoa(os.Getuid())
	}
	p := filepath.Join(dir, "bus")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w (DBUS_SESSION_BUS_ADDRESS unset, no %s)", errNoSessionBus, p)
	}
	return "unix:path=" + p, nil
}

// delegatedScope asks the user manager at addr for a delegated scope holding this process,
// moves this process into its leaf, and returns the scope's path in the unified hierarchy
// (the parent of the runs' groups).
func delegatedScope(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scopeWait)
	defer cancel()
	conn, err := dbus.Dial(addr, dbus.WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("%w: %w", errNoSessionBus, err)
	}
	defer conn.Close()
	if err := conn.Auth(nil); err != nil {
		return "", fmt.Errorf("%w: auth: %w", errNoSessionBus, err)
	}
	if err := conn.Hello(); err != nil {
		return "", fmt.Errorf("%w: hello: %w", errNoSessionBus, err)
	}
	// Asked first, with no effect: is a manager there at all?
	var owner string
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", 0, "org.freedesktop.systemd1").Store(&owner); err != nil {
		var de dbus.Error
		if errors.As(err, &de) {
			return "", fmt.Errorf("%w (%s)", errNoUserManager, de.Name)
		}
		return "", fmt.Errorf("%w: %w", errNoSessionBus, err)
	}
	if cgroups.Mode() != cgroups.Unified {
		return "", errors.New("a delegated scope needs the unified cgroup hierarchy (cgroup v2)")
	}
	type prop struct {
		Name  string
		Value dbus.Variant
	}
	type aux struct {
		Name  string
		Props []prop
	}
	unit := "fledge-" + strconv.Itoa(os.Getpid()) + "-" + randomID() + ".scope"
	props := []prop{
		{"Description", dbus.MakeVariant("fledge plugin runs")},
		{"PIDs", dbus.MakeVariant([]uint32{uint32(os.Getpid())})},
		{"Delegate", dbus.MakeVariant(true)},
	}
	obj := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	var job dbus.ObjectPath
	err = obj.CallWithContext(ctx, "org.freedesktop.systemd1.Manager.StartTransientUnit", 0, unit, "fail", props, []aux{}).Store(&job)
	if err != nil {
		return "", fmt.Errorf("StartTransientUnit: %w", err)
	}
	// The manager moves this process when it starts the scope: wait for it (bounded).
	var rel string
	for {
		_, own, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
		if err == nil && strings.HasSuffix(own, "/"+unit) {
			rel = own
			break
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the scope %s did not take this process in time", unit)
		case <-time.After(10 * time.Millisecond):
		}
	}
	scope := filepath.Join(cgroupRoot, rel)
	leaf := filepath.Join(scope, "fledge-host")
	if err := os.Mkdir(leaf, 0o755); err != nil {
		return "", fmt.Errorf("scope %s: %w", scope, err)
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return "", fmt.Errorf("scope %s: move into its leaf: %w", scope, err)
	}
	return rel, nil
}

// userScope is the delegated scope of this process (delegatedScope, asked once).
var userScope = sync.OnceValues(func() (string, error) {
	addr, err := sessionBusAddress()
	if err != nil {
		return "", err
	}
	return delegatedScope(addr)
})

// userScopeCgroups is the cgroup environment of an ordinary user whose own cgroup is not
// writable: a delegated scope's, or e with why there is none among its warnings.
// Asked once per process: this process is then in the scope's leaf, and every later
// sandbox of it makes its runs' groups in the same scope.
func userScopeCgroups(e *cgEnv) *cgEnv {
	rel, err := userScope()
	if err == nil {
		if s := probeCgroups(rel); s.writable() {
			s.scope = rel
			return s
		}
		err = errors.New("the delegated scope is not writable")
	}
	e.warnings = append(e.warnings, "no delegated cgroup from a systemd user manager ("+err.Error()+")")
	return e
}
