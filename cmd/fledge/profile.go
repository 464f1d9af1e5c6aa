// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles turns on the profiles `make bench` uses to explain its figures:
// FLEDGE_CPUPROFILE=file (CPU, for the whole command) and FLEDGE_MEMPROFILE=file (heap
// allocations, written at exit). Unset, they cost nothing. The returned func stops them.
func startProfiles() func() {
	cpu, mem := os.Getenv("FLEDGE_CPUPROFILE"), os.Getenv("FLEDGE_MEMPROFILE")
	if cpu == "" && mem == "" {
		return func() {}
	}
	var cpuFile *os.File
	if cpu != "" {
		f, err := os.Create(cpu)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "fledge: warning: FLEDGE_CPUPROFILE: %v\n", err)
		} else {
			cpuFile = f
		}
	}
	if mem != "" {
		runtime.MemProfileRate = 64 << 10
	}
	return func() {
		if cpuFile != nil {
			pprof.StopCPUProfile()
			_ = cpuFile.Close()
		}
		if mem != "" {
			f, err := os.Create(mem)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "fledge: warning: FLEDGE_MEMPROFILE: %v\n", err)
			}
		}
	}
}
