// SPDX-License-Identifier: MIT

package linux

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// viewTemplates caches the view templates of the thread launcher (kernel.Template): the
// runs of a session share their grants, so after the first run's template each run only
// copies it and adds its working directory and TMPDIR. A template is keyed by everything
// it is built from, and checked before each use: a granted path replaced on disk since
// (another inode at the same path) makes a new one.
type viewTemplates struct {
	mu    sync.Mutex
	m     map[string]*viewTemplate
	order []string
}

// maxViewTemplates bounds the cache (each holds two fds and a mount namespace).
const maxViewTemplates = 16

type viewTemplate struct {
	t       *kernel.Template
	ids     map[string]fileID
	refs    int  // runs that hold it (launching, or with a TMPDIR mount point in it)
	evicted bool // out of the cache: closed once refs reach 0
}

type fileID struct{ dev, ino uint64 }

func newViewTemplates() *viewTemplates { return &viewTemplates{m: map[string]*viewTemplate{}} }

// templateKey is v without what is the run's own.
func templateKey(v *kernel.View) (string, error) {
	base := struct {
		Mounts    []kernel.ViewMount
		Protected []string
		Pin       []string
		Writable  []string
		Proc      string // the procfs (dev:ino): a template holds its namespace's /proc
		// The covers in it: a run sharing fledge's network namespace has its secrets
		// covered besides (NetRootOnlyProc), one denied the network does not.
		ProcMask []string
		// The files shown: a template of one session's CA bundle is never another's.
		Files []kernel.ViewFile
	}{Protected: v.Protected, Pin: v.Pin, Writable: v.Writable, ProcMask: v.ProcMask, Files: v.Files}
	for _, m := range v.Mounts {
		if m.Path != v.RunTmp || v.RunTmp == "" {
			base.Mounts = append(base.Mounts, m)
		}
	}
	if v.ProcTree > 2 {
		var st unix.Stat_t
		if err := unix.Fstat(v.ProcTree, &st); err != nil {
			return "", err
		}
		base.Proc = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	}
	b, err := json.Marshal(base)
	return string(b), err
}

// identities are the (dev, ino) of every granted, protected and pinned path and covered
// network sysctl right now (zero: absent); an error when the sysctls cannot be looked up
// (the run then builds its view afresh). A protected path replaced on disk (git renames config.lock over
// .git/config; hooks removed and made again) drops the template's read-only mount on it in
// every namespace, so it must make a new template, as a replaced grant does.
func identities(v *kernel.View) (map[string]fileID, error) {
	ids := map[string]fileID{}
	for _, paths := range [][]string{v.Protected, v.Pin, v.Writable} {
		for _, p := range paths {
			var st unix.Stat_t
			if unix.Lstat(p, &st) == nil {
				ids["protected:"+p] = fileID{st.Dev, st.Ino}
			} else {
				ids["protected:"+p] = fileID{}
			}
		}
	}
	// A network sysctl the view covers (sys/net/...: its interface's) that was made again
	// since (the interface removed and added under the same name: a VPN's tun0) is a new
	// dentry, which the template's cover is not on: a new template covers it.
	// Looked up in a procfs that shows them: fledge's /proc may show processes only
	// (subset=pid), where every cover would read as absent and never change. Only for a
	// run with such covers: a run denied the network pays nothing.
	proc := ""
	for _, name := range v.ProcMask {
		if !strings.HasPrefix(name, "sys/") {
			continue // the kernel's own files: there for its life
		}
		if proc == "" {
			var err error
			if proc, err = kernel.FullProc(); err != nil {
				return nil, err
			}
		}
		var st unix.Stat_t
		switch err := unix.Lstat(proc+"/"+name, &st); err {
		case nil:
			ids["proc:"+name] = fileID{st.Dev, st.Ino}
		case unix.ENOENT:
			ids["proc:"+name] = fileID{} // the interface is gone: its cover is skipped too
		default:
			// Any other failure would read as "absent" on every run and keep an old
			// template whose cover may be gone: no template (a fresh view) instead.
			return nil, fmt.Errorf("cover %s: %w", name, err)
		}
	}
	// A file shown, or the file it is shown over, replaced on disk since (the host's
	// bundle renamed over by update-ca-certificates drops the template's mount on the old
	// one): a new template shows it again.
	for _, f := range v.Files {
		for _, p := range []string{f.Source, f.Path} {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil {
				ids["file:"+p] = fileID{st.Dev, st.Ino}
			} else {
				ids["file:"+p] = fileID{}
			}
		}
	}
	for _, m := range v.Mounts {
		if m.Path == v.RunTmp && v.RunTmp != "" {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(m.Path, &st) == nil {
			ids[m.Path] = fileID{st.Dev, st.Ino}
		} else {
			ids[m.Path] = fileID{}
		}
	}
	return ids, nil
}

func sameIDs(a, b map[string]fileID) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// acquire returns a template for v (built now if needed), held until release. A view that
// no template fits, or a build that fails, gives nil: the run builds its view afresh.
func (c *viewTemplates) acquire(v *kernel.View) *viewTemplate {
	key, err := templateKey(v)
	if err != nil {
		return nil
	}
	ids, err := identities(v)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if vt := c.m[key]; vt != nil {
		if sameIDs(vt.ids, ids) {
			vt.refs++
			return vt
		}
		c.evictLocked(key)
	}
	t, err := buildTemplate(v)
	if err != nil {
		return nil
	}
	vt := &viewTemplate{t: t, ids: ids, refs: 1}
	if len(c.order) >= maxViewTemplates {
		c.evictLocked(c.order[0])
	}
	c.m[key] = vt
	c.order = append(c.order, key)
	return vt
}

func (c *viewTemplates) evictLocked(key string) {
	vt := c.m[key]
	delete(c.m, key)
	for i, k := range c.order {
		if k == key {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
	if vt != nil {
		vt.evicted = true
		if vt.refs == 0 {
			vt.t.Close()
		}
	}
}

// release ends a run's hold, after removing its TMPDIR mount point (runTmp, "" for none).
func (c *viewTemplates) release(vt *viewTemplate, runTmp string) error {
	err := vt.t.RemoveRunTmp(runTmp)
	c.mu.Lock()
	defer c.mu.Unlock()
	vt.refs--
	if vt.refs == 0 && vt.evicted {
		vt.t.Close()
	}
	return err
}

// close drops every cached template (runs still holding one close it on release).
func (c *viewTemplates) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.order) > 0 {
		c.evictLocked(c.order[0])
	}
}

// buildTemplate builds on a throwaway thread (its namespace is left behind in the fd).
func buildTemplate(v *kernel.View) (*kernel.Template, error) {
	var t *kernel.Template
	var err error
	onDiscardedThread(func() { t, err = kernel.BuildTemplate(v) })
	if err != nil {
		return nil, fmt.Errorf("view template: %w", err)
	}
	return t, nil
}
