// SPDX-License-Identifier: MIT

//go:build unix

package jsonrpc

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// pollableInput is the host's input read through Go's poller when it is a pipe or socket
// (a host's usual stdin): a goroutine waiting for the next request then parks instead of
// holding a thread in read(2), whose processor the scheduler takes back only after a
// sysmon tick, which the call being answered meanwhile waits for. Anything else (a
// terminal, a file, a reader that is no file) is read as it is. restore puts the input back
// in blocking mode: the open file description is shared with whoever passed it on.
func pollableInput(in io.Reader) (r io.Reader, restore func()) {
	f, ok := in.(*os.File)
	if !ok {
		return in, func() {}
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return in, func() {}
	}
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return in, func() {}
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return in, func() {}
	}
	pf := os.NewFile(uintptr(fd), f.Name())
	return pf, func() {
		_ = unix.SetNonblock(fd, false)
		_ = pf.Close()
	}
}
