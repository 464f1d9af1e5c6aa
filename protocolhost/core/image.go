// SPDX-License-Identifier: MIT

package core

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/sandbox"
)

// defaultImagePath is the PATH of an image that sets none (docker's default).
const defaultImagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ImageRun makes spec (the plugin's profile, policy.ImageAccess) a run of the image plugin
// b: the image's filesystem (rootfs/ of its plugin dir) is the root of the view, its argv
// runs in its working dir with its environment. The image's USER is not taken: the server
// runs as the user who runs fledge, whose files the unpacked image's are. fledge's own
// variables (FLEDGE_*, granted secrets, the session CA's) win over the image's; the
// host's others (PATH, HOME, ...) are not passed: HOME is the data dir, the plugin's one
// writable place. A no-op for any other plugin.
func ImageRun(b *Binding, spec *sandbox.Spec) {
	im := b.Manifest.Image
	if !b.Manifest.IsImage() || im == nil {
		return
	}
	dir := b.Paths.PluginDir
	if dir == "" {
		dir = b.Dir
	}
	spec.Root = filepath.Join(dir, plugin.ImageRootDir)
	spec.RootDir = im.WorkDir
	spec.Path = im.Argv[0]
	spec.Args = append([]string{}, im.Argv...)
	spec.Env = imageEnv(im.Env, spec.Env, spec.SecretNames, b.DataDir)
}

// fledgeVar: a variable of the host's environment an image plugin still gets: its own
// FLEDGE_*, a granted secret, or what fledge sets for the session's CA (ca.go).
func fledgeVar(k string, secrets []string) bool {
	return strings.HasPrefix(k, "FLEDGE_") || slices.Contains(secrets, k) || slices.Contains(caEnv, k)
}

func imageEnv(image, host, secrets []string, home string) []string {
	out := []string{}
	idx := map[string]int{}
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			return
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	set("PATH=" + defaultImagePath)
	set("HOME=" + home)
	for _, kv := range image {
		set(kv)
	}
	for _, kv := range host {
		// FLEDGE_PLUGIN_DIR is left out: the plugin dir is not in an image's view.
		if k, _, _ := strings.Cut(kv, "="); fledgeVar(k, secrets) && k != "FLEDGE_PLUGIN_DIR" {
			set(kv)
		}
	}
	return out
}
