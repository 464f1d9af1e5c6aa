package platform

import (
	"os"

	"golang.org/x/sys/unix"
)

// MmapCodeFile maps size bytes of f at off (a multiple of the page size) as read-only
// executable code, private to this process: a compilation cache entry's machine code used
// where it lies in the page cache instead of copied into fresh memory. (fledge patch)
//
// The file must not be modified in place while the mapping lives (a change to a page not
// yet copied shows through a private mapping, and a truncation faults): the compilation
// cache replaces an entry by renaming a new file over it and never writes one in place.
// A mount that forbids executable mappings (noexec) makes this fail; the caller then copies
// the code instead.
func MmapCodeFile(f *os.File, off int64, size int) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), off, size, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
}
