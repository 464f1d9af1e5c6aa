// SPDX-License-Identifier: MIT

package policy

import "github.com/fledgehq/fledge/sandbox"

// ImageAccess is the filesystem of an image plugin (runtime = "oci"), whose image is the
// root of its view (sandbox.Spec.Root): none of the host's system paths, PATH entries,
// toolchains or its own plugin dir (the image has its own programs and libraries); only
// the harmless devices, /proc, its data dir read-write, and what its grants give (the
// project read-only at filesystem = "project", its read grants). The deny list is the
// same as every plugin's.
func ImageAccess(p Paths, g Grants, c *Config, read []string) sandbox.Access {
	a := sandbox.Access{
		ReadOnly:  append(append([]string{}, DeviceReadOnly...), ProcReadOnly...),
		ReadWrite: append([]string{}, DeviceReadWrite...),
		Deny:      denyList(p),
		Unprotect: unprotect(c),
	}
	a.ReadWrite = addIf(a.ReadWrite, p.PluginDataDir)
	if g.FS() == FilesystemProject {
		a.ReadOnly = addIf(a.ReadOnly, p.ProjectRoot)
	}
	a.ReadOnly = append(a.ReadOnly, readGrants(read, p)...)
	return a
}
